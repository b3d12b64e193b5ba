"""The Deep Zoom pyramid of a job: built by the controller's stitch (or a one-slice job's
processor), streamed into one zip blob as it is built, read back member by member with range
reads (``dal.blobs.pyramid``), deleted with the job."""

from __future__ import annotations

import io
import math
import re
import threading
import time
import zipfile
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from azure.core.exceptions import HttpResponseError
from PIL import Image

from dal.blobs.names import pyramid_blob_name, slice_output_name
from dal.blobs.pyramid import DZI_NAME, PyramidReader, tile_name
from dal.blobs.rendered import encode_rendered
from dal.config import IMAGE_OUTPUT_CONTAINER, SLICE_RESPONSE_CONTAINER, StorageClients
from dal.operations.cleanup import delete_job_everywhere
from dal.queues.messages import SliceRequestMessage, SliceResponseMessage
from mosaic.grid import Grid
from mosaic.parts import plan_parts
from tests.support.faultproxy import faulty_account
from tests.support.pipelines import CLIENT_ID, Pipeline, sample_photo
from workers.controller.controller import JobController
from workers.imaging.stitching import open_slice, save_pyramid, save_pyramid_pixels
from workers.services import RoleServices


def stitched_job(pipe: Pipeline, *, slices: int, width: int, height: int, tile: int = 4) -> tuple[str, np.ndarray]:
    """A job taken through the real controller, with random pixels standing in for the processors."""
    ctl = JobController(pipe.services)
    rid = pipe.submit(sample_photo(width, height, seed=3), library_uri=pipe.library_uri, tile_size=tile, slices=slices)
    [request] = pipe.services.queues.image_request.accept_messages(1, visibility_timeout=30)
    ctl.handle_image_request(request)
    job = pipe.job(rid)
    assert job is not None
    mosaic = np.random.default_rng(1).integers(0, 256, (job.output_height, job.output_width, 3), dtype=np.uint8)
    grid = Grid(job.tiles_across, job.tiles_down, job.output_width, job.output_height, tile)
    urls = [
        pipe.services.blobs.upload(
            SLICE_RESPONSE_CONTAINER,
            slice_output_name(rid, seq),
            encode_rendered(mosaic[band.start * tile : band.stop * tile]),
            content_type="application/octet-stream",
        )
        for seq, band in enumerate(plan_parts(grid).bands(slices))
    ]
    assert len(urls) == job.slices == slices
    queue = pipe.services.queues.slice_response
    queue.submit(
        [
            SliceResponseMessage(
                queue_uri=queue.url, client_id=CLIENT_ID, request_id=rid, slice_uri=url, slice_sequence=s
            )
            for s, url in enumerate(urls)
        ]
    )
    for _ in range(slices):
        [received] = queue.accept_messages(1, visibility_timeout=30)
        ctl.handle_slice_response(received)
    return rid, mosaic


def test_the_stitch_stores_a_pyramid_with_the_right_levels_and_tiles_for_odd_sizes(pipe: Pipeline) -> None:
    # 524 x 596 px, three plain parts at 4 px tiles (mosaic.parts): nothing divides evenly
    rid, mosaic = stitched_job(pipe, slices=3, width=131, height=149)
    height, width = mosaic.shape[:2]
    job = pipe.job(rid)
    assert job is not None and job.output_name == f"{rid}.jpg"
    data = pipe.services.blobs.download(IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid))
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}
        dzi = archive.read(DZI_NAME).decode()
        assert re.search(r'TileSize="510"', dzi) and re.search(r'Overlap="1"', dzi)
        assert f'Width="{width}"' in dzi and f'Height="{height}"' in dzi
        tiles = [n for n in archive.namelist() if n.endswith(".jpg")]  # (libvips adds vips-properties.xml)
        top = math.ceil(math.log2(max(width, height)))
        assert sorted({int(n.split("/")[1]) for n in tiles}) == list(range(top + 1))
        for level in range(top + 1):
            w, h = math.ceil(width / 2 ** (top - level)), math.ceil(height / 2 ** (top - level))
            count = sum(1 for n in tiles if n.split("/")[1] == str(level))
            assert count == math.ceil(w / 510) * math.ceil(h / 510), (level, w, h)
        # The top level is the mosaic itself: tile (0, 0) covers x and y 0..510+1 (1 px overlap).
        tile = np.asarray(Image.open(io.BytesIO(archive.read(tile_name(top, 0, 0)))).convert("RGB"), dtype=np.int16)
        assert tile.shape == (511, 511, 3)
        # Random pixels through JPEG: close in 8 x 8 means, not equal pixel by pixel.
        blocks = (tile[:504, :504] - mosaic[:504, :504]).reshape(63, 8, 63, 8, 3).mean(axis=(1, 3))
        assert np.abs(blocks).mean() < 4
        last = Image.open(io.BytesIO(archive.read(tile_name(top, 1, 1))))  # x 509..524, y 509..596
        assert last.size == (width - 510 + 1, height - 510 + 1)


