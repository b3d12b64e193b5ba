"""Work-detected hints (seed 001's push model): "queue X just got work", never the work itself.

A producer calls ``publish(queue_name)`` right after a send succeeded (``dal.queues`` does it
for every ``submit``); a listener that hears the hint polls at once instead of waiting out
its idle back-off. Messages stay in Azure Storage queues, at-least-once as before: a hint
that is lost, late or duplicated costs at most one poll interval (the listener's cap), never
a message. That is what lets an idle listener poll rarely (``poll_max_hinted``, 60 s).

The channel on one machine is **Unix datagram sockets in one folder**
(``PHOTOMOSAICS_HINT_DIR``; ``photomosaics run`` sets ``.data/hints``): every subscriber binds
``<queue>.<pid>.<n>.sock``; a publisher sends one tiny datagram to each socket of that queue.
No extra service, no connection, no blocking (a full socket buffer drops the hint, which is
fine), and a socket left by a killed process is unlinked by the first publisher that finds
nobody behind it. Across machines there is nothing to share, so without the variable
``channel_from_env`` returns ``None`` and the roles poll with the plain cap.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["HINT_DIR_ENV", "LocalHintChannel", "Subscription", "channel_from_env", "short_hint_dir"]

log = logging.getLogger(__name__)

HINT_DIR_ENV = "PHOTOMOSAICS_HINT_DIR"
_SUFFIX = ".sock"
_MAX_PATH = 100  # sun_path holds 108 bytes; keep room for the file name's growth
_counter = itertools.count()


def short_hint_dir(preferred: Path) -> Path:
    """``preferred``, or a short folder under the temp dir when socket paths would be too long."""
    if len(str(preferred)) + 40 <= _MAX_PATH:
        return preferred
    digest = hashlib.sha1(str(preferred).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"pm-hints-{digest}"


class Subscription:
    """One bound socket and the thread that turns each datagram into ``on_hint()``."""

    def __init__(self, path: Path, on_hint: Callable[[], None]) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._on_hint = on_hint
        self._closed = threading.Event()
        self.received = 0
        self._thread = threading.Thread(target=self._loop, name=f"hints-{path.name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._closed.is_set():
            try:
                data = self._sock.recv(64)
            except OSError:
                return  # closed
            if self._closed.is_set() or data == b"close":
                return
            self.received += 1
            try:
                self._on_hint()
            except Exception:
                log.exception("hint handler failed")

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):  # wake the blocked recv
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as poke:
                poke.sendto(b"close", str(self.path))
        self._thread.join(timeout=2)
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class LocalHintChannel:
    """Hints between the processes of one machine that share ``folder``."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.published = 0
        self.delivered = 0

    def __repr__(self) -> str:
        return f"LocalHintChannel({str(self.folder)!r})"

    def subscribe(self, queue_name: str, on_hint: Callable[[], None]) -> Subscription:
        path = self.folder / f"{queue_name}.{os.getpid()}.{next(_counter)}{_SUFFIX}"
        if len(str(path)) > _MAX_PATH + 7:
            raise ValueError(f"hint socket path too long ({len(str(path))} bytes): {path}; use a shorter {HINT_DIR_ENV}")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return Subscription(path, on_hint)

    def publish(self, queue_name: str) -> int:
        """Tell every listener of ``queue_name`` on this machine; returns how many were told."""
        self.published += 1
        told = 0
        try:
            paths = list(self.folder.glob(f"{queue_name}.*{_SUFFIX}"))
        except OSError:
            return 0
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            for path in paths:
                try:
                    sock.sendto(b"w", str(path))
                    told += 1
                except OSError as exc:
                    if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):  # its process is gone
                        with contextlib.suppress(OSError):
                            path.unlink()
                    # EAGAIN: its buffer is full of hints already; one more adds nothing
        self.delivered += told
        return told


_env_channel: tuple[str, LocalHintChannel | None] | None = None


def channel_from_env() -> LocalHintChannel | None:
    """The channel ``PHOTOMOSAICS_HINT_DIR`` names (one per process), or None: poll only."""
    global _env_channel
    folder = os.environ.get(HINT_DIR_ENV, "")
    if _env_channel is None or _env_channel[0] != folder:
        channel = None
        if folder:
            try:
                channel = LocalHintChannel(folder)
            except OSError as exc:
                log.warning("hint folder %s is unusable (%s); polling only", folder, exc)
        _env_channel = (folder, channel)
    return _env_channel[1]
