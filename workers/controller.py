"""The JobController: cuts a job into slices, and stitches the rendered slices exactly once.

On ``imagerequest`` (``handle_image_request``): read the photo (EXIF orientation applied,
RGB), plan the grid, resample to the cell image, cut it into ``slices`` bands of whole cell
rows, write every band to ``slicerequest/<request_id>/<seq>.png``, record the job, and only
then send one ``SliceRequestMessage`` per band. A redelivered request rewrites the same
blobs and re-sends only the slices not yet done: harmless.

On ``sliceresponse`` (``handle_slice_response``): add the slice to the job's
``slices_done`` with an ETag update (duplicates and late arrivals change nothing). The
update that completes the set moves the job to ``stitching``. Stitching itself is guarded
by a claim (``dal.claims``): a blob created with If-None-Match, so exactly one controller
stitches even when two see the last slice at once; a controller that died mid-stitch is
replaced when its own message comes back (same message id), or after the claim goes stale.
The stitcher writes ``imageoutput/<request_id>.jpg``, records ``output_name`` and sends the
``ImageResponseMessage``; the responder role marks the job done.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from dal.claims import BlobClaims
from dal.config import IMAGE_INPUT_CONTAINER, IMAGE_OUTPUT_CONTAINER, SLICE_REQUEST_CONTAINER, SLICE_RESPONSE_CONTAINER
from dal.errors import BlobMissingError
from dal.job_model import JobStatus
from dal.jobs import TERMINAL_STATUSES, Job, JobExistsError
from dal.messages import ImageRequestMessage, ImageResponseMessage, SliceRequestMessage, SliceResponseMessage
from dal.queues import ReceivedMessage
from workers.errors import PermanentJobError
from dal.job_model import library_name
from workers.services import Services
from workers.slicing import (
    OUTPUT_CONTENT_TYPE,
    OUTPUT_EXTENSION,
    BandFormatError,
    cut_bands,
    decode_png,
    encode_band,
    encode_output,
    stitch,
)

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

    from mosaic.grid import Grid

__all__ = ["JobController", "band_blob_name", "output_blob_name", "slice_output_name"]

log = logging.getLogger(__name__)
_IO_THREADS = 8
_BEFORE_RENDERING = (JobStatus.QUEUED, JobStatus.SLICING)


def band_blob_name(request_id: str, sequence: int) -> str:
    return f"{request_id}/{sequence}.png"


def slice_output_name(request_id: str, sequence: int) -> str:
    return f"{request_id}/{sequence}.png"


def output_blob_name(request_id: str) -> str:
    return f"{request_id}.{OUTPUT_EXTENSION}"


def _claim_name(request_id: str) -> str:
    return f"{request_id}/stitch.claim"


class JobController:
    """Handlers for ``imagerequest`` and ``sliceresponse``; safe to run in several processes."""

    def __init__(self, services: Services, *, stitch_timeout: float = 600.0) -> None:
        self.services = services
        self.name = services.name
        self.claims = BlobClaims(
            services.storage, services.blobs.container_name(SLICE_RESPONSE_CONTAINER), stale_after=stitch_timeout
        )

    # --- imagerequest ----------------------------------------------------------------------

    def handle_image_request(self, received: ReceivedMessage) -> None:
        message = received.message
        assert isinstance(message, ImageRequestMessage), message
        jobs, rid = self.services.jobs, message.request_id
        existing = jobs.get(message.client_id, rid)
        if existing is not None and (existing.status in TERMINAL_STATUSES or existing.status == JobStatus.STITCHING):
            log.info("job %s is %s already; request ignored", rid, existing.status)
            return
        from mosaic.grid import cell_image, plan_bands, plan_grid

        settings = self.services.settings
        if message.slices > settings.max_slices:
            raise PermanentJobError(f"{message.slices} slices were asked for; at most {settings.max_slices} are allowed")
        image = self._read_image(message)
        try:
            grid = plan_grid(
                image.width,
                image.height,
                tile_size=message.tile_size,
                tiles_across=message.tiles_across,
                max_output_pixels=settings.max_output_pixels,
            )
        except ValueError as exc:
            raise PermanentJobError(f"the mosaic cannot be planned: {exc}") from None
        try:
            rows = plan_bands(grid.tiles_down, message.slices)
        except ValueError:
            raise PermanentJobError(
                f"{message.slices} slices were asked for, but the mosaic has only {grid.tiles_down} rows of "
                f"tiles; ask for at most {grid.tiles_down} slices"
            ) from None
        job = self._record_job(message, grid)

        cells = cell_image(image, grid)
        bands = cut_bands(cells, tiles_down=grid.tiles_down, tiles_across=grid.tiles_across, rows=rows)
        blobs = self.services.blobs
        with ThreadPoolExecutor(max_workers=min(_IO_THREADS, len(bands))) as pool:
            urls = list(
                pool.map(
                    lambda b: blobs.upload(
                        SLICE_REQUEST_CONTAINER, band_blob_name(rid, b.sequence), encode_band(b), content_type="image/png"
                    ),
                    bands,
                )
            )
        # Every band is written: only now may a processor hear of them.
        job = jobs.update(
            message.client_id,
            rid,
            lambda j: replace(j, status=JobStatus.RENDERING) if j.status in _BEFORE_RENDERING else None,
        )
        queue = self.services.queues.slice_request
        pending = [
            SliceRequestMessage(
                queue_uri=queue.url,
                client_id=message.client_id,
                request_id=rid,
                image_library_uri=message.image_library_uri,
                slice_uri=url,
                slice_sequence=band.sequence,
                tile_size=message.tile_size,
            )
            for band, url in zip(bands, urls, strict=True)
            if band.sequence not in job.slices_done
        ]
        queue.submit(pending)
        for request in pending:
            band = bands[request.slice_sequence]
            jobs.add_event(
                rid,
                "dispatched",
                actor=self.name,
                slice=band.sequence,
                message=f"slice {band.sequence + 1} of {len(bands)} (tile rows {band.first_row}..{band.first_row + band.rows - 1}) dispatched",
            )
        log.info("job %s: %d slices dispatched", rid, len(pending))

    def _read_image(self, message: ImageRequestMessage) -> Image.Image:
        from mosaic.images import ImageDecodeError, open_image

        blobs = self.services.blobs
        name = library_name(message.image_library_uri)
        if not blobs.is_library(name):
            raise PermanentJobError(f"the tile library {name!r} does not exist")
        try:
            data = blobs.download_url(message.image_uri)
        except BlobMissingError:
            raise PermanentJobError("the uploaded image is gone from storage; please upload it again") from None
        except ValueError as exc:
            raise PermanentJobError(f"the image address is not a blob of this storage account: {exc}") from None
        try:
            return open_image(data, max_pixels=self.services.settings.max_input_pixels)
        except ImageDecodeError as exc:
            raise PermanentJobError(f"the image could not be read as a picture: {exc}") from None

    def _record_job(self, message: ImageRequestMessage, grid: Grid) -> Job:
        jobs, rid = self.services.jobs, message.request_id

        def change(job: Job) -> Job | None:
            if job.status not in _BEFORE_RENDERING:
                return None
            return replace(
                job,
                status=JobStatus.SLICING,
                slices=message.slices,
                tile_size=message.tile_size,
                tiles_across=grid.tiles_across,
                tiles_down=grid.tiles_down,
                output_width=grid.output_width,
                output_height=grid.output_height,
            )

        if jobs.get(message.client_id, rid) is None:
            try:
                input_name = _input_name(self.services, message.image_uri)
                return jobs.create(Job.for_request(message, status=JobStatus.SLICING, input_name=input_name, grid=grid))
            except JobExistsError:
                pass  # created by someone else meanwhile: update it like any other
        return jobs.update(message.client_id, rid, change)

    # --- sliceresponse ---------------------------------------------------------------------

    def handle_slice_response(self, received: ReceivedMessage) -> None:
        message = received.message
        assert isinstance(message, SliceResponseMessage), message
        jobs, rid, seq = self.services.jobs, message.request_id, message.slice_sequence
        job = jobs.get(message.client_id, rid)
        if job is None:
            log.warning("slice %d of unknown job %s ignored (deleted?)", seq, rid)
            return
        if job.status in TERMINAL_STATUSES:
            return
        if seq >= job.slices:
            raise PermanentJobError(f"a response for slice {seq} arrived, but the job has only {job.slices} slices")
        def record(j: Job) -> Job | None:
            if j.status in TERMINAL_STATUSES or seq in j.slices_done:
                return None
            done = j.slices_done | {seq}
            status = JobStatus.STITCHING if len(done) == j.slices else j.status
            return replace(j, slices_done=done, status=status)

        job, added = jobs.apply(message.client_id, rid, record)
        if added:
            jobs.add_event(
                rid, "progress", actor=self.name, slice=seq,
                message=f"slice {seq + 1} recorded: {len(job.slices_done)} of {job.slices} done",
            )
        if job.status in TERMINAL_STATUSES or len(job.slices_done) < job.slices:
            return
        claim = _claim_name(rid)
        if job.output_name is not None:
            # Stitched already. Only the stitcher's own message (redelivered because it died after
            # recording the output) re-sends the response; any other duplicate just goes away.
            holder = self.claims.holder(claim)
            if holder is not None and holder.message_id == received.id:
                self._send_response(job)
            return
        if not self.claims.acquire(claim, message_id=received.id, owner=self.name):
            log.info("job %s: another controller is stitching", rid)
            return
        self._stitch(job)

    def _stitch(self, job: Job) -> None:
        rid, blobs, started = job.request_id, self.services.blobs, time.monotonic()

        def fetch(seq: int) -> np.ndarray:
            try:
                pixels, _ = decode_png(blobs.download(SLICE_RESPONSE_CONTAINER, slice_output_name(rid, seq)))
            except BlobMissingError:
                raise PermanentJobError(f"the rendered slice {seq + 1} is missing from storage") from None
            except BandFormatError as exc:
                raise PermanentJobError(f"the rendered slice {seq + 1} is unreadable: {exc}") from None
            return pixels

        with ThreadPoolExecutor(max_workers=min(_IO_THREADS, job.slices)) as pool:
            bands = list(pool.map(fetch, range(job.slices)))
        try:
            mosaic = stitch(bands, width=job.output_width, height=job.output_height)
        except ValueError as exc:
            raise PermanentJobError(f"the rendered slices do not fit together: {exc}") from None
        name = output_blob_name(rid)
        blobs.upload(IMAGE_OUTPUT_CONTAINER, name, encode_output(mosaic), content_type=OUTPUT_CONTENT_TYPE)
        job = self.services.jobs.update(
            job.client_id, rid, lambda j: replace(j, output_name=name) if j.output_name is None else None
        )
        seconds = time.monotonic() - started
        self.services.jobs.add_event(
            rid, "stitched", actor=self.name, seconds=seconds,
            message=f"{job.slices} slices stitched into a {job.output_width}x{job.output_height} mosaic",
        )
        log.info("job %s: stitched in %.2f s", rid, seconds)
        self._send_response(job)

    def _send_response(self, job: Job) -> None:
        queue = self.services.queues.image_response
        assert job.output_name is not None
        queue.submit(
            ImageResponseMessage(
                queue_uri=queue.url,
                client_id=job.client_id,
                request_id=job.request_id,
                image_uri=self.services.blobs.blob_url(IMAGE_OUTPUT_CONTAINER, job.output_name),
            )
        )


def _input_name(services: Services, image_uri: str) -> str:
    try:
        container, name = services.blobs.parse_blob_url(image_uri)
    except ValueError:
        return image_uri
    return name if container == services.blobs.container_name(IMAGE_INPUT_CONTAINER) else f"{container}/{name}"
