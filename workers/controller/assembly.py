"""The controller's stitch: the rendered slices, or a giant job's staged pieces, into the outputs.

``Stitcher.stitch`` runs once per job, under the stitch claim (``workers.controller.controller``), and
returns the output's blob name; the controller then records it and marks the job done. Three cases:

- **One slice.** Its processor wrote the JPEG and the pyramid (``workers.processor.processor``): one
  existence check (a pyramid missing, from a processor of an older release, is built here from the JPEG).
- **Giant bands** (planned on pyramid units, ``mosaic.pieces``): the processors staged their JPEG
  rows and pyramid tiles as blocks of the output blobs (``workers.imaging.band_pieces``) and wrote a
  manifest with their reduced rows. The stitch reads no full-size pixel: it reads the manifests
  (``1 / 4 ** levels`` of the pixels, PNG), writes the JPEG's header with the full height and
  commits the header and every band's JPEG blocks as ``<request_id>.jpg`` (Put Block List); it
  joins the reduced rows, builds the pyramid's remaining small levels from them with ``dzsave``,
  and commits the bands' zip blocks, its own entries (those levels and the descriptor) and the
  zip's central directory (``mosaic.stored_zip``) as ``<request_id>.dzi.zip``. Block ids are
  content hashes (``workers.imaging.band_pieces.block_id``): a stitch run again commits the same lists.
- **Ordinary slices:** the rendered slices (``.npy``) are streamed to scratch files and libvips
  joins and encodes them in two passes at once (``workers.imaging.stitching``), each output streamed to
  its blob as it is made.
"""

from __future__ import annotations

import contextvars
import io
import tempfile
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dal.blobs.names import output_blob_name, pieces_blob_name, pyramid_blob_name, slice_blob_candidates
from dal.config import IMAGE_OUTPUT_CONTAINER, SLICE_RESPONSE_CONTAINER
from dal.errors import BlobMissingError, RenderedFormatError
from dal.jobs.model import Job
from dal.queues.messages import SliceResponseMessage
from mosaic.deepzoom import descriptor_xml, write_dzi_zip
from mosaic.limits import JPEG_MAX_SIDE
from mosaic.stored_zip import central_directory, local_entries
from workers.imaging.band_pieces import MANIFEST_KEY, Manifest, stage_all
from workers.imaging.jpeg_segments import full_header
from workers.imaging.slicing import OUTPUT_CONTENT_TYPE, BandFormatError, decode_png
from workers.imaging.stitching import (
    PYRAMID_CONTENT_TYPE,
    Streamed,
    fits_jpeg,
    from_pixels,
    join_slices,
    open_jpeg,
    open_slice,
    save_jpeg,
    save_pyramid,
)
from workers.runtime.errors import PermanentJobError
from workers.services import RoleServices
from workers.stages import Stopwatch

if TYPE_CHECKING:
    from dal.blobs.store import BlobStore

__all__ = ["Stitcher"]

_IO_THREADS = 8


