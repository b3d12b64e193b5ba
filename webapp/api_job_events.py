"""``GET /api/jobs/<id>/events``: a job's progress as Server-Sent Events, until it is done or failed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from flask import Blueprint, Response, current_app, stream_with_context

from dal.jobs.model import TERMINAL_STATUSES
from webapp import streams
from webapp.api_jobs import lookup_job, own_job_where
from webapp.clients import client_id
from webapp.errors import ApiError
from webapp.serialize import job_json
from webapp.services import services

bp = Blueprint("api_job_events", __name__, url_prefix="/api")

RECONNECT_MS = 2000  # the SSE retry: hint, also sent with the reconnect event at a stream's time limit


@bp.get("/jobs/<request_id>/events")
def job_events(request_id: str) -> Response:
    """Server-Sent Events: the job as JSON each time it changes, until it is done or failed.

    The row is polled server-side every ``SSE_POLL_SECONDS``; a comment line every 15 s
    keeps proxies from closing an idle stream. A stream holds a thread, so streams are counted
    (``webapp.streams``: 429 beyond the caps) and each ends after ``SSE_MAX_SECONDS``, or at
    once when the process is stopping, with an ``event: reconnect`` (the ``retry:`` field says
    how soon): the client opens a new one.
    """
    first, waiting = own_job_where(request_id)
    owner = client_id()
    release = streams.slots().take(owner)
    if isinstance(release, str):
        headers = {"Retry-After": str(streams.RETRY_AFTER_SECONDS)}
        raise ApiError(429, "too_many_streams", release, headers=headers)
    svc = services()
    poll = float(current_app.config["SSE_POLL_SECONDS"])
    give_up = time.monotonic() + float(current_app.config["SSE_MAX_SECONDS"])

    def stream() -> Iterator[str]:
        job, on_secondary, last, quiet = first, waiting, None, time.monotonic()
        try:
            yield f"retry: {RECONNECT_MS}\n\n"
            while True:
                snapshot = job_json(job, waiting_for_storage=on_secondary)
                key = json.dumps(snapshot, sort_keys=True)
                if key != last:
                    last, quiet = key, time.monotonic()
                    yield f"event: job\ndata: {key}\n\n"
                if job.status in TERMINAL_STATUSES:
                    yield f"event: end\ndata: {json.dumps({'status': job.status})}\n\n"
                    return
                if time.monotonic() - quiet > 15:
                    quiet = time.monotonic()
                    yield ": keep-alive\n\n"
                if time.monotonic() > give_up or streams.stopping(poll):  # the pause ends early if the process stops
                    yield f"event: reconnect\ndata: {json.dumps({'after_ms': RECONNECT_MS})}\n\n"
                    return
                job, on_secondary = lookup_job(svc, owner, request_id)
                if job is None:
                    yield f"event: end\ndata: {json.dumps({'status': 'deleted'})}\n\n"
                    return
        finally:
            release()

    response = Response(
        stream_with_context(stream()),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
    response.call_on_close(release)  # also when the stream never started (the client left at once)
    return response
