"""The ImageProcessor: renders one band of a job into its mosaic.

On ``slicerequest``: load the tile library (``LibraryStore.load`` keeps each library
version's index in memory, so a processor downloads an index once, never a tile per cell),
read the band PNG written by the controller (from the message itself when the controller
inlined it, else its blob; the PNG says which cell rows it holds), render it
with ``render_band(seed=request_id, row_offset=first row)`` — exactly what the in-process
``render`` does for those rows — write ``sliceresponse/<request_id>/<seq>.npy`` (raw pixels,
``workers.imaging.slicing.encode_rendered``) and send a ``SliceResponseMessage``. When the band is the
whole grid (a job of one slice) there is nothing to stitch: the processor encodes the final
JPEG itself and writes it straight to ``imageoutput/<request_id>.jpg``; its response points
there, and the controller only records it (no download, no re-encode: the hand-off of a
40 MP job shrinks from 120 MB of pixels twice to one JPEG once). It builds the job's Deep Zoom
pyramid too, from the pixels it holds, in a second thread while it encodes and uploads the
JPEG (libvips works outside the GIL), streams the zip to its blob as it is built
(``imageoutput/<request_id>.dzi.zip``, committed after the JPEG) and answers; the controller
finds it there and builds nothing (without it, the controller would download the JPEG,
decode it and cut its tiles from a second JPEG generation). A pyramid that fails here (its
upload, on a failed-over account) is only logged: the controller builds it from the JPEG,
as it does for a processor of an older release that writes the JPEG alone. These final outputs
are written once (``keep_existing``): a redelivery, or the slow first holder of a slice the
controller hedged (``workers.controller.hedging``), renders the same pixels and leaves what is stored
alone, so a finished job's JPEG and pyramid never change under a reader (a new version would
break a download in progress). Its slice blob, an intermediate, is rewritten with the same bytes.

A giant job's band (planned on Deep Zoom units: the band PNG carries the plan, ``mosaic.pieces``)
sends back no pixels: the processor renders its rows (whole parts of the grid, ``mosaic.parts``,
so rows it shares with a neighbour come out the same), stages its rows of the JPEG
and its pyramid tiles as blocks of the output blobs and writes a manifest with its reduced
rows (``workers.imaging.band_pieces``); the controller commits them (``workers.controller.assembly``).

Its ``slice_done`` log line carries the step timings (``stages``) that ``make bench`` prints; it
travels in the SliceResponse (``report``) and the controller stores it with the slice's progress
in the job row, in the write it makes anyway (one table transaction per slice, not two).
A redelivered slice sends the same kind of report; the controller records a slice once.

**One BLAS thread.** A processor is one core's worth of rendering: ``photomosaics run`` starts one
per core. NumPy's BLAS (the matching's matrix products) starts a thread per core in every
process, so N processors ran N x cores threads on N cores, and OpenBLAS's threads spin while
they wait. ``limit_blas_threads`` (called by ``photomosaics processor``) sets one, unless the
operator set a BLAS thread count in the environment. ``make bench`` (handoffs), side by side on
an idle machine: a small job's band render 0.23 s -> 0.07 s, submit -> done 0.43 s -> 0.36 s;
a 40 MP one-slice render was no faster with two threads (1.52 s vs 1.49 s).

``slice_delay`` (env ``PHOTOMOSAICS_TEST_SLICE_DELAY``, **tests only**) sleeps before each
render so the chaos tests can kill a processor mid-slice.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dal.blobs.library_creation import tile_blob_names
from dal.blobs.names import output_blob_name, pyramid_blob_name, slice_output_name, slice_tile_map_name, tile_map_name
from dal.blobs.rendered import encode_rendered
from dal.blobs.tile_maps import TILE_MAP_CONTENT_TYPE, TileMap
from dal.config import IMAGE_OUTPUT_CONTAINER, SLICE_RESPONSE_CONTAINER
from dal.errors import BlobMissingError
from dal.jobs.model import TERMINAL_STATUSES, library_name
from dal.queues.consumable import ReceivedMessage
from dal.queues.message_fields import MAX_REPORT_STAGES
from dal.queues.messages import SliceRequestMessage, SliceResponseMessage
from mosaic.grid import Grid
from mosaic.library import LibraryFormatError
from mosaic.parts import plan_parts
from mosaic.render import render_band
from mosaic.sized import band_cell_sizes
from mosaic.tile_choice import choose_tiles
from workers.imaging.band_pieces import make_pieces
from workers.imaging.slicing import OUTPUT_CONTENT_TYPE, Band, BandFormatError, band_bytes, decode_band, encode_output
from workers.imaging.stitching import PYRAMID_CONTENT_TYPE, fits_jpeg, save_pyramid_pixels
from workers.job_options import job_options
from workers.runtime.bindings import consumes
from workers.runtime.errors import PermanentJobError
from workers.services import RoleServices
from workers.stages import Stopwatch

if TYPE_CHECKING:
    import numpy as np

    from dal.admission.render_rates import RateMeter
    from dal.blobs.store import BlobStore
    from mosaic.library import TileLibrary

__all__ = ["ImageProcessor"]

log = logging.getLogger(__name__)

# Variables through which an operator sets BLAS's thread count; any of them set wins.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def limit_blas_threads(environ: Mapping[str, str] = os.environ) -> int | None:
    """One BLAS thread in this process (see the module docstring); returns the limit set, or
    None when the environment already chose a count (the operator's choice stands)."""
    if any(environ.get(name, "").strip() for name in BLAS_THREAD_VARIABLES):
        return None
    from threadpoolctl import threadpool_limits  # a process-wide setting: its return value need not be kept

    threadpool_limits(limits=1, user_api="blas")
    return 1


class ImageProcessor:
    """Handler for ``slicerequest``; any number of processes may run it."""

    def __init__(self, services: RoleServices, *, rate_meter: RateMeter | None = None) -> None:
        self.services = services
        self.name = services.name
        self.slice_delay = services.settings.test_slice_delay
        # Measures this process's seconds per slice for backpressure (dal.admission.render_rates); the
        # role wires it in, and it writes at most once per 30 s, so it is no part of a job's cost.
        self.rate_meter = rate_meter

    @consumes(lambda queues: queues.slice_requests, what="rendering a slice")  # every lane and shard
    def handle_slice_request(self, received: ReceivedMessage) -> None:
        started = time.monotonic()
        self._handle(received)
        if self.rate_meter is not None:
            self.rate_meter.observe(time.monotonic() - started)

    def _handle(self, received: ReceivedMessage) -> None:
        message = received.message
        assert isinstance(message, SliceRequestMessage), message
        rid, seq = message.request_id, message.slice_sequence
        jobs = self.services.jobs
        # A job ends before its slice's first delivery when a sibling slice was poisoned, or when
        # it was cancelled (which deletes its bands: ``_read_band`` reads the job then). Only a
        # redelivery pays the read that skips it here; a fresh slice of a job failed otherwise is
        # rendered and then ignored by the controller. The same read skips a slice already
        # recorded as done: the copy that comes back after its lease when the controller hedged
        # it (workers.controller.hedging) and another processor finished it.
        if received.dequeue_count > 1:
            job = jobs.get(message.client_id, rid)
            if job is not None and (job.status in TERMINAL_STATUSES or seq in job.slices_done):
                why = "it is done already" if seq in job.slices_done else f"the job is {job.status}"
                log.info("job %s: slice %d not rendered (%s)", rid, seq, why)
                return
        library = self._library(message.image_library_uri, message.library_version)
        clock = Stopwatch()
        band = self._read_band(message, clock)
        if band is None:
            return  # its job ended and took its bands (cancelled): nothing to render
        pixels, choice, sizes = _render(message, band, library)
        seconds = clock.lap("render")
        store = self.services  # upload: to the secondary account when the primary fails (dal.availability.failover)
        whole, pyramid = band.first_row == 0 and band.rows == band.tiles_down, False
        # A whole mosaic too large for a JPEG (a panorama) goes back as a slice: the controller's
        # stitch stores its pyramid alone; the JPEG encoder would fail it on every delivery.
        whole = whole and fits_jpeg(pixels.shape[1], pixels.shape[0])
        self._store_tile_map(message, library, *_owned_choice(band, choice, sizes), whole=whole)
        clock.lap("tile_map")
        if whole:  # the whole mosaic: the final outputs now
            url, pyramid = self._final_outputs(rid, pixels, clock)
        elif band.piece is not None and band.plan is not None:  # a giant band: final pieces, no pixels
            png, name = make_pieces(self.services.blobs, rid, pixels, band.piece, band.plan.splits, clock)
            url = self.services.blobs.upload(SLICE_RESPONSE_CONTAINER, name, png, content_type="image/png")
            clock.lap("manifest_upload")
        else:
            encoded = encode_rendered(pixels)
            clock.lap("slice_encode")
            url = store.upload(
                SLICE_RESPONSE_CONTAINER, slice_output_name(rid, seq), encoded, content_type="application/octet-stream"
            )
            clock.lap("slice_upload")
        queue = self.services.queues.slice_response
        # The slice's log line rides in its response: no event row of ours (a table transaction
        # less per slice). The controller records it with the slice's progress, in one ETag write,
        # so the line exists exactly when the progress does: a crash before the send loses
        # neither (the request comes back), a duplicate response records nothing twice.
        report = {
            "actor": self.name[:100],
            "message": f"slice {seq + 1} rendered ({pixels.shape[1]}x{pixels.shape[0]} px) in {seconds:.2f} s"
            + (
                ", its JPEG and Deep Zoom pyramid stored"
                if pyramid
                else ", its JPEG stored"
                if whole
                else ", its JPEG rows and pyramid tiles staged"
                if band.piece is not None
                else ""
            ),
            "at": datetime.now(UTC).isoformat(),
            "seconds": round(seconds, 4),
            "stages": {name: round(value, 4) for name, value in list(clock.stages.items())[:MAX_REPORT_STAGES]},
        }
        self.services.send(
            SliceResponseMessage(
                queue_uri=queue.url,
                client_id=message.client_id,
                request_id=rid,
                slice_uri=url,
                slice_sequence=seq,
                report=report,
            )
        )

    def _read_band(self, message: SliceRequestMessage, clock: Stopwatch) -> Band | None:
        """The slice's band: inside the message when small, else its blob (either account when
        paired); None when the blob is gone because its job ended (a cancel deletes the bands)."""
        seq = message.slice_sequence
        try:
            data = band_bytes(message.band, lambda: self.services.download_url(message.slice_uri))
            clock.lap("band_download")
            band = decode_band(data)
            clock.lap("band_decode")
        except BlobMissingError:
            # Only here is the job read on a first delivery: a missing band is rare, and it is
            # either the job's end (cancelled, deleted) or damage that fails the job.
            job = self.services.jobs.get(message.client_id, message.request_id)
            if job is None or job.status in TERMINAL_STATUSES:
                ended = "gone" if job is None else job.status
                log.info("job %s: slice %d not rendered (the job is %s)", message.request_id, seq, ended)
                return None
            raise PermanentJobError(f"slice {seq + 1} of the picture is missing from storage") from None
        except (BandFormatError, ValueError) as exc:
            raise PermanentJobError(f"slice {seq + 1} of the picture cannot be read: {exc}") from None
        if self.slice_delay > 0:
            time.sleep(self.slice_delay)
            clock.lap("test_delay")
        return band

    def _store_tile_map(
        self,
        message: SliceRequestMessage,
        library: TileLibrary,
        choice: np.ndarray,
        sizes: np.ndarray | None,
        first_row: int,
        *,
        whole: bool,
    ) -> None:
        """Which library tile is in which cell of the band (``dal.blobs.tile_maps``): the job's map when
        the band is the whole mosaic (this processor writes its outputs), else the band's, which
        the stitch joins. Deterministic bytes: a redelivery rewrites the same blob."""
        blobs = library.cached(("tile-blob-names",), lambda: tile_blob_names(library.names))
        name = library_name(message.image_library_uri)
        tile_map = TileMap.from_choice(
            choice,
            names=library.names,
            blobs=blobs,
            library=name,
            first_row=first_row,
            library_version=library.version,
            sizes=sizes,
        )
        rid = message.request_id
        if whole:  # a final output: written once, as the JPEG and the pyramid (_final_outputs)
            container, blob = IMAGE_OUTPUT_CONTAINER, tile_map_name(rid)
        else:
            container, blob = SLICE_RESPONSE_CONTAINER, slice_tile_map_name(rid, message.slice_sequence)
        self.services.upload(
            container, blob, tile_map.encode(), content_type=TILE_MAP_CONTENT_TYPE, keep_existing=whole
        )

    def _final_outputs(self, rid: str, pixels: np.ndarray, clock: Stopwatch) -> tuple[str, bool]:
        """Store the job's JPEG and, built beside it, its pyramid; (the JPEG's URL, pyramid stored?).

        The pyramid zip streams to its blob as libvips builds it (``BlobStore.open_writer``: no
        file), and is committed once the JPEG is stored (on this account). Laps: ``output_encode``
        and ``output_upload`` (the JPEG), then ``pyramid_build`` (what the build, with its
        streamed upload, took beyond them: the rest ran meanwhile) and ``pyramid_upload`` (the
        commit: the last block and the block list, or a small pyramid's one Put Blob)."""
        store, blobs = self.services, self.services.blobs  # the JPEG: to the secondary account when the primary fails
        # Written once (keep_existing): a late duplicate of this slice (a redelivery, or the slow
        # first holder of a hedged slice, workers.controller.hedging) leaves a finished job's outputs as
        # they are, instead of replacing them under a download in progress with a new ETag.
        with (
            blobs.open_writer(
                IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid), content_type=PYRAMID_CONTENT_TYPE, keep_existing=True
            ) as zipped,
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyramid") as pool,
        ):
            building = pool.submit(save_pyramid_pixels, pixels, zipped.write)
            try:
                encoded = encode_output(pixels)
                clock.lap("output_encode")
                url = store.upload(
                    IMAGE_OUTPUT_CONTAINER,
                    output_blob_name(rid),
                    encoded,
                    content_type=OUTPUT_CONTENT_TYPE,
                    keep_existing=True,
                )
                clock.lap("output_upload")
            finally:
                error = building.exception()  # the build has ended, and its writes, before the writer closes
            clock.lap("pyramid_build")
            if error is None and _on_account(blobs, url):
                try:
                    zipped.close()
                    clock.lap("pyramid_upload")
                    return url, True
                except Exception as exc:  # the controller builds it instead: slower, never lost
                    error = exc
            zipped.abort()  # nothing committed: the name keeps what it had (nothing, for a new job)
            log.warning(
                "job %s: pyramid left to the controller (%s)",
                rid,
                f"{type(error).__name__}: {error}" if error else "JPEG on the secondary account",
            )
            return url, False

    def _library(self, uri: str, version: str | None) -> TileLibrary:
        name = library_name(uri)
        try:
            fresh_for = self.services.settings.library_revalidate_seconds
            return self.services.libraries.load(uri, fresh_for=fresh_for, version=version)
        except (BlobMissingError, LookupError) as exc:
            raise PermanentJobError(f"the tile library {name!r} cannot be used: {exc}") from None
        except LibraryFormatError as exc:
            raise PermanentJobError(f"the tile library {name!r} is damaged: {exc}") from None