def _one_slice_job(pipe: Pipeline, ctl: JobController) -> str:
    rid = pipe.submit(sample_photo(40, 30, seed=4), library_uri=pipe.library_uri, tile_size=8, slices=1)
    [request] = pipe.services.queues.image_request.accept_messages(1, visibility_timeout=30)
    ctl.handle_image_request(request)
    return rid


def _pyramid_size(pipe: Pipeline, rid: str) -> tuple[str, str]:
    dzi = PyramidReader().read(pipe.services.blobs, IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid), DZI_NAME).decode()
    return re.findall(r'Width="(\d+)"', dzi)[0], re.findall(r'Height="(\d+)"', dzi)[0]


def test_a_one_slice_jobs_processor_stores_its_pyramid_beside_its_jpeg_and_the_controller_builds_none(
    pipe: Pipeline,
) -> None:
    from workers.processor.processor import ImageProcessor

    ctl, processor = JobController(pipe.services), ImageProcessor(pipe.services)
    rid = _one_slice_job(pipe, ctl)
    [band] = pipe.services.queues.slice_request_shards[0].accept_messages(1, visibility_timeout=30)
    processor.handle_slice_request(band)
    blobs = pipe.services.blobs
    assert blobs.exists(IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid))  # before any controller saw the response
    stored = blobs.read_range(IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid), 0, 1).etag
    [response] = pipe.services.queues.slice_response.accept_messages(1, visibility_timeout=30)
    ctl.handle_slice_response(response)
    job = pipe.job(rid)
    assert job is not None and job.output_name == f"{rid}.jpg"
    assert _pyramid_size(pipe, rid) == (str(job.output_width), str(job.output_height))
    assert blobs.read_range(IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid), 0, 1).etag == stored  # not rewritten
    events = pipe.services.jobs.events(rid, job=job)  # with the slice_done lines kept in the row
    [stitched] = [e for e in events if e.kind == "stitched"]
    assert "pyramid written by its processor" in stitched.message
    assert stitched.stages is not None and "pyramid_build" not in stitched.stages
    [done] = [e for e in events if e.kind == "slice_done"]
    assert done.stages is not None and "pyramid_build" in done.stages and "Deep Zoom pyramid stored" in done.message


def test_a_one_slice_job_of_an_older_processor_that_wrote_only_the_jpeg_gets_its_pyramid_from_the_controller(
    pipe: Pipeline,
) -> None:
    from dal.blobs.names import output_blob_name
    from workers.imaging.slicing import OUTPUT_CONTENT_TYPE, encode_output

    ctl = JobController(pipe.services)
    rid = _one_slice_job(pipe, ctl)
    job = pipe.job(rid)
    assert job is not None
    [_band] = pipe.services.queues.slice_request_shards[0].accept_messages(1, visibility_timeout=30)
    # What a processor of the previous release does: the JPEG, its response, no pyramid.
    pixels = np.random.default_rng(5).integers(0, 256, (job.output_height, job.output_width, 3), dtype=np.uint8)
    url = pipe.services.blobs.upload(
        IMAGE_OUTPUT_CONTAINER, output_blob_name(rid), encode_output(pixels), content_type=OUTPUT_CONTENT_TYPE
    )
    queue = pipe.services.queues.slice_response
    queue.submit(
        SliceResponseMessage(queue_uri=queue.url, client_id=CLIENT_ID, request_id=rid, slice_uri=url, slice_sequence=0)
    )
    [response] = queue.accept_messages(1, visibility_timeout=30)
    ctl.handle_slice_response(response)
    job = pipe.job(rid)
    assert job is not None and job.output_name == f"{rid}.jpg"
    assert _pyramid_size(pipe, rid) == (str(job.output_width), str(job.output_height))
    [stitched] = [e for e in pipe.services.jobs.events(rid) if e.kind == "stitched"]
    assert "pyramid built here" in stitched.message
    assert stitched.stages is not None and {"output_download", "pyramid_build", "pyramid_upload"} <= set(
        stitched.stages
    )


