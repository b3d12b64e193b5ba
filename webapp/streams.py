"""Slots for Server-Sent Event streams: each open stream holds a gunicorn thread, so they are counted.

A web process serves at most ``Settings.event_streams_per_process`` streams at once (below
gunicorn's 16 threads per worker, so ``/healthz`` and the API always find a thread) and at most
``Settings.event_streams_per_client`` for one client; a stream beyond either is answered 429
with ``Retry-After``, and the browser or ``photomosaics submit`` polls the job meanwhile. Every
stream also ends after ``SSE_MAX_SECONDS`` with a reconnect hint, so a slot is never held for
good by a client that went quiet: the client comes back through the same door and is counted
again. The counts are per process, in memory: a stream lives in one process, and so does the
thread it holds. With the defaults (2 per client, 8 per process) no three clients can fill a
process: a fourth always finds its two slots (``tests/web/test_event_streams.py``).

When the process is told to stop (SIGTERM: a deploy, a scale-in, Ctrl-C of ``photomosaics
run``; ``gunicorn_conf.post_worker_init`` calls ``stop_streams``) every open stream ends at
once with the same reconnect hint, and the client follows the job from another process: a
stream would otherwise hold its worker until its next keep-alive write found the client gone,
or until gunicorn's graceful timeout.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from flask import Flask, current_app

__all__ = ["RETRY_AFTER_SECONDS", "StreamSlots", "init_app", "slots", "stop_streams", "stopping"]

RETRY_AFTER_SECONDS = 5
_EXTENSION = "photomosaics.streams"
_stopping = threading.Event()  # set once, when this process is told to stop


def stop_streams() -> None:
    """Tell every open stream of this process to end now, with a reconnect hint."""
    _stopping.set()


def stopping(seconds: float = 0.0) -> bool:
    """Whether this process is stopping; waits up to ``seconds`` for it (a stream's poll pause)."""
    return _stopping.wait(seconds) if seconds > 0 else _stopping.is_set()


class StreamSlots:
    """Open streams per client and in all, for one process."""

    def __init__(self, *, per_client: int, per_process: int) -> None:
        self.per_client = per_client
        self.per_process = per_process
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._open.values())

    def take(self, client: str) -> Callable[[], None] | str:
        """A release function for a new stream of ``client``, or why there is no slot for it."""
        with self._lock:
            if sum(self._open.values()) >= self.per_process:
                return f"this server follows {self.per_process} event streams at once; poll the job meanwhile"
            if self._open[client] >= self.per_client:
                return f"at most {self.per_client} event streams per client; close one or poll the job"
            self._open[client] += 1
        released: list[bool] = []

        def release() -> None:
            with self._lock:
                if released:
                    return
                released.append(True)
                self._open[client] -= 1
                if self._open[client] <= 0:
                    del self._open[client]

        return release


def init_app(app: Flask, *, per_client: int, per_process: int) -> None:
    app.extensions[_EXTENSION] = StreamSlots(per_client=per_client, per_process=per_process)


def slots() -> StreamSlots:
    found: StreamSlots = current_app.extensions[_EXTENSION]
    return found
