"""A worker role's Prometheus endpoint and liveness check.

``serve_role_metrics`` starts a small HTTP server (a daemon thread) when
``PHOTOMOSAICS_METRICS_PORT`` is set (``photomosaics run`` sets one per role and lists them;
the Kubernetes manifests use 9100). It listens on ``PHOTOMOSAICS_METRICS_HOST``, 127.0.0.1
unless told otherwise: metrics name queues and operations, nothing for the open internet.

- ``GET /metrics``: Prometheus text. Message counters per listener, read from
  ``QueueListener.stats`` at scrape time (so the listener needs no hooks): received,
  processed, succeeded, failed, poisoned, released, and receive calls (empty ones, and
  those that yielded only poison, apart); handler durations (``timed`` wraps each handler);
  storage requests, errors, retries and throttling (``dal.observability.prometheus``); the depths of the
  role's queues and their poison queues.
- ``GET /healthz``: 200 while every receive loop is alive: since the previous probe it has
  polled, or it holds messages (busy), or the last poll is recent. A hung loop answers 503
  and the orchestrator restarts the process; storage outages do not (the loop still polls).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from dal.observability.prometheus import StorageStateCollector
from dal.queues.tracing import process_span
from workers.runtime.logfmt import kv

if TYPE_CHECKING:
    from dal.queues.consumable import ReceivedMessage
    from workers.runtime.listener import QueueListener

__all__ = [
    "METRICS_HOST_ENV",
    "METRICS_PORT_ENV",
    "ListenerCollector",
    "Liveness",
    "serve_role_metrics",
    "timed",
    "traced",
]

log = logging.getLogger(__name__)

METRICS_HOST_ENV = "PHOTOMOSAICS_METRICS_HOST"
METRICS_PORT_ENV = "PHOTOMOSAICS_METRICS_PORT"

HANDLER_SECONDS = Histogram(
    "photomosaics_message_handler_duration_seconds",
    "Time a handler spent on one message, by role, queue and outcome (ok or error).",
    ["role", "queue", "outcome"],
    # A slice response takes tens of ms, a slice render seconds, a stitch up to a minute.
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)

# QueueListener.stats key -> (metric name, help)
_STATS = {
    "received": ("photomosaics_messages_received_total", "Messages received from the queue."),
    "handled": ("photomosaics_messages_processed_total", "Messages a handler finished (success or not)."),
    "succeeded": ("photomosaics_messages_succeeded_total", "Messages handled and deleted."),
    "failed": ("photomosaics_messages_failed_total", "Handler failures (the message is retried later or poisoned)."),
    "poisoned": (
        "photomosaics_messages_poisoned_total",
        "Messages moved to the poison queue (junk or over-delivered at receive, or by a handler).",
    ),
    "released": ("photomosaics_messages_released_total", "Messages handed back unfinished (shutdown)."),
    "receives": ("photomosaics_queue_receives_total", "GetMessages calls."),
    "empty_receives": ("photomosaics_queue_empty_receives_total", "GetMessages calls that returned nothing."),
    "poison_receives": (
        "photomosaics_queue_poison_receives_total",
        "GetMessages calls that yielded only poison (no empty receive: the listener received again).",
    ),
}


def timed(handler: Callable[[ReceivedMessage], None], *, role: str, queue: str) -> Callable[[ReceivedMessage], None]:
    """``handler``, observed in ``photomosaics_message_handler_duration_seconds``."""
    ok, error = HANDLER_SECONDS.labels(role, queue, "ok"), HANDLER_SECONDS.labels(role, queue, "error")

    def run(received: ReceivedMessage) -> None:
        started = time.perf_counter()
        try:
            handler(received)
        except BaseException:
            error.observe(time.perf_counter() - started)
            raise
        ok.observe(time.perf_counter() - started)

    return run


def traced(handler: Callable[[ReceivedMessage], None], *, queue: str) -> Callable[[ReceivedMessage], None]:
    """``handler`` inside a ``process <queue>`` span continuing the message's trace (dal.queues.tracing)."""

    def run(received: ReceivedMessage) -> None:
        with process_span(received, queue=queue):
            handler(received)

    return run


