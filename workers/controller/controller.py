"""The JobController: cuts a job into slices, and stitches the rendered slices exactly once.

On ``imagerequest`` (``handle_image_request``): read the photo (EXIF orientation applied,
RGB), plan the grid, resample to the cell image, cut it into ``slices`` bands of whole cell
rows, write every band to ``slicerequest/<request_id>/<seq>.png`` (or, up to 32 KiB of PNG,
into its message: ``workers.imaging.slicing.inline_band``), record the job, and only then send one
``SliceRequestMessage`` per band. A redelivered request rewrites the same
blobs and re-sends only the slices not yet done: harmless. A fair-use job (``max_uses``) or a
"use every photo" job is chosen here, once, for the whole grid (``mosaic.tile_choice.choose_whole``:
a global min-cost flow, deterministic, so a redelivery writes the same choice), and each band
PNG carries its rows of that choice: the bands together can never exceed N nor leave a photo
out, whichever processors render them.
The slices go to a lane of ``slicerequest`` (``dal.queues.lanes``): a client's oldest unfinished job
to lane 0, its later jobs lower, so one client's backlog never queues ahead of another
client's single job.

On ``sliceresponse`` (``handle_slice_response``): add the slice to the job's
``slices_done`` with one ETag update (one read, one conditional write; duplicates and late
arrivals change nothing), and in the same write the slice's ``slice_done`` log line that its
processor sent in the response (``Job.slice_events``: no event row of its own). The
update that completes the set moves the job to ``stitching`` and is the stitch's claim: it
names its message as the row's ``stitcher``, and the ETag lets only one such write succeed, so
exactly one controller stitches even when two see the last slice at once (no claim blob: a
transaction less per job). A controller that died mid-stitch is replaced when its own message
comes back (same message id), or by another message once the claim is older than
``PHOTOMOSAICS_STITCH_TIMEOUT`` (``_claim_stitch``).
The stitch itself is ``workers.controller.assembly.Stitcher``: for a giant job (bands planned on Deep
Zoom units, ``mosaic.pieces``) it only commits the pieces the processors staged on the output
blobs, with a JPEG header and the pyramid's top levels and directory; otherwise it streams the
rendered slices through libvips into the JPEG and the pyramid zip. Then the controller records
``output_name`` and ``done`` in one write (the "stitched" and "done" lines in one more) and
sends the ``ImageResponseMessage``: a finished job waits for no further queue hop (the
responder, which marked jobs done before, still does for a controller of an older release,
and otherwise finds the job done and writes nothing). A one-slice
job's processor has written the JPEG and the pyramid already (one existence check here); a
processor of an older release wrote the JPEG alone, and the stitch builds the pyramid from
it. Every job gets a pyramid: the job page has one viewer for every size (OpenSeadragon),
and the zip is one blob written once. Jobs writes reuse the row just read or written
(``JobStore.update(current=...)``; a slice's update starts from the row the controller wrote
last for that job, ``workers.controller.recent_rows``) and the dispatch events go in one table transaction, so a
job costs few storage transactions beyond its queue messages and blobs (``make bench``).

Stragglers (``workers.controller.hedging``, on unless ``PHOTOMOSAICS_HEDGES_PER_SLICE=0``): the
controller role runs a ``Hedger`` thread, which this handler tells of every dispatch
and every slice response (in memory, no storage call). A slice out far longer than its
siblings took, while no slice waits in the queues (a backlog is never hedged), is sent again
once, the same ``SliceRequestMessage`` to the same queue: a paused processor (SIGSTOP, a frozen
VM) no longer holds its job for a whole lease. The first copy to finish counts; the other
changes nothing (the ETag'd ``slices_done``, the one stitch claim, outputs written once).
"""

from __future__ import annotations

