"""A job's images: the finished mosaic (streamed), a finished slice's preview, and thumbnails.

The containers stay private and no SAS is handed out: blobs are streamed through the app, and
previews are made once per size (``webapp.previews``: from the pyramid's smallest level large
enough, so a preview costs a few tiles whatever the mosaic's size).
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Blueprint, Response, request

from dal.blobs.names import output_blob_name, pieces_blob_name, pyramid_blob_name, slice_blob_candidates
from dal.blobs.rendered import decode_rendered
from dal.config import IMAGE_INPUT_CONTAINER, IMAGE_OUTPUT_CONTAINER, SLICE_RESPONSE_CONTAINER
from dal.errors import BlobMissingError
from dal.jobs.model import Job, JobStatus
from webapp.api_jobs import own_job
from webapp.errors import ApiError
from webapp.previews import PREVIEWS, PYRAMIDS, jpeg_preview, pyramid_preview, rendered_preview, snap_side
from webapp.services import services
from webapp.validation import int_field

bp = Blueprint("api_job_images", __name__, url_prefix="/api")

SLICE_PREVIEW_SIDE = 1600
THUMB_SIDE = 480


def stream_blob(container: str, name: str, *, content_type: str, filename: str, attachment: bool) -> Response:
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
    job = own_job(request_id)
    if job.status != JobStatus.DONE or not job.output_name:
        raise ApiError(409, "not_ready", f"the mosaic is not finished yet (status {job.status})")
    filename = f"mosaic-{request_id[:8]}.{job.output_name.rsplit('.', 1)[-1]}"
    # A mosaic over JPEG's 65,500 px a side has only its pyramid (a zip) as the full image.
    content_type = {"png": "image/png", "zip": "application/zip"}.get(job.output_name.rsplit(".", 1)[-1], "image/jpeg")
    return stream_blob(
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
    job = own_job(request_id)
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
    job = own_job(request_id)
    # Previews come in a few sizes (webapp.previews.PREVIEW_SIDES): 64..1600 snaps up to one.
    side = snap_side(int_field(request.args, "size", low=64, high=SLICE_PREVIEW_SIDE, default=THUMB_SIDE))
    if job.status == JobStatus.DONE:
        return _preview((request_id, "result", str(side)), lambda: _result_preview(job, side))
    return _preview(
        (request_id, "source", str(side)), lambda: _stored_preview(IMAGE_INPUT_CONTAINER, job.input_name, side)
    )
