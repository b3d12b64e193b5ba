"""Operations endpoints: is storage reachable, and how deep are the queues."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from photomosaics.local.azurite import read_status
from dal.errors import StorageConfigurationError
from dal.availability.health import check_storage
from dal.names import unprefixed
from webapp.errors import error_response
from webapp.services import WebServices

bp = Blueprint("health", __name__)


def _services() -> WebServices:
    found: WebServices = current_app.extensions["photomosaics"]
    return found


@bp.get("/healthz")
def healthz() -> Response:
    """200 when blob, queue and table storage answer (one cheap call each, short retries)."""
    try:
        check_storage(_services().probe)
    except StorageConfigurationError as exc:
        # Under `photomosaics run` the storage is the supervised embedded Azurite: say what
        # happened to it, not "check AZURE_STORAGE_CONNECTION_STRING" (the user never set it).
        status = read_status()
        if status is not None:
            return error_response(503, "storage_unavailable", f"{status.get('message')} ({exc})")
        return error_response(503, "storage_unavailable", str(exc))
    return jsonify({"status": "ok"})


@bp.get("/api/queues")
def queues() -> Response:
    """Approximate depth of each work queue and of its poison queue, and the estimated wait.

    ``backlog`` is the reading backpressure decides on (``dal.admission.backpressure``, cached for a few
    seconds per process): waiting slices, measured capacity and the estimated wait."""
    svc = _services()
    svc.ensure_ready()
    rows = [
        {
            "name": unprefixed(svc.prefix, q.name),
            "depth": q.approximate_depth(),
            "poison_depth": q.poison.approximate_depth(),
        }
        for q in svc.queues.monitored()
    ]
    return jsonify({"queues": rows, "backlog": svc.backlog.reading().as_json()})
