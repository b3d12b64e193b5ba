"""Prometheus metrics of the storage layer, shared by the web app and every worker role.

Three things an operator alerts on, in Prometheus's conventions (base units, ``_total``
counters, one metric per meaning):

- ``StorageRequestMetrics``: a ``response_hook`` for ``StorageClients`` that counts every HTTP
  attempt by operation (the same names as ``dal.observability.transactions.TransactionCounter``: what Azure
  bills), the error responses by status, and the responses the SDK retries (408, 429, 5xx)
  and the throttling ones (503 ServerBusy, 429). They are ``prometheus_client`` counters, so
  they also work in the client's multiprocess mode (several gunicorn workers).
- ``StorageStateCollector``: queue and poison-queue depths (Azure Monitor refreshes its queue
  count once a day, so the app reports its own) and, optionally, jobs by status. Read at
  scrape time and cached for ``max_age`` seconds: each refresh costs one GetQueueMetadata per
  queue and poison queue, and one table scan of the job rows.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter as PromCounter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dal.jobs.model import JOB_STATUSES
from dal.observability.transactions import operation_name

if TYPE_CHECKING:
    from dal.jobs.store import JobStore
    from dal.queues.work_queue import ImageProcessingQueue

__all__ = ["RETRIED_STATUSES", "THROTTLED_STATUSES", "StorageRequestMetrics", "StorageStateCollector", "chain_hooks"]

# azure-core's RetryPolicy retries these (plus connection errors, which have no response).
RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# "The server is currently unable to receive requests" / "over the account limit".
THROTTLED_STATUSES = frozenset({429, 503})

STORAGE_REQUESTS = PromCounter(
    "photomosaics_storage_requests_total",
    "Storage REST calls (billed transactions, retries included) by service operation.",
    ["operation"],
)
STORAGE_ERRORS = PromCounter(
    "photomosaics_storage_errors_total",
    "Storage responses with status >= 400 by operation and status (412 = a lost ETag race).",
    ["operation", "status"],
)
STORAGE_RETRIED = PromCounter(
    "photomosaics_storage_retryable_responses_total",
    "Storage responses the SDK retries (408, 429, 500, 502, 503, 504) by operation.",
    ["operation"],
)
STORAGE_THROTTLED = PromCounter(
    "photomosaics_storage_throttled_total",
    "Storage responses that mean the account is throttling (503 ServerBusy, 429) by operation.",
    ["operation"],
)


STORAGE_RETRY_BACKOFF = PromCounter(
    "photomosaics_storage_retry_backoff_seconds_total",
    "Seconds the storage retry policy waited before retrying, by cause (throttled, server, connection).",
    ["kind"],
)


class StorageRequestMetrics:
    """``StorageClients(response_hook=StorageRequestMetrics())``: thread-safe, stateless."""

    def record_retry(self, kind: str, seconds: float) -> None:
        """The retry policies' callback (``dal.retry``): back-off time by cause."""
        STORAGE_RETRY_BACKOFF.labels(kind).inc(max(seconds, 0.0))

    def __call__(self, response: Any) -> None:
        name = operation_name(response.http_request)
        status = int(getattr(response.http_response, "status_code", 0) or 0)
        STORAGE_REQUESTS.labels(name).inc()
        if status >= 400:
            STORAGE_ERRORS.labels(name, str(status)).inc()
        if status in RETRIED_STATUSES:
            STORAGE_RETRIED.labels(name).inc()
        if status in THROTTLED_STATUSES:
            STORAGE_THROTTLED.labels(name).inc()


def chain_hooks(*hooks: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """One response hook calling each given one in turn (None when none is given)."""
    present = [h for h in hooks if h is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]

    def hook(response: Any) -> None:
        for each in present:
            each(response)

    retry_sinks = [h.record_retry for h in present if hasattr(h, "record_retry")]
    if retry_sinks:  # the retry policies' callback (dal.retry) reaches every hook that wants it

        def record_retry(kind: str, seconds: float) -> None:
            for sink in retry_sinks:
                sink(kind, seconds)

        hook.record_retry = record_retry  # type: ignore[attr-defined]  # found with getattr by StorageClients (dal.config)
    return hook


class StorageStateCollector(Collector):
    """Queue depths (and jobs by status when ``jobs`` is given), refreshed at most every ``max_age`` s."""

    def __init__(
        self,
        queues: Callable[[], Iterable[ImageProcessingQueue]],
        *,
        jobs: Callable[[], JobStore] | None = None,
        max_age: float = 15.0,
    ) -> None:
        self._queues = queues
        self._jobs = jobs
        self._max_age = max_age
        self._lock = threading.Lock()
        self._cached: tuple[float, list[GaugeMetricFamily]] | None = None

    def describe(self) -> list[Any]:
        return []  # dynamic: never read storage at registration time

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] > self._max_age:
                self._cached = (time.monotonic(), self._read())
            yield from self._cached[1]

    def _read(self) -> list[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "photomosaics_queue_messages",
            "Approximate messages in a work queue (visible and invisible).",
            labels=["queue"],
        )
        poison = GaugeMetricFamily(
            "photomosaics_poison_queue_messages",
            "Approximate messages in a work queue's poison queue.",
            labels=["queue"],
        )
        up = GaugeMetricFamily("photomosaics_storage_up", "1 when the last read of queue depths succeeded.")
        families = [depth, poison, up]
        try:
            for queue in self._queues():
                label = queue.short_name  # the logical name; slicerequest-1 for a shard
                depth.add_metric([label], queue.approximate_depth())
                poison.add_metric([label], queue.poison.approximate_depth())
            if self._jobs is not None:
                families.append(_jobs_by_status(self._jobs()))
        except Exception:  # a scrape reports storage as down; it never fails
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return families


def _jobs_by_status(store: JobStore) -> GaugeMetricFamily:

    counts: Counter[str] = Counter(dict.fromkeys(JOB_STATUSES, 0))
    client = store.storage.table_service.get_table_client(store.jobs_table)
    # Only job rows carry `status` (the per-client index rows do not); one page per 1,000 rows.
    for entity in client.query_entities("status ge ''", select=["status"], results_per_page=1000):
        counts[str(entity["status"])] += 1
    family = GaugeMetricFamily("photomosaics_jobs", "Jobs in the jobs table by status.", labels=["status"])
    for status, count in sorted(counts.items()):
        family.add_metric([status], count)
    return family
