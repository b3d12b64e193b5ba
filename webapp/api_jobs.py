"""The jobs API: submit a photo, follow its progress, fetch the mosaic, delete it.

Every lookup goes through ``JobStore.get(client_id, request_id)``: jobs live in their
client's partition, so another client's job is simply not found (404), never "forbidden"
(which would confirm that it exists).

With a paired secondary account (``dal.availability.failover``) a submission goes on while the primary is
down: the photo, the job row and the request message are written to the secondary, the answer
is still 202, and the job reads as ``waiting_for_storage`` until the syphon (``dal.operations.syphon``)
has moved it back to the primary, where it is processed like any other.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request, stream_with_context, url_for

from dal.blobs.library_info import LibraryInfo, validate_library_name
from dal.blobs.names import (
    input_blob_name,
    output_blob_name,
    pieces_blob_name,
    pyramid_blob_name,
    slice_blob_candidates,
)
from dal.blobs.rendered import decode_rendered
from dal.config import IMAGE_INPUT_CONTAINER, IMAGE_OUTPUT_CONTAINER, SLICE_RESPONSE_CONTAINER
from dal.errors import BlobMissingError, InvalidLibraryNameError, QuotaExceeded, ServiceBusy
from dal.jobs.model import TERMINAL_STATUSES, Job, JobStatus
from dal.operations.cleanup import delete_job_everywhere, request_cleanup
from dal.queues.lanes import lane_for
from dal.queues.messages import REQUEST_ID_PATTERN, ImageRequestMessage
from mosaic.errors import TileBudgetError
from mosaic.fair import check_budget, check_grid
from mosaic.grid import Grid
from webapp import planning, streams
from webapp.clients import client_id
from webapp.errors import ApiError
from webapp.every_photo import check_every_photo
from webapp.ingress import client_address
from webapp.previews import PREVIEWS, PYRAMIDS, jpeg_preview, pyramid_preview, rendered_preview, snap_side
from webapp.serialize import event_json, job_json
from webapp.services import services, settings
from webapp.validation import ValidImage, flag_field, int_field, optional_int_field, validate_image

log = logging.getLogger(__name__)
bp = Blueprint("api_jobs", __name__, url_prefix="/api")

_UUID = re.compile(f"^{REQUEST_ID_PATTERN}$")
SLICE_PREVIEW_SIDE = 1600
MAX_USES = 1_000_000  # max_uses above any grid's cell count means no limit; the bound keeps it an int
THUMB_SIDE = 480
RECONNECT_MS = 2000  # the SSE retry: hint, also sent with the reconnect event at a stream's time limit


def _own_job(request_id: str) -> Job:
    """This client's job, or 404 (also for another client's job and for malformed ids)."""
    return _own_job_where(request_id)[0]


def _own_job_where(request_id: str) -> tuple[Any, bool]:
    """``(job, waiting for storage?)``: True when its row is on the secondary account (dal.availability.failover)."""
    if not _UUID.match(request_id):
        raise ApiError(404, "job_not_found", "no such job")
    job, waiting = _lookup(services(), client_id(), request_id)
    if job is None:
        raise ApiError(404, "job_not_found", "no such job")
    return job, waiting


def _lookup(svc: Any, owner: str, request_id: str) -> tuple[Any, bool]:
    if svc.failover is None:
        return svc.jobs.get(owner, request_id), False
    return svc.failover.find_job(owner, request_id)


def find_library(name: str) -> str:
    """The URI of the library called ``name`` that this client may use (its own or a shared one);
    400 for an impossible name, 404 when there is none for this client."""
    libraries, paired, me = services().libraries, services().failover, client_id()
    try:
        found = (
            (libraries.info(name) or False)
            if paired is None
            else paired.ask_primary(lambda: libraries.info(name) or False, None)
        )
        if found is None:  # the primary is down: only the name can be checked; the controller checks the rest
            validate_library_name(name)
            return libraries.uri(name)
    except InvalidLibraryNameError as exc:
        raise ApiError(400, "invalid_field", f"library: {exc}") from None
    if not isinstance(found, LibraryInfo) or not found.visible_to(me):  # False: there is none
        raise ApiError(404, "library_not_found", f"there is no tile library called {name!r}")
    return found.uri  # its container's: the same after a rename (dal.blobs.library_names)


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
    owner = client_id()
    admitted = _admit(owner)
    try:
        library_uri = find_library(library)
        _check_backlog()
        photo = validate_image(
            upload.read(limits.max_upload_bytes + 1),
            max_bytes=limits.max_upload_bytes,
            max_pixels=limits.max_input_pixels,
        )
        grid, slices = _plan(photo, library, tile_size, tiles_across, slices, max_uses)
        if use_every_photo:
            check_every_photo(library, grid, photo)
        # The job renders with the library as it is now, whatever is added or removed meanwhile.
        library_version = services().libraries.pin(library) if services().failover is None else None
    except Exception:
        if admitted:
            _give_back(owner)
        raise
    return _submit(
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
    )


def _plan(
    photo: ValidImage, library: str, tile_size: int, tiles_across: int | None, slices: int, max_uses: int | None
) -> tuple[Grid, int]:
    """The job's grid and slice count for this photo; 422 when max_uses cannot cover the grid."""
    limits = settings()
    grid = planning.plan(
        width=photo.width,
        height=photo.height,
        tile_size=tile_size,
        tiles_across=tiles_across,
        max_output_pixels=limits.max_output_pixels,
    )
    # A slice is whole parts of the grid (mosaic.parts), and at most MAX_SLICE_PIXELS of output (a
    # giant mosaic gets more slices than asked for): the controller plans the same.
    slices = min(max(slices, planning.min_slices(grid)), planning.max_slices(grid, limits.max_slices))
    if max_uses is not None:
        _check_tile_budget(library, grid, max_uses)
    return grid, slices