def _on_account(blobs: BlobStore, url: str) -> bool:
    """Whether ``url`` is a blob of ``blobs``' account (not the secondary's after a failover)."""
    try:
        blobs.parse_blob_url(url)
    except ValueError:
        return False
    return True


def _owned_choice(
    band: Band, choice: np.ndarray, sizes: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None, int]:
    """The rows of a band's choice (and cell sizes) that its tile map reports, and the first of them.

    Giant bands share a few cell rows with their neighbours; each reports the cells whose top
    lies in the JPEG rows it encodes, so the bands' maps join without overlap or gap. (Cells of
    several sizes come in plain bands of whole parts: ``workers.controller``.)"""
    if band.piece is None:
        return choice, sizes, band.first_row
    size = band.piece.tile_size
    start, stop = -(-band.piece.jpeg.start // size), -(-band.piece.jpeg.stop // size)
    rows = slice(start - band.first_row, stop - band.first_row)
    return choice[rows], None if sizes is None else sizes[rows], start


def _render(
    message: SliceRequestMessage, band: Band, library: TileLibrary
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The band's pixels, the tile placed in each of its cells and, with cells of several sizes,
    the size of the cell covering each (None: one size), with the job's options: its parts of
    the grid chosen and painted one by one (``mosaic.parts``), so its rows come out as in any
    other slicing of the job and in the offline render."""
    options = job_options(correction=message.correction, cell_sizes=message.cell_sizes, split=message.split)
    size, first, rid = message.tile_size, band.first_row, message.request_id
    grid = Grid(band.tiles_across, band.tiles_down, band.tiles_across * size, band.tiles_down * size, size)
    try:
        parts = plan_parts(grid, align=options.cell_sizes[-1])
        choice = band.choice  # a fair-use job's band carries the controller's choice for the whole grid
        if choice is None:
            choice = choose_tiles(
                band.cells, library, tile_size=size, seed=rid, row_offset=first, options=options, parts=parts
            )
        pixels = render_band(
            band.cells, library, tile_size=size, seed=rid, row_offset=first, choice=choice, options=options, parts=parts
        )
        sizes = band_cell_sizes(band.cells, options, choice, parts=parts, row_offset=first) if options.sized else None
    except (ValueError, IndexError) as exc:
        raise PermanentJobError(f"slice {message.slice_sequence + 1} cannot be rendered: {exc}") from None
    return pixels, choice, sizes
