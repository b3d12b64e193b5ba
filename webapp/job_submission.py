"""A job's submission, step by step: the library it uses, the client's quotas, the backlog, the
grid, then the photo, the job row and the request message stored (``webapp.api_jobs``' ``POST
/api/jobs``).

Cheap checks come first and a submission refused after its quotas were counted gives its slots
back. With a paired secondary account (``dal.availability.failover``) whatever needs the primary
is asked of it with a fallback, and a job whose first write went to the secondary is parked
there whole (the syphon brings it back).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from flask import Response, jsonify, url_for

from dal.blobs.library_info import LibraryInfo, validate_library_name
from dal.blobs.names import input_blob_name
from dal.config import IMAGE_INPUT_CONTAINER
from dal.errors import InvalidLibraryNameError, QuotaExceeded, ServiceBusy
from dal.jobs.model import Job, JobStatus
from dal.queues.lanes import lane_for
from dal.queues.messages import ImageRequestMessage
from mosaic.errors import TileBudgetError
from mosaic.fair import check_budget, check_grid
from mosaic.grid import Grid
from webapp import planning
from webapp.clients import client_id
from webapp.errors import ApiError
from webapp.ingress import client_address
from webapp.services import services, settings
from webapp.validation import ValidImage

log = logging.getLogger(__name__)


def find_library(name: str, *, needs_tiles: bool = False) -> str:
    """The URI of the library called ``name`` that this client may use (its own or a shared one);
    400 for an impossible name, 404 when there is none for this client; with ``needs_tiles`` (a
    job), 409 ``library_not_ready`` when none of its photos is indexed yet."""
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
    if needs_tiles and found.tile_count == 0:  # uploaded, none indexed yet (or all skipped): the job could only fail
        raise ApiError(  # the code and words of /api/plan and the print planner for the same library
            409,
            "library_not_ready",
            f"library {name!r} has no indexed photos yet: wait until its photos are indexed "
            "(its page shows the progress), or add some",
        )
    return found.uri  # its container's: the same after a rename (dal.blobs.library_names)


def plan_job(
    photo: ValidImage,
    library: str,
    tile_size: int,
    tiles_across: int | None,
    slices: int,
    max_uses: int | None,
    cell_sizes: tuple[int, ...] | None = None,
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
    align = cell_sizes[-1] if cell_sizes else 1  # no large cell across two slices
    slices = min(
        max(slices, planning.min_slices(grid, align=align)), planning.max_slices(grid, limits.max_slices, align=align)
    )
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


def check_backlog() -> None:
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


def admit(owner: str) -> bool:
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


def give_back(owner: str) -> None:
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


def submit(
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
    cell_sizes: tuple[int, ...] | None = None,
    split: int | None = None,
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
            cell_sizes=cell_sizes,
            split=split,
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
            + (f", cells of {', '.join(map(str, cell_sizes[:-1]))} and {cell_sizes[-1]} tiles" if cell_sizes else "")
            + (f" (split {split})" if split is not None else "")
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
            give_back(owner)
        raise
    log.info("job %s submitted by client %s%s", request_id, owner[:6], " (parked on the secondary)" if parked else "")
    status_url = url_for("api_jobs.get_job", request_id=request_id)
    return jsonify({"request_id": request_id, "status_url": status_url}), 202, {"Location": status_url}