def _check_tile_budget(library: str, grid: Grid, max_uses: int) -> None:
    """422 when ``max_uses`` × the library's tiles cannot cover the grid (nothing stored yet).

    A library whose size its metadata does not tell is let through: the controller checks
    again with the loaded library and fails the job with the same message. A grid too big to
    assign fairly is refused before the library is even looked at.
    """
    try:
        check_grid(grid.cells)
    except TileBudgetError as exc:
        raise ApiError(422, "tile_budget", f"max_uses: {exc}") from None
    try:
        info = services().libraries.info(library)
        count = info.tile_count if info is not None else -1
    except Exception:  # storage unreachable: the controller checks the loaded library
        log.warning("library %r could not be read; max_uses is checked by the controller", library)
        return
    if count < 1:
        return
    try:
        check_budget(grid.cells, count, max_uses)
    except TileBudgetError as exc:
        raise ApiError(422, "tile_budget", f"max_uses: {exc}") from None


def _check_backlog() -> None:
    """Backpressure: answer 503 with Retry-After while the queues hold too much work (dal.admission.backpressure).

    With the primary down (paired secondary) there is no depth to read: the submission is parked."""
    svc = services()
    try:
        if svc.failover is None:
            svc.backlog.check()
        else:
            svc.failover.ask_primary(svc.backlog.check, None)
    except ServiceBusy as exc:
        raise ApiError(503, "service_busy", exc.detail, headers={"Retry-After": str(exc.retry_after)}) from None


def _admit(owner: str) -> bool:
    """Count this submission against the quotas of its network address and of its client, or
    answer 429 having stored nothing (a refusal by the client's quota gives the address's token back).

    False when the quotas could not be counted because the primary is down (paired secondary):
    the submission is let through rather than refused (quotas live on the primary only)."""
    svc, address = services(), client_address()

    def both() -> bool:
        svc.address_quotas.admit(address)
        try:
            svc.quotas.admit(owner)
        except QuotaExceeded:
            svc.address_quotas.give_back(address)
            raise
        return True

    try:
        return both() if svc.failover is None else svc.failover.ask_primary(both, False)
    except QuotaExceeded as exc:
        raise ApiError(429, "quota_exceeded", exc.detail, headers={"Retry-After": str(exc.retry_after)}) from None


