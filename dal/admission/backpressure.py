"""Backpressure: refuse new jobs while the work already queued would take too long.

Contract
--------
``BacklogGauge.check()`` returns when a new job may join the queues, or raises
``ServiceBusy`` (with ``retry_after`` seconds) when the estimated wait is over
``Settings.backpressure_max_wait_seconds`` (300 s; 0 turns backpressure off). The web app
answers that with ``503`` and ``Retry-After``, having stored and enqueued nothing.
``BacklogGauge.reading()`` is the estimate itself, which the queue monitor shows.

The estimate
------------
waiting slices = ``slicerequest`` (every lane and shard) + ``SLICES_PER_REQUEST`` for
each ``imagerequest`` (every lane) not yet sliced; capacity = the processors' measured slices per
second (``dal.admission.render_rates``); estimated wait = waiting / capacity. When the wait is over
the limit, ``Retry-After`` is the time the fleet needs to bring it back under the limit
(wait - limit, at least ``MIN_RETRY_AFTER``). With no fresh measurement the capacity is
unknown and work is admitted (fail open): refusing everybody because an idle fleet has not
rendered lately would be worse than a long queue.

Cost: one reading is an approximate-count call per queue (imagerequest's lanes, and
slicerequest's lanes and shards) and one table query, and each web process reuses it for
``backlog_cache_seconds`` (5 s): a burst of submissions shares one reading, so the cost is
bounded by time (at most one reading per 5 s per process), not by the number of jobs.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dal.admission.render_rates import RenderRates
from dal.errors import ServiceBusy
from dal.queues.accessor import QueueAccessor

# An image request not yet sliced counts as this many slices (the web form's default).
SLICES_PER_REQUEST = 4
MIN_RETRY_AFTER = 5


@dataclass(frozen=True)
class Backlog:
    """One reading of the queues and the fleet's measured rate."""

    image_requests: int
    slice_requests: int
    processors: int
    slices_per_second: float | None
    max_wait_seconds: int

    @property
    def waiting_slices(self) -> int:
        return self.slice_requests + SLICES_PER_REQUEST * self.image_requests

    @property
    def wait_seconds(self) -> float | None:
        """Seconds for the fleet to finish what waits; None when its rate is unknown."""
        if self.waiting_slices == 0:
            return 0.0
        if not self.slices_per_second:
            return None
        return self.waiting_slices / self.slices_per_second

    @property
    def busy(self) -> bool:
        wait = self.wait_seconds
        return bool(self.max_wait_seconds) and wait is not None and wait > self.max_wait_seconds

    @property
    def retry_after(self) -> int:
        """When to come back: the time to drain the queue down to the allowed wait."""
        wait = self.wait_seconds or 0.0
        return max(MIN_RETRY_AFTER, math.ceil(wait - self.max_wait_seconds))

    def as_json(self) -> dict[str, Any]:
        wait = self.wait_seconds
        rate = self.slices_per_second
        return {
            "waiting_slices": self.waiting_slices,
            "processors": self.processors,
            "slices_per_second": None if rate is None else round(rate, 3),
            "estimated_wait_seconds": None if wait is None else round(wait, 1),
            "max_wait_seconds": self.max_wait_seconds,
            "busy": self.busy,
        }


class BacklogGauge:
    """A per-process, time-cached reading of the backlog (see the module docstring)."""

    def __init__(
        self,
        queues: QueueAccessor,
        rates: RenderRates,
        *,
        max_wait_seconds: int,
        cache_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queues = queues
        self.rates = rates
        self.max_wait_seconds = max_wait_seconds
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._reading: Backlog | None = None
        self._read_at = -math.inf
        self._lock = threading.Lock()

    def reading(self) -> Backlog:
        """The backlog as read at most ``cache_seconds`` ago (one reader at a time refreshes it)."""
        with self._lock:
            if self._reading is None or self.clock() - self._read_at >= self.cache_seconds:
                self._reading = self._read()
                self._read_at = self.clock()
            return self._reading

    def _read(self) -> Backlog:
        capacity = self.rates.capacity()
        return Backlog(
            image_requests=int(self.queues.image_requests.approximate_depth()),
            slice_requests=int(self.queues.slice_requests.approximate_depth()),
            processors=capacity.processors,
            slices_per_second=capacity.slices_per_second,
            max_wait_seconds=self.max_wait_seconds,
        )

    def check(self) -> None:
        """Return when a new job may be queued; raise ``ServiceBusy`` otherwise."""
        if self.max_wait_seconds <= 0:
            return  # backpressure off: not even a reading
        backlog = self.reading()
        if backlog.busy:
            wait = backlog.wait_seconds or 0.0
            raise ServiceBusy(
                f"the service is busy: the queued work needs about {wait:.0f} s (more than the "
                f"{self.max_wait_seconds} s this service accepts); try again in {backlog.retry_after} s",
                retry_after=backlog.retry_after,
                wait_seconds=wait,
            )
