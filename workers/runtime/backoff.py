"""The two waiting schedules of the queue listener, as pure functions (tested as such).

- ``poll_delay``: how long an idle listener waits before its next receive. Exponential from
  ``poll_min`` with ±20 % jitter, so listeners started together drift apart, and clamped to
  ``poll_max``, so an idle listener costs at most ``3600 / poll_max`` receives an hour.
- ``retry_delay_for``: how long a failed message stays invisible before its next attempt.
- ``RetrySchedule``: when the messages released that way are due again.
"""

from __future__ import annotations

import heapq
import math
import random
import threading
import time

__all__ = ["JITTER", "RetrySchedule", "poll_delay", "retry_delay_for"]

JITTER = 0.2


def poll_delay(empty_polls: int, *, poll_min: float, poll_max: float, rng: random.Random | None = None) -> float:
    """Seconds to wait after ``empty_polls`` consecutive empty receives (1, 2, ...).

    ``poll_min * 2**(n-1)`` with ±20 % jitter, clamped to ``[poll_min, poll_max]``. Once the
    un-jittered value passes ``poll_max / 0.8`` the jitter can no longer pull it below the
    cap, so a long-idle listener polls exactly every ``poll_max`` seconds: at most
    ``3600 / poll_max`` receive transactions an hour.
    """
    if empty_polls < 1:
        return 0.0
    exponent = min(empty_polls - 1, 60)  # 2**60 * anything sane is past any cap
    base = poll_min * (2.0**exponent)
    factor = (rng or random).uniform(1.0 - JITTER, 1.0 + JITTER)
    return min(poll_max, max(poll_min, base * factor))


def retry_delay_for(dequeue_count: int, *, retry_delay: float, max_retry_delay: float) -> int:
    """Whole seconds of invisibility for a failed message: doubles with each attempt."""
    exponent = min(max(dequeue_count, 1) - 1, 30)
    return math.ceil(min(max_retry_delay, retry_delay * (2.0**exponent)))


class RetrySchedule:
    """When the messages a listener released with a delay are visible again.

    Such a message is work nobody announces: a listener that waits for wake-up hints must
    still receive when it is due (``take_due``), and its idle wait ends then (``next_due``).
    Thread-safe: handlers add, the receive loop reads.
    """

    def __init__(self) -> None:
        self._due: list[float] = []  # heap of monotonic times
        self._pending = False  # one came due since the last receive started
        self._lock = threading.Lock()

    def add(self, delay: float) -> None:
        with self._lock:
            heapq.heappush(self._due, time.monotonic() + delay)

    def receive_started(self) -> None:
        """A receive is going out: it finds whatever was due by now."""
        with self._lock:
            self._pending = False

    def take_due(self) -> bool:
        """True when a released message is visible again and no receive has gone out for it."""
        now = time.monotonic()
        with self._lock:
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)
                self._pending = True
            return self._pending

    def next_due(self) -> float:
        """Seconds until the next release is visible (inf: none); past ones count as seen."""
        now = time.monotonic()
        with self._lock:
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)
            return self._due[0] - now if self._due else math.inf