def _give_back(owner: str) -> None:
    """The slots of a submission that was counted and then refused or not stored (best effort)."""
    svc = services()
    try:
        svc.quotas.release(owner)
        svc.address_quotas.give_back(client_address())
    except Exception:  # the answer is the refusal's, not this; the client's counter heals (dal.admission.quotas)
        log.warning("the quota slots of client %s could not be given back", owner[:6], exc_info=True)


def _lane_for(owner: str) -> Any:
    """Fair scheduling (dal.queues.lanes): a client's later jobs go to a lower imagerequest lane, so the
    controller slices another client's first job before them. One query in the client's partition,
    made before this job's row exists; with the primary down (paired secondary), lane 0."""
    svc = services()
    lanes = svc.queues.image_request_lanes
    if len(lanes) == 1:
        return lanes[0]

    def lane() -> Any:
        return lanes[lane_for(svc.quotas.count_unfinished(owner), len(lanes))]

    return lane() if svc.failover is None else svc.failover.ask_primary(lane, lanes[0])


def _submit(
    photo: ValidImage,
    *,
    library_uri: str,
    library: str,
    tile_size: int,
    slices: int,
    grid: Grid,
    admitted: bool = True,
    max_uses: int | None = None,
    correction: int | None = None,
    use_every_photo: bool = False,
    library_version: str | None = None,
) -> tuple[Response, int, dict[str, str]]:
    svc = services()
    paired = svc.failover  # None: no secondary account, every write goes to the primary as always
    owner = client_id()
    request_id = str(uuid.uuid4())
    input_name = input_blob_name(request_id, photo.extension)
    parked = False  # once one write went to the secondary, the rest of the job follows it there
    if paired is None:
        image_uri = svc.blobs.upload(IMAGE_INPUT_CONTAINER, input_name, photo.data, content_type=photo.content_type)
    else:
        image_uri, parked = paired.upload(
            IMAGE_INPUT_CONTAINER, input_name, photo.data, content_type=photo.content_type
        )
    queue = _lane_for(owner)
    try:
        message = ImageRequestMessage(
            queue_uri=queue.url,
            client_id=owner,
            request_id=request_id,
            image_uri=image_uri,
            image_library_uri=library_uri,
            tile_size=tile_size,
            slices=slices,
            tiles_across=grid.tiles_across,
            max_uses=max_uses,
            correction=correction,
            use_every_photo=use_every_photo or None,
            library_version=library_version,
        )
        job = Job.for_request(message, status=JobStatus.QUEUED, input_name=input_name, grid=grid, library=library)
        if paired is None:
            svc.jobs.create(job)
        else:
            parked = paired.create_job(job, force_secondary=parked)
        (paired.secondary if parked and paired is not None else svc).jobs.add_event(
            request_id,
            "submitted",
            actor="web",
            message=f"{photo.width}×{photo.height} {photo.format}, {grid.tiles_across}×{grid.tiles_down} tiles "
            f"of {tile_size} px from {library!r} in {slices} slice(s)"
            + (f", each tile at most {max_uses} times" if max_uses is not None else "")
            + (f", colour correction {correction} %" if correction is not None else "")
            + (", every photo at least once" if use_every_photo else "")
            + ("; storage is down, the job waits for it to recover" if parked else ""),
        )
        svc.send(message, force_secondary=parked)
    except Exception:
        # Nothing half-made stays behind: no message means no worker will ever look for these.
        log.exception("job %s could not be submitted; removing what was stored", request_id)
        where = paired.secondary if parked and paired is not None else svc
        where.jobs.delete(owner, request_id)
        where.blobs.delete(IMAGE_INPUT_CONTAINER, input_name)
        if admitted:
            _give_back(owner)
        raise
    log.info("job %s submitted by client %s%s", request_id, owner[:6], " (parked on the secondary)" if parked else "")
    status_url = url_for("api_jobs.get_job", request_id=request_id)
    return jsonify({"request_id": request_id, "status_url": status_url}), 202, {"Location": status_url}


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
    job, waiting = _own_job_where(request_id)
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


