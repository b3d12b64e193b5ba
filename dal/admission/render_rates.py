"""Measured render rates: how many slices a second the running processors finish.

Contract
--------
``RateMeter.observe(seconds)`` is called by a processor after each slice it handled (the
whole handler: band download, render, upload, response). It keeps a moving average of the
seconds per slice in memory and writes it to the table ``renderrates`` (``PartitionKey =
"processor"``, ``RowKey`` = the worker's name) at most every ``REPORT_INTERVAL`` seconds:
one upsert, no read. ``RenderRates.capacity()`` reads the rows written in the last
``FRESH_SECONDS`` (one query; the service filters out the stale rows) and sums
``1 / seconds_per_slice``: the slices per second the fleet finishes while it is busy.

Why per-process rows written on a timer: a shared counter would cost an ETag read and
write per slice; this costs one transaction per processor per 30 s of work and nothing at
all while the fleet is idle, whatever the job size (so it is not part of a job's count).

A processor that stops (scaled in, crashed) stops writing and ages out; so does an idle
fleet. With no fresh row the capacity is unknown (``None``) and ``dal.admission.backpressure`` admits
work (fail open): the first slice rendered measures it again seconds later. A process
running several handlers at once reports per-handler seconds, which under-counts its
capacity (a cautious estimate); processors run one handler each by default.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from dal.config import RENDER_RATES_TABLE, StorageClients
from dal.names import prefixed
from dal.retry import ensure_table

log = logging.getLogger(__name__)

_PARTITION = "processor"
REPORT_INTERVAL = 30.0  # seconds between one processor's writes, at most
FRESH_SECONDS = 600.0  # a row older than this belongs to a stopped or idle processor
_SMOOTHING = 0.2  # weight of the newest slice in the moving average


@dataclass(frozen=True)
class Capacity:
    """What the fleet can do: ``slices_per_second`` is None when nothing was measured lately."""

    processors: int
    slices_per_second: float | None


class RenderRates:
    """The ``renderrates`` table; ``prefix`` isolates tests like the other stores."""

    def __init__(self, storage: StorageClients, *, prefix: str = "") -> None:
        self.storage = storage
        self.table_name = prefixed(prefix, RENDER_RATES_TABLE)

    @cached_property
    def _table(self) -> Any:
        return self.storage.table_service.get_table_client(self.table_name)

    def ensure_table(self) -> None:
        ensure_table(self.storage.table_service, self.table_name)

    def record(self, worker: str, *, seconds_per_slice: float, slices: int, now: datetime | None = None) -> None:
        """Write one processor's current average (one upsert)."""
        self._table.upsert_entity(
            {
                "PartitionKey": _PARTITION,
                "RowKey": worker,
                "seconds_per_slice": float(seconds_per_slice),
                "slices": int(slices),
                "updated": now or datetime.now(UTC),
            }
        )

    def capacity(self, *, now: datetime | None = None) -> Capacity:
        """Sum of the fresh processors' rates (one query)."""
        since = (now or datetime.now(UTC)) - timedelta(seconds=FRESH_SECONDS)
        rows = self._table.query_entities(
            "PartitionKey eq @pk and updated ge @since",
            parameters={"pk": _PARTITION, "since": since},
            select=["seconds_per_slice"],
        )
        rates = [1.0 / float(r["seconds_per_slice"]) for r in rows if float(r.get("seconds_per_slice") or 0) > 0]
        return Capacity(processors=len(rates), slices_per_second=sum(rates) if rates else None)


class RateMeter:
    """One processor's moving average of seconds per slice, reported every ``interval`` s."""

    def __init__(self, rates: RenderRates, worker: str, *, interval: float = REPORT_INTERVAL) -> None:
        self.rates = rates
        self.worker = worker
        self.interval = interval
        self.average: float | None = None
        self.slices = 0
        self._reported_at: float | None = None
        self._lock = threading.Lock()

    def observe(self, seconds: float, *, clock: float | None = None) -> None:
        """Count one slice that took ``seconds``; write the average when the last write is old."""
        now = time.monotonic() if clock is None else clock
        with self._lock:
            seconds = max(seconds, 1e-3)
            self.average = seconds if self.average is None else (1 - _SMOOTHING) * self.average + _SMOOTHING * seconds
            self.slices += 1
            if self._reported_at is not None and now - self._reported_at < self.interval:
                return
            self._reported_at = now
            average, slices = self.average, self.slices
        try:
            self.rates.record(self.worker, seconds_per_slice=average, slices=slices)
        except Exception as exc:  # a lost report costs estimate freshness, never a slice
            log.warning("render rate not reported: %s", type(exc).__name__)
