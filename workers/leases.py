"""Holding a message: its current pop receipt, and the thread that keeps its lease alive.

A received message is invisible for the visibility timeout. ``LeaseKeeper`` extends every
held message (running or waiting) once half of that time has passed, so a slow handler
never loses its message to another worker, and it stores the new pop receipt: the old one
stops working after an update, and the final delete must use the newest. ``HeldMessage.lock``
serialises the receipt between renewal, the final delete and a release on stop.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dal.queues import ImageProcessingQueue, ReceivedMessage

__all__ = ["HeldMessage", "LeaseKeeper"]


@dataclasses.dataclass(eq=False)
class HeldMessage:
    """One message in a listener's hands."""

    received: ReceivedMessage  # the delivery the handler sees (original pop receipt)
    current: ReceivedMessage  # the latest pop receipt (after renewals)
    leased_at: float  # monotonic time the current invisibility started (or earlier)
    future: Future[None] | None = None
    running: bool = False
    done: bool = False  # deleted, released or poisoned: nothing more to do
    lost: bool = False  # a renewal found someone else owns it
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class LeaseKeeper(threading.Thread):
    """Renews the held messages' invisibility at half-time until ``stop``.

    ``on_result(record, outcome, error)`` reports each attempt: ``"renewed"``, ``"lost"`` or
    ``"failed"`` (a storage error: tried again next tick, the lease still has half its time).
    """

    def __init__(
        self,
        queue: ImageProcessingQueue,
        held: Callable[[], list[HeldMessage]],
        *,
        timeout: int,
        name: str,
        on_result: Callable[[HeldMessage, str, str | None], None],
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.queue = queue
        self.held = held
        self.timeout = timeout
        self.on_result = on_result
        self.tick = min(5.0, max(0.1, timeout / 4))
        self._stop_event = threading.Event()

    def stop(self, *, wait: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=wait)

    def run(self) -> None:
        while not self._stop_event.wait(self.tick):
            now = time.monotonic()
            for record in self.held():
                if now - record.leased_at >= self.timeout / 2:
                    self.renew(record)

    def renew(self, record: HeldMessage) -> None:
        with record.lock:
            if record.done or record.lost:
                return
            try:
                renewed = self.queue.renew(record.current, self.timeout)
            except Exception as exc:
                error: str | None = f"{type(exc).__name__}: {exc}"
                outcome = "failed"
            else:
                error = None
                if renewed is None:
                    record.lost = True
                    outcome = "lost"
                else:
                    record.current = renewed
                    record.leased_at = time.monotonic()
                    outcome = "renewed"
        self.on_result(record, outcome, error)
