"""Operations endpoints: is storage reachable, and how deep are the queues.

``/healthz`` is public (probes, the pages): a failure says "storage unavailable", nothing more
(not the account's name: it is half of what an attacker needs); what went wrong (the account,
endpoints, the exception's text) is logged.
``/api/queues`` is for operators (``webapp.operator_gate``).
"""

from __future__ import annotations

import logging

from flask import Blueprint, Response, current_app, jsonify

from dal.availability.health import check_storage
from dal.availability.storage_status import read_status
from dal.names import unprefixed
from webapp.operator_gate import require_operator
from webapp.services import WebServices

log = logging.getLogger(__name__)
bp = Blueprint("health", __name__)


def _services() -> WebServices:
    found: WebServices = current_app.extensions["photomosaics"]
    return found


@bp.get("/healthz")
def healthz() -> Response:
    """200 when blob, queue and table storage answer (one cheap call each, short retries)."""
    probe = _services().probe
    try:
        check_storage(probe)
    except Exception as exc:
        log.error("health check failed (account %s): %s: %s", probe.account_name or "?", type(exc).__name__, exc)
        detail = "storage unavailable"  # the account's name is logged above, not told to the world
        # Under `photomosaics run` the storage is the supervised embedded Azurite: its status is
        # our own sentence ("... exited (code -9)", never an address): say what happened to it.
        status = read_status()
        if status is not None and status.get("message"):
            detail += f": {status['message']}"
        body = jsonify({"error": "storage_unavailable", "detail": detail})
        body.status_code = 503
        return body
    return jsonify({"status": "ok"})


@bp.get("/api/queues")
def queues() -> Response:
    """Approximate depth of each work queue and of its poison queue, and the estimated wait.

    ``backlog`` is the reading backpressure decides on (``dal.admission.backpressure``, cached for a few
    seconds per process): waiting slices, measured capacity and the estimated wait. Operators
    only: the metrics port or the operator token."""
    require_operator()
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