def test_members_are_read_by_range_from_a_cached_index_and_a_replaced_zip_is_reindexed(
    pipe: Pipeline, tmp_path
) -> None:
    blobs, name = pipe.services.blobs, "00000000-0000-4000-8000-00000000000a.dzi.zip"
    pixels = np.random.default_rng(2).integers(0, 256, (600, 700, 3), dtype=np.uint8)

    def upload(pixels: np.ndarray) -> bytes:
        np.save(tmp_path / "p.npy", pixels)
        opened = open_slice(tmp_path / "p.npy")
        save_pyramid(opened, tmp_path / "mosaic.zip")
        opened.close()
        data = (tmp_path / "mosaic.zip").read_bytes()
        blobs.upload(IMAGE_OUTPUT_CONTAINER, name, data, content_type="application/zip")
        return data

    data = upload(pixels)
    reader = PyramidReader()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for member in archive.namelist():
            assert reader.read(blobs, IMAGE_OUTPUT_CONTAINER, name, member) == archive.read(member), member
    try:
        reader.read(blobs, IMAGE_OUTPUT_CONTAINER, name, tile_name(99, 0, 0))
        raise AssertionError("a missing member must raise KeyError")
    except KeyError:
        pass

    data = upload(pixels[:300])  # the job re-stitched: new blob, new offsets; the cached index is stale
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert reader.read(blobs, IMAGE_OUTPUT_CONTAINER, name, DZI_NAME) == archive.read(DZI_NAME)
        assert b'Height="300"' in archive.read(DZI_NAME)


def test_deleting_a_job_deletes_its_pyramid(pipe: Pipeline) -> None:
    rid, _ = stitched_job(pipe, slices=2, width=12, height=100)  # two plain parts at 4 px tiles
    blobs = pipe.services.blobs
    assert blobs.exists(IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid))
    delete_job_everywhere(blobs, pipe.services.jobs, CLIENT_ID, rid)
    assert not blobs.exists(IMAGE_OUTPUT_CONTAINER, pyramid_blob_name(rid))
    assert not list(blobs.list_names(IMAGE_OUTPUT_CONTAINER, rid))


