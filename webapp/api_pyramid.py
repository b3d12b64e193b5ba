"""A finished job's Deep Zoom pyramid: the descriptor, its tiles, and the whole zip.

The controller stores the pyramid as one uncompressed zip blob (``dal.blobs.names``); the
viewer on the job page (OpenSeadragon) asks for ``/api/jobs/<id>/dzi`` and then, by the DZI
convention, for tiles under ``/api/jobs/<id>/dzi_files/<level>/<col>_<row>.jpg``. Each is one
range read of the zip (``dal.blobs.pyramid``: its directory is read once per process and cached),
so serving a tile of a 400 MP mosaic costs what serving a tile of a small one does.
``/api/jobs/<id>/pyramid`` streams the whole zip as a download.

A job that is not done answers 409 like the result; a done job without a pyramid (one
finished before pyramids existed) answers 404 ``result_missing``, and the page falls back
to the plain image. Tiles never change once written: ``private, max-age=86400``.
"""

from __future__ import annotations

from flask import Blueprint, Response

from dal.blobs.names import pyramid_blob_name
from dal.blobs.pyramid import DZI_NAME, tile_name
from dal.config import IMAGE_OUTPUT_CONTAINER
from dal.errors import BlobMissingError
from dal.jobs.model import JobStatus
from webapp.api_job_images import stream_blob
from webapp.api_jobs import own_job
from webapp.errors import ApiError
from webapp.previews import PYRAMIDS
from webapp.services import services

bp = Blueprint("api_pyramid", __name__, url_prefix="/api")
_CACHE = "private, max-age=86400"


def _member(request_id: str, member: str) -> bytes:
    job = own_job(request_id)
    if job.status != JobStatus.DONE:
        raise ApiError(409, "not_ready", f"the mosaic is not finished yet (status {job.status})")
    try:
        return PYRAMIDS.read(services().blobs, IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(request_id), member)
    except BlobMissingError:
        raise ApiError(404, "result_missing", "this mosaic has no Deep Zoom pyramid") from None
    except KeyError:
        raise ApiError(404, "not_found", "the pyramid has no such tile") from None


@bp.get("/jobs/<request_id>/dzi")
def job_dzi(request_id: str) -> Response:
    """The Deep Zoom descriptor (XML): size, tile size, overlap, format."""
    data = _member(request_id, DZI_NAME)
    return Response(data, mimetype="application/xml", headers={"Cache-Control": _CACHE})


@bp.get("/jobs/<request_id>/dzi_files/<int:level>/<int:column>_<int:row>.jpg")
def job_dzi_tile(request_id: str, level: int, column: int, row: int) -> Response:
    """One tile of the pyramid."""
    data = _member(request_id, tile_name(level, column, row))
    return Response(data, mimetype="image/jpeg", headers={"Cache-Control": _CACHE})


@bp.get("/jobs/<request_id>/pyramid")
def job_pyramid(request_id: str) -> Response:
    """The whole pyramid as a zip (``mosaic.dzi`` and ``mosaic_files/``), as a download."""
    job = own_job(request_id)
    if job.status != JobStatus.DONE:
        raise ApiError(409, "not_ready", f"the mosaic is not finished yet (status {job.status})")
    try:
        return stream_blob(
            IMAGE_OUTPUT_CONTAINER,
            pyramid_blob_name(request_id),
            content_type="application/zip",
            filename=f"mosaic-{request_id[:8]}-deepzoom.zip",
            attachment=True,
        )
    except ApiError as exc:
        raise ApiError(404, "result_missing", "this mosaic has no Deep Zoom pyramid") from exc