@bp.get("/jobs/<request_id>/events")
def job_events(request_id: str) -> Response:
    """Server-Sent Events: the job as JSON each time it changes, until it is done or failed.

    The row is polled server-side every ``SSE_POLL_SECONDS``; a comment line every 15 s
    keeps proxies from closing an idle stream. A stream holds a thread, so streams are counted
    (``webapp.streams``: 429 beyond the caps) and each ends after ``SSE_MAX_SECONDS`` with an
    ``event: reconnect`` (the ``retry:`` field says how soon): the client opens a new one.
    """
    first, waiting = _own_job_where(request_id)
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
                if time.monotonic() > give_up:
                    yield f"event: reconnect\ndata: {json.dumps({'after_ms': RECONNECT_MS})}\n\n"
                    return
                time.sleep(poll)
                job, on_secondary = _lookup(svc, owner, request_id)
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


def _stream_blob(container: str, name: str, *, content_type: str, filename: str, attachment: bool) -> Response:
    """Stream a blob through the app in chunks: the container stays private, no SAS is handed out."""
    try:
        size, chunks = services().blobs.open_stream(container, name)
    except BlobMissingError:
        raise ApiError(404, "result_missing", "the mosaic's file is gone") from None
    headers = {
        "Content-Length": str(size),
        "Cache-Control": "private, max-age=86400",
        "Content-Disposition": f'{"attachment" if attachment else "inline"}; filename="{filename}"',
    }
    return Response(chunks, mimetype=content_type, headers=headers, direct_passthrough=True)


@bp.get("/jobs/<request_id>/result")
def job_result(request_id: str) -> Response:
    job = _own_job(request_id)
    if job.status != JobStatus.DONE or not job.output_name:
        raise ApiError(409, "not_ready", f"the mosaic is not finished yet (status {job.status})")
    filename = f"mosaic-{request_id[:8]}.{job.output_name.rsplit('.', 1)[-1]}"
    # A mosaic over JPEG's 65,500 px a side has only its pyramid (a zip) as the full image.
    content_type = {"png": "image/png", "zip": "application/zip"}.get(job.output_name.rsplit(".", 1)[-1], "image/jpeg")
    return _stream_blob(
        IMAGE_OUTPUT_CONTAINER,
        job.output_name,
        content_type=content_type,
        filename=filename,
        attachment=bool(request.args.get("download")),
    )


def _stored_preview(container: str, name: str, side: int) -> bytes:
    try:
        return jpeg_preview(services().download(container, name), max_side=side)
    except BlobMissingError:
        raise ApiError(404, "not_found", "that image is not there (yet)") from None


def _result_preview(job: Job, side: int) -> bytes:
    """A finished mosaic's preview from its pyramid (a few tiles, whatever the mosaic's size);
    a job finished before pyramids existed: from its JPEG."""
    name, blobs = pyramid_blob_name(job.request_id), services().blobs  # (the tiles are read on other threads)
    try:
        return pyramid_preview(lambda member: PYRAMIDS.read(blobs, IMAGE_OUTPUT_CONTAINER, name, member), max_side=side)
    except (BlobMissingError, KeyError, ValueError):  # no pyramid (an older job), or an unreadable one
        if not job.output_name or job.output_name.endswith(".zip"):
            raise ApiError(404, "not_found", "the mosaic's preview is not there") from None
        return _stored_preview(IMAGE_OUTPUT_CONTAINER, job.output_name, side)


