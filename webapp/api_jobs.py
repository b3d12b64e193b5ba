"""The jobs API: submit a photo, list a client's jobs, read one, delete it.

Every lookup goes through ``JobStore.get(client_id, request_id)``: jobs live in their
client's partition, so another client's job is simply not found (404), never "forbidden"
(which would confirm that it exists). The other job blueprints look jobs up the same way
(``own_job``): ``api_job_events`` (the live progress), ``api_job_images`` (the mosaic, its
slices and previews), ``api_pyramid``, ``api_tiles``, ``api_job_photos``.

With a paired secondary account (``dal.availability.failover``) a submission goes on while the primary is
down: the photo, the job row and the request message are written to the secondary, the answer
is still 202, and the job reads as ``waiting_for_storage`` until the syphon (``dal.operations.syphon``)
has moved it back to the primary, where it is processed like any other. How a submission is
admitted and stored is ``webapp.job_submission``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

from flask import Blueprint, Response, jsonify, request

from dal.jobs.model import TERMINAL_STATUSES, Job, JobStatus
from dal.operations.cleanup import delete_bands, delete_job_everywhere, request_cleanup
from dal.queues.message_fields import REQUEST_ID_PATTERN
from webapp import planning
from webapp.clients import client_id
from webapp.errors import ApiError
from webapp.every_photo import check_every_photo
from webapp.job_cells import cells_fields
from webapp.job_submission import admit, check_backlog, find_library, give_back, plan_job, submit
from webapp.previews import PREVIEWS
from webapp.serialize import event_json, job_json
from webapp.services import services, settings
from webapp.validation import flag_field, int_field, optional_int_field, validate_image

log = logging.getLogger(__name__)
bp = Blueprint("api_jobs", __name__, url_prefix="/api")

_UUID = re.compile(f"^{REQUEST_ID_PATTERN}$")
MAX_USES = 1_000_000  # max_uses above any grid's cell count means no limit; the bound keeps it an int


def own_job(request_id: str) -> Job:
    """This client's job, or 404 (also for another client's job and for malformed ids)."""
    return own_job_where(request_id)[0]


def own_job_where(request_id: str) -> tuple[Any, bool]:
    """``(job, waiting for storage?)``: True when its row is on the secondary account (dal.availability.failover)."""
    if not _UUID.match(request_id):
        raise ApiError(404, "job_not_found", "no such job")
    job, waiting = lookup_job(services(), client_id(), request_id)
    if job is None:
        raise ApiError(404, "job_not_found", "no such job")
    return job, waiting


def lookup_job(svc: Any, owner: str, request_id: str) -> tuple[Any, bool]:
    if svc.failover is None:
        return svc.jobs.get(owner, request_id), False
    return svc.failover.find_job(owner, request_id)


@bp.post("/jobs")
def create_job() -> tuple[Response, int, dict[str, str]]:
    """Validate everything, then store the photo, the job row and the request message.

    Cheap checks first: the form's fields, then the client's and its address's quotas (429
    before a byte of the photo is read), the library and the backlog, and only then the photo
    (its structure, its header, its pixels in the decoding budget). A submission refused after
    its quotas were counted gives its slots back."""
    limits = settings()
    upload = request.files.get("image")
    if upload is None:
        raise ApiError(400, "missing_field", "image is required (a multipart file field)")
    library = (request.form.get("library") or "").strip()
    if not library:
        raise ApiError(400, "missing_field", "library is required")
    tile_size = int_field(request.form, "tile_size", low=1, high=64)
    slices = int_field(request.form, "slices", low=1, high=limits.max_slices)
    tiles_across = optional_int_field(request.form, "tiles_across", low=1, high=planning.MAX_TILES_ACROSS)
    max_uses = optional_int_field(request.form, "max_uses", low=1, high=MAX_USES)
    # Tiles <-> photo: how far each whole tile's colour moves toward its cell's (0..100 %).
    correction = optional_int_field(request.form, "correction", low=0, high=100)
    use_every_photo = flag_field(request.form, "use_every_photo")  # every library photo at least once
    # Large photos where the picture is calm, small ones where the detail is (mosaic.cells).
    cell_sizes, split = cells_fields(
        request.form, tile_size=tile_size, max_uses=max_uses, use_every_photo=use_every_photo
    )
    owner = client_id()
    admitted = admit(owner)
    try:
        library_uri = find_library(library, needs_tiles=True)
        check_backlog()
        photo = validate_image(
            upload.read(limits.max_upload_bytes + 1),
            max_bytes=limits.max_upload_bytes,
            max_pixels=limits.max_input_pixels,
        )
        grid, slices = plan_job(photo, library, tile_size, tiles_across, slices, max_uses, cell_sizes)
        if use_every_photo:
            check_every_photo(library, grid, photo)
        # The job renders with the library as it is now, whatever is added or removed meanwhile.
        library_version = services().libraries.pin(library) if services().failover is None else None
    except Exception:
        if admitted:
            give_back(owner)
        raise
    return submit(
        photo,
        library_uri=library_uri,
        library=library,
        tile_size=tile_size,
        slices=slices,
        grid=grid,
        admitted=admitted,
        max_uses=max_uses,
        correction=correction,
        use_every_photo=use_every_photo,
        library_version=library_version,
        cell_sizes=cell_sizes,
        split=split,
    )


@bp.get("/jobs")
def list_jobs() -> Response:
    limit = int_field(request.args, "limit", low=1, high=100, default=20)
    token = request.args.get("continuation")
    if token == "":  # not a token the server issued (omit the parameter for the first page)
        raise ApiError(400, "invalid_field", "continuation: empty; omit it for the first page")
    svc, owner = services(), client_id()
    try:
        if svc.failover is None:
            jobs, next_token = svc.jobs.list_for_client(owner, limit=limit, continuation=token)
        else:
            nothing: tuple[list[Job], str | None] = ([], None)
            jobs, next_token = svc.failover.ask_primary(
                lambda: svc.jobs.list_for_client(owner, limit=limit, continuation=token), nothing
            )
    except ValueError as exc:
        raise ApiError(400, "invalid_field", f"continuation: {exc}") from None
    body = [job_json(job) for job in jobs]
    if svc.failover is not None and token is None:  # jobs submitted while the primary was down come first
        known = {job.request_id for job in jobs}
        waiting = [j for j in svc.failover.secondary_jobs(owner, limit) if j.request_id not in known]
        body = [job_json(j, waiting_for_storage=True) for j in waiting] + body
    return jsonify({"jobs": body, "continuation": next_token})


@bp.get("/jobs/<request_id>")
def get_job(request_id: str) -> Response:
    job, waiting = own_job_where(request_id)
    body = job_json(job, waiting_for_storage=waiting)
    svc = services()
    # With the row: its slices' log lines live in it (Job.slice_events), merged in time order.
    events = (
        svc.jobs.events(request_id, job=job)
        if svc.failover is None
        else svc.failover.events(request_id, on_secondary=waiting, job=job)
    )
    body["events"] = [event_json(e) for e in events]
    return jsonify(body)


CANCELLED = "cancelled by its owner"


@bp.post("/jobs/<request_id>/cancel")
def cancel_job(request_id: str) -> Response:
    """Stop a job that is not finished: it ends ``failed``, "cancelled by its owner", and its bands
    are deleted. The roles drop what is left of it (a processor finds its band gone, and each
    role skips the messages of a finished job), its place in the client's unfinished-jobs quota
    is free at once, and it can then be deleted. One conditional write: a job that finished
    meanwhile keeps its end (409 ``job_finished``, as for a finished one); 409 ``job_waiting``
    while its row waits on the paired secondary account."""
    job, waiting = own_job_where(request_id)
    if waiting:
        raise ApiError(409, "job_waiting", "the job waits for its storage to come back: cancel it once it starts")
    svc = services()

    def stop(current: Job) -> Job | None:
        return (
            None if current.status in TERMINAL_STATUSES else replace(current, status=JobStatus.FAILED, error=CANCELLED)
        )

    ended, wrote = svc.jobs.update(job.client_id, request_id, stop, current=job)
    if not wrote:
        raise ApiError(409, "job_finished", f"the job is already {ended.status}: there is nothing to cancel")
    svc.jobs.add_event(request_id, "cancelled", actor="owner", message=CANCELLED)
    # Its bands go: a processor that takes one of its queued slices finds the band gone and the
    # job ended, and renders nothing (workers.processor), instead of rendering what is ignored.
    delete_bands(svc.blobs, request_id)
    log.info("job %s cancelled by its owner", request_id)
    return jsonify(job_json(ended))


@bp.delete("/jobs/<request_id>")
def delete_job(request_id: str) -> tuple[str, int]:
    """Remove a finished job's blobs, row and events. A running job is refused (409): the
    controller would otherwise recreate the row it is still working on.

    The cleanup is queued first (``jobcleanup``, the durable intent: the responder finishes it
    if this request dies half-way), then done here at once so the answer can be 204 and the
    job is gone when the client looks again; the queued copy later finds nothing to do."""

    job = own_job(request_id)
    if job.status not in TERMINAL_STATUSES:
        raise ApiError(
            409, "job_running", f"the job is still {job.status}: cancel it (POST .../cancel), then delete it"
        )
    svc = services()
    request_cleanup(svc.queues.job_cleanup, client_id(), request_id)
    delete_job_everywhere(svc.blobs, svc.jobs, client_id(), request_id)
    PREVIEWS.drop(request_id)
    log.info("job %s deleted", request_id)
    return "", 204
