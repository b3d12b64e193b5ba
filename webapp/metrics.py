"""``GET /metrics``: the web app's Prometheus endpoint.

Serves the storage-request counters of every gunicorn worker (``prometheus_client``'s
multiprocess mode when ``PROMETHEUS_MULTIPROC_DIR`` is set, which ``photomosaics web`` does
for more than one worker; one process otherwise), the work queues' and poison queues'
depths and the jobs by status (``dal.observability.prometheus.StorageStateCollector``, cached 15 s so that
scrapes from several Prometheus replicas cost storage no more than one). Operators only: the
metrics port or the operator token (``webapp.operator_gate``).
"""

from __future__ import annotations

import os
from typing import Any

from flask import Blueprint, Flask, Response, current_app
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.registry import REGISTRY, Collector

from dal.observability.prometheus import StorageStateCollector
from webapp.operator_gate import require_operator
from webapp.services import services

bp = Blueprint("metrics", __name__)

_EXTENSION = "photomosaics.metrics"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class _ProcessRegistry(Collector):
    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        yield from REGISTRY.collect()


def _registry(app: Flask) -> CollectorRegistry:
    found: CollectorRegistry | None = app.extensions.get(_EXTENSION)
    if found is not None:
        return found

    registry = CollectorRegistry()
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_ProcessRegistry())
    registry.register(
        StorageStateCollector(
            lambda: services().queues.monitored(),
            jobs=lambda: services().jobs,
            max_age=float(app.config.get("METRICS_CACHE_SECONDS", 15.0)),
        )
    )
    app.extensions[_EXTENSION] = registry
    return registry


@bp.get("/metrics")
def metrics() -> Response:
    """Prometheus text exposition format."""
    require_operator()
    body = generate_latest(_registry(current_app))
    return Response(body, content_type=CONTENT_TYPE_LATEST)