def _zip_members(data: bytes) -> dict[str, bytes]:
    """The members of a pyramid zip but libvips' properties file (it carries the time it was made)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}
        return {name: archive.read(name) for name in archive.namelist() if not name.endswith("vips-properties.xml")}


def test_a_pyramid_streams_to_its_blob_in_blocks_as_it_is_built_and_reads_like_the_file(
    pipe: Pipeline, tmp_path
) -> None:
    blobs, name = pipe.services.blobs, "00000000-0000-4000-8000-00000000000b.dzi.zip"
    pixels = np.random.default_rng(6).integers(0, 256, (900, 1200, 3), dtype=np.uint8)
    save_pyramid_pixels(pixels, tmp_path / "mosaic.zip")
    writes: list[int] = []
    with blobs.open_writer(
        IMAGE_OUTPUT_CONTAINER, name, content_type="application/zip", block_bytes=64 * 1024
    ) as zipped:

        def write(chunk: bytes) -> None:
            writes.append(zipped.staged_blocks)
            zipped.write(chunk)

        save_pyramid_pixels(pixels, write)
        during = zipped.staged_blocks  # staged while libvips still wrote
    assert during >= 2 and writes[-1] >= 2, (during, writes[-1])  # the upload overlapped the build
    data = blobs.download(IMAGE_OUTPUT_CONTAINER, name)
    members = _zip_members(data)
    assert members == _zip_members((tmp_path / "mosaic.zip").read_bytes())  # the same pyramid, no file made
    assert DZI_NAME in members and all(m == DZI_NAME or m.startswith("mosaic_files/") for m in members)
    reader = PyramidReader()
    top = math.ceil(math.log2(1200))
    assert reader.read(blobs, IMAGE_OUTPUT_CONTAINER, name, tile_name(top, 2, 1)) == members[tile_name(top, 2, 1)]


def test_a_pyramid_whose_upload_fails_stops_its_build_and_stores_nothing(pipe: Pipeline, tmp_path) -> None:
    blobs, name = pipe.services.blobs, "00000000-0000-4000-8000-00000000000c.dzi.zip"
    pixels = np.random.default_rng(8).integers(0, 256, (900, 1200, 3), dtype=np.uint8)
    full: list[int] = []
    save_pyramid_pixels(pixels, lambda chunk: full.append(len(chunk)))  # how many writes a whole build makes
    blobs.upload(IMAGE_OUTPUT_CONTAINER, name, b"old", content_type="application/zip")
    lease = _lease(pipe, name)  # a real fault: Put Block is refused (412) while someone holds the lease
    writes: list[int] = []
    try:
        with (
            pytest.raises(HttpResponseError) as raised,
            blobs.open_writer(
                IMAGE_OUTPUT_CONTAINER, name, content_type="application/zip", block_bytes=32 * 1024
            ) as zipped,
        ):

            def write(chunk: bytes) -> None:
                writes.append(len(chunk))
                time.sleep(0.005)  # the pace of a bigger build: the refused stage is answered meanwhile
                zipped.write(chunk)

            save_pyramid_pixels(pixels, write)
    finally:
        lease.release()
    assert raised.value.status_code == 412  # the storage error itself, not libvips' "write error"
    assert len(writes) < len(full) // 3, f"the build went on: {len(writes)} of {len(full)} writes"
    assert not [t for t in threading.enumerate() if t.name == "blob-writer"]
    assert blobs.download(IMAGE_OUTPUT_CONTAINER, name) == b"old"  # nothing half-written under the name


def _lease(pipe: Pipeline, name: str) -> Any:
    container = pipe.services.blobs.container_name(IMAGE_OUTPUT_CONTAINER)
    return pipe.services.storage.blob_service.get_blob_client(container, name).acquire_lease(lease_duration=-1)


def test_a_one_slice_jobs_processor_whose_pyramid_upload_fails_leaves_it_to_the_controller(pipe: Pipeline) -> None:
    """The processor's storage answers 500 to every write of the pyramid blob (a fault proxy in
    front of Azurite: the outputs are written once, so a blob already there would be kept, not
    refused): the JPEG is stored and answered, the pyramid is left to the controller."""
    from workers.processor.processor import ImageProcessor

    ctl = JobController(pipe.services)
    rid = _one_slice_job(pipe, ctl)
    blobs, name = pipe.services.blobs, pyramid_blob_name(rid)
    with faulty_account(pipe.connection_string, faults={"500": 1.0}, paths=(".dzi.zip",)) as account:
        account.set_active(True)
        faulty = StorageClients(account.connection_string, profile="probe")
        processor = ImageProcessor(RoleServices(faulty, pipe.settings, "proc-1"))
        [band] = processor.services.queues.slice_request_shards[0].accept_messages(1, visibility_timeout=30)
        request = band.message
        assert isinstance(request, SliceRequestMessage)
        seen = replace(request, image_library_uri=account.through(request.image_library_uri))  # its account's URL
        processor.handle_slice_request(replace(band, message=seen))  # the JPEG stored and answered, the pyramid refused
        assert account.counts()["500"] >= 1
    assert not blobs.exists(IMAGE_OUTPUT_CONTAINER, name)
    assert not [t for t in threading.enumerate() if t.name in ("blob-writer", "pyramid_0")]
    [response] = pipe.services.queues.slice_response.accept_messages(1, visibility_timeout=30)
    message = response.message
    assert isinstance(message, SliceResponseMessage)
    ctl.handle_slice_response(
        replace(response, message=replace(message, slice_uri=account.upstream(message.slice_uri)))
    )
    job = pipe.job(rid)
    assert job is not None and job.output_name == f"{rid}.jpg"
    assert _pyramid_size(pipe, rid) == (str(job.output_width), str(job.output_height))
    events = pipe.services.jobs.events(rid, job=job)
    [done] = [e for e in events if e.kind == "slice_done"]
    assert done.message.endswith("its JPEG stored")
    [stitched] = [e for e in events if e.kind == "stitched"]
    assert "pyramid built here" in stitched.message