class ListenerCollector(Collector):
    """Every listener's ``stats`` as Prometheus counters labelled by role and queue."""

    def __init__(self, role: str, listeners: Sequence[QueueListener]) -> None:
        self.role = role
        self.listeners = list(listeners)

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[CounterMetricFamily]:
        snapshots = [(listener.queue.logical_name, dict(listener.stats)) for listener in self.listeners]
        for key, (name, text) in _STATS.items():
            family = CounterMetricFamily(name.removesuffix("_total"), text, labels=["role", "queue"])
            for queue, stats in snapshots:
                family.add_metric([self.role, queue], stats.get(key, 0))
            yield family


class Liveness:
    """Is every receive loop alive? See the module docstring; ``stale`` is in seconds."""

    def __init__(self, listeners: Sequence[QueueListener], *, stale: float | None = None) -> None:
        self.listeners = list(listeners)
        # Longer than the slowest idle poll (poll_max) by a wide margin.
        self.stale = stale if stale is not None else max(60.0, 5 * max(lsn.options.poll_max for lsn in self.listeners))
        now = time.monotonic()
        self._seen = {id(lsn): (lsn.stats["receives"], now) for lsn in self.listeners}

    def problems(self) -> list[str]:
        now, found = time.monotonic(), []
        for listener in self.listeners:
            receives, since = self._seen[id(listener)]
            if listener.stats["receives"] != receives or listener.held_count() > 0:
                self._seen[id(listener)] = (listener.stats["receives"], now)
            elif now - since > self.stale:
                found.append(f"{listener.name}: no receive for {now - since:.0f} s and nothing in hand")
        return found


def _handler(registry: CollectorRegistry, liveness: Liveness) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                problems = liveness.problems()
                body = ("; ".join(problems) if problems else "ok").encode() + b"\n"
                self._send(503 if problems else 200, body, "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def metrics_address(environ: dict[str, str] | None = None) -> tuple[str, int] | None:
    """(host, port) from the environment, or None when metrics are off; bad values raise ValueError."""
    env = os.environ if environ is None else environ
    raw = env.get(METRICS_PORT_ENV, "").strip()
    if not raw:
        return None
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"{METRICS_PORT_ENV} must be a port number, got {raw!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{METRICS_PORT_ENV} must be 0..65535, got {port}")
    return env.get(METRICS_HOST_ENV, "").strip() or "127.0.0.1", port


def serve_role_metrics(
    role: str, listeners: Sequence[QueueListener], *, address: tuple[str, int] | None = None
) -> ThreadingHTTPServer | None:
    """Start the role's /metrics and /healthz server (None when no address is configured)."""
    address = address or metrics_address()
    if address is None:
        return None
    registry = CollectorRegistry()
    registry.register(_Default())
    registry.register(ListenerCollector(role, listeners))
    registry.register(StorageStateCollector(lambda: _role_queues(listeners)))
    liveness = Liveness(listeners)
    server = ThreadingHTTPServer(address, _handler(registry, liveness))
    server.daemon_threads = True
    server.liveness = liveness  # type: ignore[attr-defined]  # the request handler reads it from its server
    threading.Thread(target=server.serve_forever, name=f"{role}-metrics", daemon=True).start()
    host, port = server.server_address[:2]
    host = host.decode() if isinstance(host, bytes) else host  # typeshed allows bytes; AF_INET gives str
    log.info(kv("role.metrics", role=role, url=f"http://{host}:{port}/metrics"))
    return server


def _role_queues(listeners: Sequence[QueueListener]) -> list[Any]:
    # A sharded queue (dal.queues.shards) is reported shard by shard.
    return [part for listener in listeners for part in listener.queue.parts]


class _Default(Collector):
    """The process-wide registry (storage counters, handler histograms, process metrics)."""

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        yield from REGISTRY.collect()