import contextvars
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from dal.config import IMAGE_INPUT_CONTAINER, IMAGE_OUTPUT_CONTAINER
from dal.errors import JobExistsError, JobNotFoundError
from dal.jobs.model import TERMINAL_STATUSES, Job, JobEvent, JobStatus, slice_event, utcnow
from dal.operations.cleanup import delete_bands
from dal.queues import tracing
from dal.queues.consumable import ReceivedMessage
from dal.queues.lanes import lane_for
from dal.queues.messages import ImageRequestMessage, ImageResponseMessage, SliceResponseMessage
from mosaic.cells import check_tile_size
from mosaic.grid import cell_image, min_slices, plan_grid
from mosaic.limits import MAX_TILE_SIZE
from mosaic.pieces import PiecePlan, job_bands
from workers.controller.assembly import Stitcher
from workers.controller.dispatch import dispatch_slices, store_bands
from workers.controller.hedging import Hedger
from workers.controller.job_inputs import JobInputs
from workers.controller.recent_rows import RecentRows
from workers.imaging.slicing import cut_bands
from workers.runtime.bindings import consumes
from workers.runtime.errors import PermanentJobError
from workers.services import RoleServices
from workers.stages import Stopwatch

if TYPE_CHECKING:
    from mosaic.grid import Grid

__all__ = ["JobController"]

log = logging.getLogger(__name__)
_BEFORE_RENDERING = (JobStatus.QUEUED, JobStatus.SLICING)


