"""Elastic dequeue: how many handlers a queue of a given depth deserves.

A listener runs between ``low`` and ``high`` handlers at once. When a receive comes back
full (more is probably waiting; after an idle spell this is work detected; a
short batch means the queue is empty, so its depth is not read), it reads the queue's *approximate* depth (one transaction, at most once per
``DEPTH_CHECK_INTERVAL``) and grows to ``optimal_concurrency(depth + held)``; the first
empty receive shrinks it back to ``low``. The depth is approximate (it counts invisible
messages too), which is fine: it only sizes a thread pool, it never decides what is done.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from workers.runtime.counters import Counters
from workers.runtime.logfmt import kv

__all__ = ["DEPTH_CHECK_INTERVAL", "MESSAGES_PER_HANDLER", "ElasticPool", "optimal_concurrency"]

log = logging.getLogger("workers.runtime.listener")

MESSAGES_PER_HANDLER = 2  # a handler per two waiting messages: the queue drains in ~2 rounds
DEPTH_CHECK_INTERVAL = 1.0  # seconds between two depth reads of one listener


def optimal_concurrency(depth: int, *, low: int, high: int, per_handler: int = MESSAGES_PER_HANDLER) -> int:
    """Handlers wanted for ``depth`` waiting messages, within ``[low, high]``."""
    if depth <= 0:
        return low
    return max(low, min(high, math.ceil(depth / per_handler)))


class ElasticPool:
    """How many handlers a listener runs right now, between ``low`` and ``high``.

    ``after_batch`` reads the depth on a backlog (two full receives in a row, or one full
    receive of more than one message) and grows; ``after_empty`` shrinks back to ``low``.
    ``stats`` (a listener's ``Counters``) counts depth checks, scale-ups and scale-downs, and
    keeps ``peak_concurrency``.
    """

    def __init__(self, *, low: int, high: int, name: str, stats: Counters) -> None:
        self.low, self.high, self.active = low, high, low
        self._name = name
        self._stats = stats
        stats.peak("peak_concurrency", low)
        self._last_depth_check = -math.inf
        self._full_streak = 0  # receives in a row that came back full

    def after_batch(self, *, got: int, want: int, more: bool, depth: Callable[[], int]) -> None:
        """A batch arrived: a backlog (full and more expected) is worth a depth read."""
        self._full_streak = self._full_streak + 1 if got >= want and more else 0
        if self._full_streak and (want > 1 or self._full_streak >= 2):
            self._scale_up(depth)

    def after_empty(self) -> None:
        """An empty receive: back to the minimum."""
        self._full_streak = 0
        if self.active > self.low:
            log.info(kv("listener.scale_down", listener=self._name, concurrency=self.low))
            self.active = self.low
            self._stats.add("scale_downs")

    def _scale_up(self, depth: Callable[[], int]) -> None:
        if self.active >= self.high:
            return
        now = time.monotonic()
        if now - self._last_depth_check < DEPTH_CHECK_INTERVAL:
            return
        self._last_depth_check = now
        try:
            waiting = int(depth())
        except Exception as exc:
            log.warning(kv("listener.depth_failed", listener=self._name, error=f"{type(exc).__name__}: {exc}"))
            return
        self._stats.add("depth_checks")
        # The approximate count includes the messages we hold (invisible): no need to add them.
        target = optimal_concurrency(waiting, low=self.low, high=self.high)
        if target > self.active:
            log.info(kv("listener.scale_up", listener=self._name, depth=waiting, concurrency=target))
            self.active = target
            self._stats.peak("peak_concurrency", target)
            self._stats.add("scale_ups")