class Stitcher:
    """The stitch of one job at a time (see the module docstring); thread-safe, holds no job state."""

    def __init__(self, services: RoleServices) -> None:
        self.services = services

    def stitch(self, job: Job, last: SliceResponseMessage, clock: Stopwatch) -> tuple[str, str]:
        """Write the job's outputs; (the output's blob name, how it was made)."""
        rid, blobs = job.request_id, self.services.blobs
        name = output_blob_name(rid)
        if job.slices == 1 and _is_blob(blobs, last.slice_uri, IMAGE_OUTPUT_CONTAINER, name):
            return name, self._one_slice(job, clock)
        if _is_blob(blobs, last.slice_uri, SLICE_RESPONSE_CONTAINER, pieces_blob_name(rid, last.slice_sequence)):
            return name, self._assemble(job, clock)
        how = f"{job.slices} slices stitched"
        with tempfile.TemporaryDirectory(prefix=f"stitch-{rid[:8]}-") as tmp:
            paths = self._fetch_slices(job, Path(tmp), clock)  # each pass below joins them again, lazily
            if not fits_jpeg(job.output_width, job.output_height):  # the pyramid is the full-resolution download
                self._pyramid_pass(rid, lambda: self._join(job, paths), clock)
                return pyramid_blob_name(rid), how + f" (no JPEG: over {JPEG_MAX_SIDE:,} px a side)"
            self._both_passes(job, paths, clock)
        return name, how

    def _one_slice(self, job: Job, clock: Stopwatch) -> str:
        """One slice: its processor wrote the final JPEG, and the pyramid too (this release)."""
        rid, blobs = job.request_id, self.services.blobs
        found = blobs.exists(IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid))
        clock.lap("pyramid_check")
        if found:
            return "JPEG and Deep Zoom pyramid written by its processor"
        # a processor of an older release, or its pyramid failed: built from the JPEG
        with tempfile.TemporaryDirectory(prefix=f"stitch-{rid[:8]}-") as tmp:
            jpeg = Path(tmp) / "mosaic.jpg"
            blobs.download_to_file(IMAGE_OUTPUT_CONTAINER, output_blob_name(rid), jpeg)
            clock.lap("output_download")
            self._pyramid_pass(rid, lambda: open_jpeg(jpeg), clock)
        return "JPEG written by its processor, pyramid built here from it"

    # --- giant bands: assemble the staged pieces ----------------------------------------------

    def _assemble(self, job: Job, clock: Stopwatch) -> str:
        rid, blobs = job.request_id, self.services.blobs
        manifests = self._manifests(job)
        clock.lap("manifest_download")
        header = full_header(manifests[0].jpeg_header, job.output_height)
        with ThreadPoolExecutor(max_workers=_IO_THREADS, thread_name_prefix="assemble") as pool:
            jpeg_name = output_blob_name(rid)
            head = [f.result() for f in stage_all(blobs, pool, IMAGE_OUTPUT_CONTAINER, jpeg_name, "header", [header])]
            blobs.commit_blocks(
                IMAGE_OUTPUT_CONTAINER,
                jpeg_name,
                head + [b for m in manifests for b in m.jpeg_blocks],
                content_type=OUTPUT_CONTENT_TYPE,
            )
            clock.lap("jpeg_commit")
            files = _top_levels(manifests, job.output_width, job.output_height)
            clock.lap("pyramid_top_levels")
            members, entries = local_entries(files)
            bands = [member for m in manifests for member in m.members]
            tail = entries + central_directory([*bands, *members])
            zip_name = pyramid_blob_name(rid)
            own = [f.result() for f in stage_all(blobs, pool, IMAGE_OUTPUT_CONTAINER, zip_name, "top", [tail])]
            blobs.commit_blocks(
                IMAGE_OUTPUT_CONTAINER,
                zip_name,
                [b for m in manifests for b in m.zip_blocks] + own,
                content_type=PYRAMID_CONTENT_TYPE,
            )
            clock.lap("pyramid_commit")
        return f"{job.slices} bands' JPEG rows and pyramid tiles assembled"

    def _manifests(self, job: Job) -> list[Manifest]:
        rid, blobs = job.request_id, self.services.blobs

        def fetch(seq: int) -> Manifest:
            try:
                pixels, text = decode_png(blobs.download(SLICE_RESPONSE_CONTAINER, pieces_blob_name(rid, seq)))
                manifest = Manifest.parse(text[MANIFEST_KEY], pixels)
            except BlobMissingError:
                raise PermanentJobError(f"the pieces of band {seq + 1} are missing from storage") from None
            except (BandFormatError, KeyError, ValueError, TypeError) as exc:
                raise PermanentJobError(f"the manifest of band {seq + 1} is unreadable: {exc}") from None
            if manifest.index != seq or len(manifest.splits) != job.slices + 1:
                raise PermanentJobError(f"the manifest of band {seq + 1} belongs to another plan")
            return manifest

        with ThreadPoolExecutor(max_workers=min(_IO_THREADS, job.slices)) as pool:
            manifests = list(pool.map(fetch, range(job.slices)))
        if len({m.splits for m in manifests}) != 1:
            raise PermanentJobError("the bands' manifests disagree on the plan")
        return manifests

    # --- ordinary slices: the streaming stitch ------------------------------------------------

    def _pyramid_pass(self, rid: str, open_: Callable[[], Any], clock: Stopwatch | None) -> float:
        """Build the pyramid zip from a fresh pass over ``open_()``, streamed to its blob as it is
        made (``BlobStore.open_writer``: no file), and commit it; the commit's seconds. Laps:
        ``pyramid_build`` (the build and its streamed upload), ``pyramid_upload`` (the commit)."""
        with self.services.blobs.open_writer(
            IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid), content_type=PYRAMID_CONTENT_TYPE
        ) as zipped:
            mosaic = open_()
            try:
                save_pyramid(mosaic, zipped.write)
            finally:
                if isinstance(mosaic, Streamed):
                    mosaic.close()
            if clock is not None:
                clock.lap("pyramid_build")
            started = time.perf_counter()
            zipped.close()
        if clock is not None:
            clock.lap("pyramid_upload")
        return time.perf_counter() - started

    def _jpeg_pass(self, job: Job, paths: list[Path]) -> float:
        """Encode the JPEG from a fresh pass over the slice files, streamed to its blob as it is
        encoded (``BlobStore.open_writer``: no file), and commit it; the encode's seconds (the
        rest, the commit's tail, is the upload's)."""
        with self.services.blobs.open_writer(
            IMAGE_OUTPUT_CONTAINER, output_blob_name(job.request_id), content_type=OUTPUT_CONTENT_TYPE
        ) as jpeg:
            started = time.perf_counter()
            mosaic = self._join(job, paths)
            try:
                save_jpeg(mosaic, jpeg.write)
            finally:
                mosaic.close()
            return time.perf_counter() - started

    def _both_passes(self, job: Job, paths: list[Path], clock: Stopwatch) -> None:
        """The JPEG pass and the pyramid pass at once, each streaming the slice files on its own
        (libvips works outside the GIL; memory stays a few tile rows per pass). The laps are the
        critical path: the JPEG's encode and upload, then what the pyramid took beyond them."""
        rid = job.request_id
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyramid") as pool:
            context = contextvars.copy_context()  # the pyramid's upload stays in the stitch's trace
            pyramid = pool.submit(context.run, self._pyramid_pass, rid, lambda: self._join(job, paths), None)
            try:
                encoded = self._jpeg_pass(job, paths)
                clock.lap_parts({"output_encode": encoded}, rest="output_upload")
            finally:
                pyramid_error = pyramid.exception()  # wait: never leave it reading a deleted folder
            if pyramid_error is not None:
                raise pyramid_error
            clock.lap_parts({"pyramid_upload": pyramid.result()}, rest="pyramid_build")

    def _fetch_slices(self, job: Job, scratch: Path, clock: Stopwatch) -> list[Path]:
        """Every rendered slice streamed to a scratch file (never held in memory)."""
        rid, blobs = job.request_id, self.services.blobs

        def fetch(seq: int) -> Path:
            # .npy first; .png when a processor of the PNG era rendered it (in flight across an upgrade)
            path = scratch / f"slice-{seq}"
            for name in slice_blob_candidates(rid, seq):
                try:
                    blobs.download_to_file(SLICE_RESPONSE_CONTAINER, name, path)
                    return path
                except BlobMissingError:
                    continue
            raise PermanentJobError(f"the rendered slice {seq + 1} is missing from storage")

        with ThreadPoolExecutor(max_workers=min(_IO_THREADS, job.slices)) as pool:
            paths = list(pool.map(fetch, range(job.slices)))
        clock.lap("slice_download")
        return paths

    @staticmethod
    def _join(job: Job, paths: list[Path]) -> Any:
        """The slice files joined lazily into the mosaic, for one top-to-bottom pass (``workers.imaging.stitching``)."""

        def open_(seq: int, path: Path) -> Any:
            try:
                return open_slice(path)
            except RenderedFormatError as exc:
                raise PermanentJobError(f"the rendered slice {seq + 1} is unreadable: {exc}") from None

        opened: list[Streamed] = []
        try:
            opened += (open_(seq, p) for seq, p in enumerate(paths))
            return join_slices(opened, width=job.output_width, height=job.output_height)
        except ValueError as exc:
            for o in opened:
                o.close()
            raise PermanentJobError(f"the rendered slices do not fit together: {exc}") from None
        except PermanentJobError:
            for o in opened:
                o.close()
            raise


def _is_blob(blobs: BlobStore, url: str, container: str, name: str) -> bool:
    try:
        return blobs.parse_blob_url(url) == (blobs.container_name(container), name)
    except ValueError:
        return False


def _top_levels(manifests: list[Manifest], width: int, height: int) -> list[tuple[str, bytes]]:
    """The pyramid levels no band could finish, from the joined reduced rows, and the descriptor."""
    reduced = np.concatenate([m.reduced for m in manifests])
    built = bytearray()
    write_dzi_zip(from_pixels(reduced), built.extend)
    with zipfile.ZipFile(io.BytesIO(bytes(built))) as small:
        # Sorted: libvips writes tiles in the order its threads finish them, and a stitch run
        # again must commit the same bytes.
        files = sorted((info.filename, small.read(info)) for info in small.infolist() if info.filename.endswith(".jpg"))
    return [*files, ("mosaic.dzi", descriptor_xml(width, height))]
