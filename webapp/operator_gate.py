"""Who may read the operations endpoints (``/metrics``, ``/api/queues``).

Queue depths, job counts and storage-request rates tell an outsider how busy the service is
and when to push; they are for operators. A request may read them when it arrived on the
web app's metrics port (``PHOTOMOSAICS_METRICS_PORT``: ``photomosaics web`` listens there
too, and a Kubernetes pod exposes it to Prometheus but not through the Service), or when it
carries the operator token (``Authorization: Bearer``, ``webapp.admin``). Otherwise 401 when
a token is configured, 403 when none is. The port is read from the connection's own socket,
never from the ``Host`` header, which the client writes.
"""

from __future__ import annotations

from typing import Any

from flask import current_app, request

from webapp.admin import ADMIN_TOKEN_ENV, require_admin
from webapp.errors import ApiError

METRICS_PORT_ENV = "PHOTOMOSAICS_METRICS_PORT"
_SOCKET_KEYS = ("gunicorn.socket", "werkzeug.socket")


def _local_port(environ: dict[str, Any]) -> int | None:
    for key in _SOCKET_KEYS:
        sock = environ.get(key)
        if sock is not None:
            try:
                return int(sock.getsockname()[1])
            except (OSError, AttributeError, IndexError, TypeError, ValueError):
                return None
    return None


def on_metrics_port() -> bool:
    """True when this request came in on the configured metrics port."""
    port = current_app.config.get("METRICS_PORT")
    if not port:
        return False
    return _local_port(request.environ) == int(port)


def require_operator() -> None:
    """Return when the request may read operations data; raise 401/403 otherwise."""
    if on_metrics_port():
        return
    if not current_app.config.get("ADMIN_TOKEN"):
        raise ApiError(
            403,
            "forbidden",
            f"operations data is served on the metrics port ({METRICS_PORT_ENV}) "
            f"or with the operator token ({ADMIN_TOKEN_ENV})",
        )
    require_admin()
