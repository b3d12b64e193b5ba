"""Wake-up hints (push instead of polling): "queue X just got work", never the work itself.

A producer calls ``publish(queue_name)`` right after a send succeeded (``dal.queues.work_queue`` does it
for every ``submit``); a listener that hears the hint polls at once instead of waiting out
its idle back-off. Messages stay in Azure Storage queues, at-least-once as before: a hint
that is lost, late or duplicated costs at most one poll interval (the listener's cap), never
a message. That is what lets an idle listener poll rarely (``poll_max_hinted``, 60 s).

The channel on one machine is **Unix datagram sockets in one folder**
(``PHOTOMOSAICS_HINT_DIR``; ``photomosaics run`` sets ``.data/hints``): every subscriber binds
``<queue>.<pid>.<n>.sock``; a publisher sends one tiny datagram to each socket of that queue.
No extra service, no connection, no blocking (a full socket buffer drops the hint, which is
fine), and a socket left by a killed process is unlinked by the first publisher that finds
nobody behind it.

Across machines, ``PHOTOMOSAICS_HINTS_URL`` (``redis://host:6379/0``) adds a Redis/Valkey
pub/sub server (``dal.hints.pubsub``) behind the same two calls. With both variables (``make
run`` pointed at a shared server) a hint goes both ways and a listener hears either
(``FanoutHintChannel``). With neither, ``channel_from_env`` returns ``None`` and the roles poll
with the plain cap (``poll_max``, 2 s). A subscription that cannot hear hints right now (its
server is down) says so (``healthy``), and its listener polls with the plain cap meanwhile.

The interface, all a listener and a sender use: ``subscribe(queue, on_hint) -> Subscription``
(``.healthy``, ``.received``, ``.close()``) and ``publish(queue, count=None, lane=None) -> int``
(how many were told; never raises for a delivery problem).

A hint may say how many messages the send put on the queue and in which priority lane
(``w``, ``w<count>``, ``w<count>@<lane>``: ``dal.hints.payload``), and ``on_hint(count, lane)``
hears it (None: unknown, as for a hand-back, a reconnect, or an older publisher). A listener
uses it to tell "the one message I just took was all there was" from "there is more" without
an empty receive that proves it (``workers.runtime.listener``: hint credit), and which lanes are worth
a call (``dal.queues.lanes``); it is still only a hint: a wrong or lost one costs a poll or one
safety-net wait, never a message.
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
from pathlib import Path
from typing import Protocol

from dal.config import Settings
from dal.connection_strings import account_name
from dal.hints.payload import OnHint, OnTaken, hint_count, hint_lane, hint_payload, hint_taken
from dal.hints.pubsub import RedisHintChannel

__all__ = [
    "HINTS_URL_ENV",
    "HINT_DIR_ENV",
    "FanoutHintChannel",
    "HintChannel",
    "HintSubscription",
    "LocalHintChannel",
    "Subscription",
    "channel_from_env",
    "make_channel",
    "short_hint_dir",
]

log = logging.getLogger(__name__)

HINT_DIR_ENV = "PHOTOMOSAICS_HINT_DIR"
HINTS_URL_ENV = "PHOTOMOSAICS_HINTS_URL"
_SUFFIX = ".sock"
_MAX_PATH = 100  # sun_path holds 108 bytes; keep room for the file name's growth
_counter = itertools.count()


def short_hint_dir(preferred: Path) -> Path:
    """``preferred``, or a short folder under the temp dir when socket paths would be too long."""
    if len(str(preferred)) + 40 <= _MAX_PATH:
        return preferred
    digest = hashlib.sha1(str(preferred).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"pm-hints-{digest}"


class HintSubscription(Protocol):
    @property
    def received(self) -> int: ...

    @property
    def healthy(self) -> bool: ...

    def close(self) -> None: ...


class HintChannel(Protocol):
    """What listeners and senders need of a hint channel, local or across machines."""

    def subscribe(self, queue_name: str, on_hint: OnHint, on_taken: OnTaken | None = None) -> HintSubscription: ...

    def publish(
        self, queue_name: str, count: int | None = None, lane: int | None = None, *, taken_by: str | None = None
    ) -> int: ...


class Subscription:
    """One bound socket and the thread that turns each datagram into ``on_hint(count)``."""

    healthy = True  # a bound socket in our own folder hears every local hint

    def __init__(self, path: Path, on_hint: OnHint, on_taken: OnTaken | None = None) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._on_hint = on_hint
        self._on_taken = on_taken
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
            try:
                if (taken := hint_taken(data)) is not None:
                    if self._on_taken is not None:
                        self._on_taken(*taken)
                    continue
                self.received += 1
                self._on_hint(hint_count(data), hint_lane(data))
            except Exception:
                log.exception("hint handler failed")

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        # wake the blocked recv
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as poke:
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

    def subscribe(self, queue_name: str, on_hint: OnHint, on_taken: OnTaken | None = None) -> Subscription:
        path = self.folder / f"{queue_name}.{os.getpid()}.{next(_counter)}{_SUFFIX}"
        if len(str(path)) > _MAX_PATH + 7:
            raise ValueError(
                f"hint socket path too long ({len(str(path))} bytes): {path}; use a shorter {HINT_DIR_ENV}"
            )
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return Subscription(path, on_hint, on_taken)

    def publish(
        self, queue_name: str, count: int | None = None, lane: int | None = None, *, taken_by: str | None = None
    ) -> int:
        """Tell every listener of ``queue_name`` on this machine (that ``count`` messages were
        sent, to ``lane``, if given; with ``taken_by``, that this listener took ``count``);
        returns how many were told."""
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
                    sock.sendto(hint_payload(count, lane, taken_by=taken_by), str(path))
                    told += 1
                except OSError as exc:
                    if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):  # its process is gone
                        with contextlib.suppress(OSError):
                            path.unlink()
                    # EAGAIN: its buffer is full of hints already; one more adds nothing
        self.delivered += told
        return told


class _FanoutSubscription:
    def __init__(self, parts: list[HintSubscription]) -> None:
        self.parts = parts

    @property
    def received(self) -> int:
        return sum(part.received for part in self.parts)

    @property
    def healthy(self) -> bool:  # deaf to any of them: some sends reach us by polling only
        return all(part.healthy for part in self.parts)

    def close(self) -> None:
        for part in self.parts:
            part.close()


class FanoutHintChannel:
    """Several channels as one: publish on each, hear any (a duplicate hint is one extra poll)."""

    def __init__(self, channels: list[HintChannel]) -> None:
        self.channels = channels

    def __repr__(self) -> str:
        return f"FanoutHintChannel({self.channels!r})"

    def subscribe(self, queue_name: str, on_hint: OnHint, on_taken: OnTaken | None = None) -> _FanoutSubscription:
        parts: list[HintSubscription] = []
        try:
            for channel in self.channels:
                parts.append(channel.subscribe(queue_name, on_hint, on_taken))
        except BaseException:
            for part in parts:
                part.close()
            raise
        return _FanoutSubscription(parts)

    def publish(
        self, queue_name: str, count: int | None = None, lane: int | None = None, *, taken_by: str | None = None
    ) -> int:
        # On both channels a peer hears a local hint twice (one empty receive at worst) and a
        # taken notice twice: the listener counts each notice once (its "<sender>.<n>" name).
        return sum(channel.publish(queue_name, count, lane, taken_by=taken_by) for channel in self.channels)


def _account_name() -> str:
    """The storage account of this process (a hint namespace on a shared pub/sub server)."""
    return account_name(Settings.from_env().connection_string or "")


def make_channel(*, folder: str = "", url: str = "", namespace: str = "") -> HintChannel | None:
    """The local channel in ``folder``, the server at ``url``, both (fan-out), or None."""
    channels: list[HintChannel] = []
    if folder:
        try:
            channels.append(LocalHintChannel(folder))
        except OSError as exc:
            log.warning("hint folder %s is unusable (%s); polling only", folder, exc)
    if url:
        channels.append(RedisHintChannel(url, namespace=namespace))
    if len(channels) > 1:
        return FanoutHintChannel(channels)
    return channels[0] if channels else None


_env_channel: tuple[tuple[str, str], HintChannel | None] | None = None


def channel_from_env() -> HintChannel | None:
    """The channel ``PHOTOMOSAICS_HINT_DIR`` and ``PHOTOMOSAICS_HINTS_URL`` name (one per process),
    or None: poll only. A malformed URL raises ``ValueError`` (a start-up error, said plainly)."""
    global _env_channel
    key = (os.environ.get(HINT_DIR_ENV, ""), os.environ.get(HINTS_URL_ENV, "").strip())
    if _env_channel is None or _env_channel[0] != key:
        _env_channel = (key, make_channel(folder=key[0], url=key[1], namespace=_account_name()))
    return _env_channel[1]