class JobController:
    """Handlers for ``imagerequest`` and ``sliceresponse``; safe to run in several processes."""

    def __init__(self, services: RoleServices, *, hedger: Hedger | None = None) -> None:
        self.services = services
        self.name = services.name
        self.hedger = hedger  # told of dispatches and responses (None: not watched, as in a test)
        self._written = RecentRows()
        self._stitcher = Stitcher(services)
        self._log_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stitch-log")
        self.inputs = JobInputs(services)  # the job's photo and library (workers.controller.job_inputs)

    # --- imagerequest ----------------------------------------------------------------------

    @consumes(lambda queues: queues.image_requests, what="slicing the picture")  # every lane (dal.queues.lanes)
    def handle_image_request(self, received: ReceivedMessage) -> None:
        message = received.message
        assert isinstance(message, ImageRequestMessage), message
        jobs, rid = self.services.jobs, message.request_id
        # The job's row and its place in its client's line, in one query: the line decides the
        # lane its slices go to (fair scheduling between clients, dal.queues.lanes).
        existing, ahead = jobs.unfinished_ahead(message.client_id, rid)
        lane = lane_for(ahead, len(self.services.queues.slice_lanes))
        if existing is not None and (existing.status in TERMINAL_STATUSES or existing.status == JobStatus.STITCHING):
            log.info("job %s is %s already; request ignored", rid, existing.status)
            return

        settings = self.services.settings
        if message.slices > settings.max_slices:
            raise PermanentJobError(
                f"{message.slices} slices were asked for; at most {settings.max_slices} are allowed"
            )
        clock = Stopwatch()
        image = self.inputs.read_image(message, clock)
        try:
            grid = plan_grid(
                image.width,
                image.height,
                tile_size=message.tile_size,
                tiles_across=message.tiles_across,
                max_output_pixels=settings.max_output_pixels,
            )
            if message.cell_sizes:  # a large cell's photo at its size: from the library's stored tiles
                check_tile_size(message.cell_sizes, message.tile_size, MAX_TILE_SIZE)
        except ValueError as exc:
            raise PermanentJobError(f"the mosaic cannot be planned: {exc}") from None
        plan, rows = _plan_slices(message, grid)
        slices = len(rows)
        job = existing
        if min_slices(grid) > 1:  # a giant mosaic takes seconds to slice: show "slicing" meanwhile
            job = self._record_job(message, grid, existing, slices=slices, status=JobStatus.SLICING)
            clock.lap("job_record")

        cells = cell_image(image, grid)
        choice = None
        if message.max_uses is not None or message.use_every_photo:
            choice = self.inputs.choose_whole(message, cells, grid, image.size)
            clock.lap("fair_assignment")
        bands = cut_bands(
            cells, tiles_down=grid.tiles_down, tiles_across=grid.tiles_across, rows=rows, choice=choice, plan=plan
        )
        clock.lap("slicing")
        stored = store_bands(self.services, rid, bands)
        clock.lap("band_encode_upload")
        # Every band is written: only now may a processor hear of them. One write records the
        # grid and "rendering" (a job that is not giant never shows "slicing": a transaction less).
        job = self._record_job(message, grid, job, slices=slices, status=JobStatus.RENDERING)
        clock.lap("job_record")
        if job.status in TERMINAL_STATUSES:  # cancelled while it was being sliced: send nothing
            log.info("job %s ended (%s) while it was sliced; its slices are not sent", rid, job.status)
            delete_bands(self.services.blobs, rid)
            return
        self._written.remember(job)
        sent = dispatch_slices(
            self.services, self.name, message, job, bands, stored, lane=lane, ahead=ahead, clock=clock
        )
        if self.hedger is not None:
            self.hedger.dispatched(message.client_id, sent, {b.sequence: b.rows * b.tiles_across for b in bands})

    def _record_job(
        self, message: ImageRequestMessage, grid: Grid, existing: Job | None, *, slices: int, status: JobStatus
    ) -> Job:
        """The job row with its grid and ``status`` (created if a CLI producer made none); a row
        already past slicing (a redelivery) is left as it is and returned as stored."""
        jobs, rid = self.services.jobs, message.request_id

        def change(job: Job) -> Job | None:
            if job.status not in _BEFORE_RENDERING or (job.status == status == JobStatus.SLICING):
                return None
            return replace(
                job,
                status=status,
                slices=slices,
                tile_size=message.tile_size,
                tiles_across=grid.tiles_across,
                tiles_down=grid.tiles_down,
                output_width=grid.output_width,
                output_height=grid.output_height,
            )

        if existing is None:
            try:
                input_name = _input_name(self.services, message.image_uri)
                job = Job.for_request(message, status=status, input_name=input_name, grid=grid)
                return jobs.create(replace(job, slices=slices))
            except JobExistsError:
                pass  # created by someone else meanwhile: update it like any other
        return jobs.update(message.client_id, rid, change, current=existing).job

    # --- sliceresponse ---------------------------------------------------------------------

    @consumes(lambda queues: queues.slice_response, what="collecting a rendered slice")
    def handle_slice_response(self, received: ReceivedMessage) -> None:
        message = received.message
        assert isinstance(message, SliceResponseMessage), message
        jobs, rid, seq = self.services.jobs, message.request_id, message.slice_sequence
        logged = _slice_event(message)

        def record(j: Job) -> Job | None:
            if j.status in TERMINAL_STATUSES:
                return None
            if seq >= j.slices:
                raise PermanentJobError(f"a response for slice {seq} arrived, but the job has only {j.slices} slices")
            if seq in j.slices_done:
                return None
            done = j.slices_done | {seq}
            complete = len(done) == j.slices
            events = j.slice_events if logged is None else (*j.slice_events, logged)
            # The write that completes the set is also the stitch claim: it names this message
            # (its id survives redeliveries) as the stitcher. The ETag lets exactly one such write
            # succeed, so exactly one controller stitches, and no claim blob is written.
            return replace(
                j,
                slices_done=done,
                status=JobStatus.STITCHING if complete else j.status,
                slice_events=events,
                stitcher=received.id if complete else j.stitcher,
            )

        # One ETag write per slice, usually without a read: the row this controller last wrote
        # for the job (at dispatch, or the previous slice) is the first guess, and a stale guess
        # costs a 412 and the read it would have done anyway. The slice's progress is in the job
        # row (slices_done), and so is its log line (the processor's report: no event row, one
        # table transaction per slice instead of two; a duplicate changes neither).
        try:
            job = jobs.update(message.client_id, rid, record, current=self._written.get(message.client_id, rid)).job
        except JobNotFoundError:
            self._written.forget(rid)  # (a watched slice of it: the watcher's row read finds it gone)
            log.warning("slice %d of unknown job %s ignored (deleted?)", seq, rid)
            return
        self._written.remember(job)
        if self.hedger is not None:  # back, and what the row says is done (by any controller) or ended
            self.hedger.recorded(job, seq)
        if job.status in TERMINAL_STATUSES or len(job.slices_done) < job.slices:
            return
        if job.output_name is not None:
            # Stitched already. Only the stitcher's own message (redelivered because it died after
            # recording the output) re-sends the response; any other duplicate just goes away.
            if job.stitcher == received.id:
                self._send_response(job)
            return
        claimed = self._claim_stitch(job, received.id)
        if claimed is None:
            log.info("job %s: another controller is stitching", rid)
            return
        self._stitch(claimed, message)

    def _claim_stitch(self, job: Job, message_id: str) -> Job | None:
        """The job row, if the message ``message_id`` may stitch it now; None if another holds it.

        The claim is the row's ``stitcher`` (set by the write that completed the slices). It is
        ours when it names our message: we completed the set, or our message came back because
        its previous handler died. Any other message backs off while the claim is fresh; past
        ``stitch_timeout`` (a wedged stitcher) it takes the claim over with an ETag write, so
        again only one contender wins. A row from before claims lived in it (no ``stitcher``) is
        anyone's the same way.
        """
        if job.stitcher == message_id:
            return job
        age = (utcnow() - job.updated_at).total_seconds()
        if job.stitcher is not None and age < self.services.settings.stitch_timeout:
            return None
        held = job.stitcher

        def take(j: Job) -> Job | None:
            if j.status != JobStatus.STITCHING or j.output_name is not None or j.stitcher != held:
                return None
            return replace(j, stitcher=message_id)

        try:
            taken = self.services.jobs.update(job.client_id, job.request_id, take, current=job)
        except JobNotFoundError:
            return None
        if not taken.wrote:
            return None
        self._written.remember(taken.job)
        log.warning("job %s: stitch taken over from message %s (claimed %.0f s ago)", job.request_id, held, age)
        return taken.job

    def _stitch(self, job: Job, last: SliceResponseMessage) -> None:
        rid, clock = job.request_id, Stopwatch()
        with tracing.stitch_span(rid, job.slices):
            name, how = self._stitcher.stitch(job, last, clock)

        # The outputs are stored: the write that records them also marks the job done, so the
        # person waiting does not wait for one more queue hop and the responder's read and
        # write (the responder still finishes jobs a controller of an older release stitched).
        def finish(j: Job) -> Job | None:
            if j.status in TERMINAL_STATUSES:  # failed or ended meanwhile: not ours to change
                return None
            return replace(j, status=JobStatus.DONE, output_name=j.output_name or name)

        job, finished = self.services.jobs.update(job.client_id, rid, finish, current=job)
        self._written.forget(rid)  # ended: nothing more to guess
        seconds = sum(clock.stages.values())
        events = [
            dict(
                kind="stitched",
                actor=self.name,
                seconds=seconds,
                stages=clock.stages,
                message=f"{how} into a {job.output_width}x{job.output_height} mosaic and its Deep Zoom pyramid",
            )
        ]
        if finished:
            events.append(
                dict(kind="done", actor=self.name, message=f"mosaic ready: {job.output_width}x{job.output_height} px")
            )
        # The log lines (one transaction) beside the response, not before it (as the processor's slice_done).
        logged = self._log_pool.submit(contextvars.copy_context().run, self.services.jobs.add_events, rid, events)
        log.info("job %s: stitched in %.2f s", rid, seconds)
        try:
            self._send_response(job)
        finally:
            logged.result()

    def _send_response(self, job: Job) -> None:
        queue = self.services.queues.image_response
        assert job.output_name is not None
        self.services.send(
            ImageResponseMessage(
                queue_uri=queue.url,
                client_id=job.client_id,
                request_id=job.request_id,
                image_uri=self.services.blobs.blob_url(IMAGE_OUTPUT_CONTAINER, job.output_name),
                # Done in our output write: say so, and the responder does not read the row to learn it.
                job_done=True if job.status == JobStatus.DONE else None,
            )
        )


def _plan_slices(message: ImageRequestMessage, grid: Grid) -> tuple[PiecePlan | None, list[range]]:
    """The job's bands (``mosaic.pieces.job_bands``): on pyramid units when several and the
    mosaic allows (they make final pieces, the stitch only assembles them), else plain bands of
    whole parts, aligned to the largest cell so that none straddles two bands. The slice count
    changes who renders which rows, never the mosaic."""
    return job_bands(grid, message.slices, align=message.cell_sizes[-1] if message.cell_sizes else 1)


def _slice_event(message: SliceResponseMessage) -> JobEvent | None:
    """The slice's ``slice_done`` line from its processor's report (None: an older processor,
    which wrote the event row itself)."""
    report = message.report  # checked when the message was parsed
    return None if report is None else slice_event(message.request_id, {**report, "slice": message.slice_sequence})


def _input_name(services: RoleServices, image_uri: str) -> str:
    try:
        container, name = services.blobs.parse_blob_url(image_uri)
    except ValueError:
        return image_uri
    return name if container == services.blobs.container_name(IMAGE_INPUT_CONTAINER) else f"{container}/{name}"
