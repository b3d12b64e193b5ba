"""Poison queue operations for operators: list, requeue and purge (``dal.operations.poison``).

``GET  /api/queues/<queue>/poison``          the front of the poison queue (ids, reasons)
``POST /api/queues/<queue>/poison/requeue``  ``{"id": "..."}`` or ``{"all": true}``
``POST /api/queues/<queue>/poison/purge``    the same body

All three need the operator token (``webapp.admin``): poison envelopes hold other people's
job ids and URIs. ``<queue>`` is a logical name (``slicerequest``). Errors are JSON bodies.
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify, request

from dal.operations import poison as poison_ops
from dal.operations.poison import PoisonActionResult
from dal.queues.work_queue import ImageProcessingQueue
from webapp.admin import require_admin
from webapp.errors import ApiError
from webapp.services import WebServices

bp = Blueprint("poison", __name__)


def _queue(name: str) -> tuple[WebServices, ImageProcessingQueue]:
    svc: WebServices = current_app.extensions["photomosaics"]
    svc.ensure_ready()
    for queue in svc.queues.monitored():
        if queue.short_name == name:
            return svc, queue
    names = ", ".join(q.short_name for q in svc.queues.monitored())
    raise ApiError(404, "not_found", f"no work queue named {name[:80]!r} (one of: {names})")


def _which() -> str | None:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(400, "bad_request", 'send a JSON object: {"id": "<poison message id>"} or {"all": true}')
    message_id, all_ = body.get("id"), body.get("all", False)
    if set(body) - {"id", "all"}:
        raise ApiError(400, "bad_request", "only the fields 'id' and 'all' are accepted")
    if all_ is not False and all_ is not True:
        raise ApiError(400, "bad_request", "'all' must be true or false")
    if message_id is not None and (not isinstance(message_id, str) or not 0 < len(message_id) <= 128):
        raise ApiError(400, "bad_request", "'id' must be a message id string")
    if (message_id is None) == (not all_):
        raise ApiError(400, "bad_request", "give exactly one of 'id' or 'all': true")
    return message_id


def _answer(result: PoisonActionResult, queue: ImageProcessingQueue) -> Response:
    if result.missing:
        raise ApiError(404, "not_found", f"no poison message {result.missing[0][:80]!r} in {queue.short_name}-poison")
    return jsonify({"count": result.count, "ids": result.done, "skipped": result.skipped})


@bp.get("/api/queues/<name>/poison")
def list_poison(name: str) -> Response:
    require_admin()
    _, queue = _queue(name)
    rows = [
        {
            "id": item.id,
            "moved_at": item.entry.moved_at.isoformat(),
            "dequeue_count": item.entry.dequeue_count,
            "reason": item.entry.reason,
        }
        for item in poison_ops.list_poison(queue)
    ]
    return jsonify({"queue": name, "depth": queue.poison.approximate_depth(), "messages": rows})


@bp.post("/api/queues/<name>/poison/requeue")
def requeue(name: str) -> Response:
    require_admin()
    message_id = _which()
    svc, queue = _queue(name)
    return _answer(poison_ops.requeue(queue, svc.jobs, message_id=message_id, actor="operator (web)"), queue)


@bp.post("/api/queues/<name>/poison/purge")
def purge(name: str) -> Response:
    require_admin()
    message_id = _which()
    _, queue = _queue(name)
    return _answer(poison_ops.purge(queue, message_id=message_id), queue)