def _preview(key: tuple[str, ...], make: Callable[[], bytes]) -> Response:
    data = PREVIEWS.get(key, make)
    filename = "-".join(key) + ".jpg"
    headers = {"Cache-Control": "private, max-age=86400", "Content-Disposition": f'inline; filename="{filename}"'}
    return Response(data, mimetype="image/jpeg", headers=headers)


@bp.get("/jobs/<request_id>/slices/<int:sequence>")
def job_slice(request_id: str, sequence: int) -> Response:
    """A preview of one finished slice's mosaic, so the page can show it in place."""
    job = _own_job(request_id)
    if sequence >= job.slices:
        raise ApiError(404, "not_found", f"the job has {job.slices} slices (0..{job.slices - 1})")
    if sequence not in job.slices_done:
        # The slice exists but is not there yet: 409, as for the result (404 means no such slice).
        raise ApiError(409, "not_ready", f"slice {sequence} is not rendered yet")
    # Rendered slices are .npy (older processors: .png); a giant job's band left its reduced rows
    # (a PNG: workers.band_pieces); a 1-slice job's processor wrote the final JPEG instead (dal.blobs.rendered).
    names = [*slice_blob_candidates(request_id, sequence), pieces_blob_name(request_id, sequence)]
    places = [(SLICE_RESPONSE_CONTAINER, name) for name in names]
    if job.slices == 1:
        places.insert(0, (IMAGE_OUTPUT_CONTAINER, output_blob_name(request_id)))

    def make() -> bytes:
        for container, name in places:
            try:
                data = services().download(container, name)
            except BlobMissingError:
                continue
            if container == SLICE_RESPONSE_CONTAINER:
                return rendered_preview(data, decode_rendered, max_side=SLICE_PREVIEW_SIDE)
            return jpeg_preview(data, max_side=SLICE_PREVIEW_SIDE)
        raise ApiError(404, "not_found", "that image is not there (yet)")

    data = PREVIEWS.get((request_id, "slice", str(sequence)), make)
    headers = {
        "Cache-Control": "private, max-age=86400",
        "Content-Disposition": f'inline; filename="{request_id}-slice-{sequence}.jpg"',
    }
    return Response(data, mimetype="image/jpeg", headers=headers)


@bp.get("/jobs/<request_id>/preview")
def job_preview(request_id: str) -> Response:
    """A thumbnail: the mosaic when it is done, the source photo before."""
    job = _own_job(request_id)
    # Previews come in a few sizes (webapp.previews.PREVIEW_SIDES): 64..1600 snaps up to one.
    side = snap_side(int_field(request.args, "size", low=64, high=SLICE_PREVIEW_SIDE, default=THUMB_SIDE))
    if job.status == JobStatus.DONE:
        return _preview((request_id, "result", str(side)), lambda: _result_preview(job, side))
    return _preview(
        (request_id, "source", str(side)), lambda: _stored_preview(IMAGE_INPUT_CONTAINER, job.input_name, side)
    )


@bp.delete("/jobs/<request_id>")
def delete_job(request_id: str) -> tuple[str, int]:
    """Remove a finished job's blobs, row and events. A running job is refused (409): the
    controller would otherwise recreate the row it is still working on.

    The cleanup is queued first (``jobcleanup``, the durable intent: the responder finishes it
    if this request dies half-way), then done here at once so the answer can be 204 and the
    job is gone when the client looks again; the queued copy later finds nothing to do."""

    job = _own_job(request_id)
    if job.status not in TERMINAL_STATUSES:
        raise ApiError(409, "job_running", f"the job is still {job.status}; delete it once it is done or failed")
    svc = services()
    request_cleanup(svc.queues.job_cleanup, client_id(), request_id)
    delete_job_everywhere(svc.blobs, svc.jobs, client_id(), request_id)
    PREVIEWS.drop(request_id)
    log.info("job %s deleted", request_id)
    return "", 204


# For the other job blueprints (webapp.api_pyramid): the same lookup and streaming.
own_job = _own_job
stream_blob = _stream_blob
