"""JobController and responder handlers, called directly on real messages in a real Azurite.

Messages are sent and received through the real queues (``accept_messages``), so each
handler sees exactly what a listener would hand it, redeliveries included.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dal.blobs.names import slice_output_name
from dal.blobs.rendered import encode_rendered
from dal.config import IMAGE_OUTPUT_CONTAINER, SLICE_REQUEST_CONTAINER, SLICE_RESPONSE_CONTAINER
from dal.jobs.model import Job, JobStatus
from dal.queues.consumable import ReceivedMessage
from dal.queues.messages import ImageResponseMessage, SliceResponseMessage
from mosaic.grid import Grid, cell_image, plan_grid
from mosaic.images import open_image
from mosaic.parts import Parts, plan_parts
from tests.support.hostile_images import padded_jpeg
from tests.support.pipelines import CLIENT_ID, Pipeline, sample_photo
from workers.controller.controller import JobController
from workers.failures import poison_hook
from workers.imaging import slicing
from workers.imaging.slicing import decode_band, encode_output, encode_png
from workers.responder.responder import Responder
from workers.runtime.errors import PermanentJobError
from workers.services import RoleServices

pytestmark = pytest.mark.timeout(120)


def controller(pipe: Pipeline, name: str = "ctl-a", **kwargs: float) -> JobController:
    return JobController(RoleServices(pipe.services.storage, pipe.settings, name), **kwargs)


def receive_all(queue, expected: int) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    for _ in range(50):
        got += queue.accept_messages(32, visibility_timeout=30)
        if len(got) >= expected:
            break
    assert len(got) == expected, f"expected {expected} messages in {queue.name}, got {len(got)}"
    return got


def submit_and_slice(pipe: Pipeline, *, slices: int, tile: int = 1):
    """A job of ``slices`` plain bands (``mosaic.parts``: 48 rows a part; at tile size 1 a grid is
    plain up to 533 rows), sent; its ImageRequest received."""
    image = sample_photo(12, 48 * slices + 4, seed=slices)
    rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=tile, slices=slices)
    [request] = receive_all(pipe.services.queues.image_request, 1)
    return rid, image, request


@pytest.mark.parametrize("carried", ["inline", "blob"])
def test_image_request_writes_bands_then_fans_out(
    pipe: Pipeline, carried: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if carried == "blob":  # a band over the inline limit (a big job's) is a blob; these are small
        monkeypatch.setattr(slicing, "INLINE_BAND_MAX_BYTES", 0)
    ctl = controller(pipe)
    rid, image, request = submit_and_slice(pipe, slices=3)
    ctl.handle_image_request(request)

    job = pipe.job(rid)
    assert job is not None and job.status == "rendering"
    grid = plan_grid(12, 148, tile_size=1, max_output_pixels=pipe.settings.max_output_pixels)
    assert (job.tiles_across, job.tiles_down, job.output_width, job.output_height) == (
        grid.tiles_across,
        grid.tiles_down,
        grid.output_width,
        grid.output_height,
    )
    names = sorted(pipe.services.blobs.list_names(SLICE_REQUEST_CONTAINER, f"{rid}/"))
    expected_names = [f"{rid}/{seq}.png" for seq in range(3)]
    assert names == (expected_names if carried == "blob" else [])  # an inline band writes no blob

    requests = sorted(receive_all(pipe.services.queues.slice_request, 3), key=lambda r: r.message.slice_sequence)  # type: ignore[attr-defined]
    assert [r.message.slice_sequence for r in requests] == [0, 1, 2]  # type: ignore[attr-defined]
    # slice_uri names the band's blob address either way (where a blob band is, or would be).
    assert [r.message.slice_uri for r in requests] == [  # type: ignore[attr-defined]
        pipe.services.blobs.blob_url(SLICE_REQUEST_CONTAINER, n) for n in expected_names
    ]
    assert all((r.message.band is None) == (carried == "blob") for r in requests)  # type: ignore[attr-defined]

    # The bands hold exactly the controller's cell image, cut at the planned rows.
    bands = [
        decode_band(
            slicing.band_bytes(
                r.message.band,
                lambda n=n: pipe.services.blobs.download(  # type: ignore[attr-defined]
                    SLICE_REQUEST_CONTAINER, n
                ),
            )
        )
        for r, n in zip(requests, expected_names)
    ]
    rows = plan_parts(grid).bands(3)
    assert [(b.sequence, b.first_row, b.rows) for b in bands] == [(i, r.start, len(r)) for i, r in enumerate(rows)]
    expected = cell_image(open_image(image), grid)
    assert np.array_equal(np.concatenate([b.cells for b in bands]), expected)
    kinds = [e.kind for e in pipe.services.jobs.events(rid)]
    assert kinds.count("dispatched") == 3

    # A redelivery rewrites the same blobs and leaves the job where it was.
    ctl.handle_image_request(request)
    assert sorted(pipe.services.blobs.list_names(SLICE_REQUEST_CONTAINER, f"{rid}/")) == names
    again = pipe.job(rid)
    assert again is not None and again.status == "rendering" and again.slices_done == frozenset()


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("corrupt_image", "could not be read as a picture"),
        ("hostile_image", "structure is not that of a photo"),  # refused unopened (mosaic.image_structure)
        ("missing_library", "does not exist"),
        # queued before the account's address changed (an embedded Azurite on new ports)
        ("library_at_another_address", "is not in this storage account"),
    ],
)
def test_a_job_that_cannot_succeed_fails_with_a_reason(pipe: Pipeline, setup: str, expected: str) -> None:
    ctl = controller(pipe)
    library = pipe.library_uri
    image, slices = sample_photo(48, 40, seed=1), 2
    if setup == "corrupt_image":
        image = image[: len(image) // 3]
    if setup == "hostile_image":
        image = padded_jpeg(512 * 1024)  # an 8 x 8 JPEG padded with 130,000 empty segments
    if setup == "missing_library":
        library = library.rstrip("/") + "-gone"
    if setup == "library_at_another_address":
        library = library.replace("127.0.0.1:", "127.0.0.2:", 1)
        assert library != pipe.library_uri
    rid = pipe.submit(image, library_uri=library, tile_size=8, slices=slices)
    [request] = receive_all(pipe.services.queues.image_request, 1)
    with pytest.raises(PermanentJobError) as caught:
        ctl.handle_image_request(request)
    # What the listener does next: poison the message, then fail its job through the hook.
    poison_hook(pipe.services.jobs, actor="ctl-a", what="slicing the picture")(
        request, caught.value.reason, permanent=True
    )
    job = pipe.job(rid)
    assert job is not None and job.status == "failed"
    assert job.error is not None and expected in job.error
    assert [e.kind for e in pipe.services.jobs.events(rid)] == ["failed"]
    assert pipe.services.queues.slice_request.approximate_depth() == 0


def test_a_job_cancelled_while_it_is_sliced_sends_no_slices_and_keeps_no_bands(
    pipe: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel lands between the bands' upload and the row's "rendering" write (a moment no
    real client can aim at: the write of the bands is wrapped to cancel right after it). The
    controller's write finds the job ended, sends no slice and deletes the bands it wrote."""
    from workers.controller import controller as controller_module

    monkeypatch.setattr(slicing, "INLINE_BAND_MAX_BYTES", 0)  # bands as blobs
    real = controller_module.store_bands

    def then_cancelled(services: RoleServices, rid: str, bands: object) -> object:
        stored = real(services, rid, bands)  # type: ignore[arg-type]
        assert list(pipe.services.blobs.list_names(SLICE_REQUEST_CONTAINER, f"{rid}/"))  # written
        pipe.services.jobs.update(CLIENT_ID, rid, lambda j: replace(j, status="failed", error="cancelled by its owner"))
        return stored

    monkeypatch.setattr(controller_module, "store_bands", then_cancelled)
    rid = pipe.submit(sample_photo(48, 40, seed=3), library_uri=pipe.library_uri, tile_size=8, slices=2)
    [request] = receive_all(pipe.services.queues.image_request, 1)
    pipe.services.jobs.create(Job.for_request(request.message, status=JobStatus.QUEUED, input_name=f"{rid}.png"))  # type: ignore[arg-type]  # as the web app does
    controller(pipe).handle_image_request(request)
    assert pipe.services.queues.slice_request.approximate_depth() == 0
    assert list(pipe.services.blobs.list_names(SLICE_REQUEST_CONTAINER, f"{rid}/")) == []
    job = pipe.job(rid)
    assert job is not None and job.status == "failed" and job.error == "cancelled by its owner"


def render_fake_slices(pipe: Pipeline, rid: str, job_slices: int, width: int, height: int) -> np.ndarray:
    """Stand in for the processors: write distinct bands into sliceresponse; return the whole mosaic.

    Even slices as ``.npy`` (today's processors), odd ones as PNG (a processor of the PNG era
    whose slices were in flight across the upgrade): the stitch must read both.
    """
    rng = np.random.default_rng(5)
    mosaic = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    job = pipe.job(rid)
    assert job is not None
    grid = Grid(job.tiles_across, job.tiles_down, width, height, job.tile_size)
    rows = plan_parts(grid).bands(job_slices)
    assert len(rows) == job_slices
    for seq, band in enumerate(rows):
        pixels = mosaic[band.start * job.tile_size : band.stop * job.tile_size]
        if seq % 2 == 0:
            data, name = encode_rendered(pixels), slice_output_name(rid, seq)
        else:
            data, name = encode_png(pixels), slice_output_name(rid, seq, "png")
        pipe.services.blobs.upload(SLICE_RESPONSE_CONTAINER, name, data, content_type="application/octet-stream")
    return mosaic


def dispatched_with_rendered_slices(pipe: Pipeline, slices: int) -> tuple[JobController, str, np.ndarray]:
    """A job sliced by a controller and its slices rendered (fake): the controller, the job's id
    and the whole mosaic its slices make, ready for slice responses."""
    ctl = controller(pipe)
    rid, _, request = submit_and_slice(pipe, slices=slices)
    ctl.handle_image_request(request)
    job = pipe.job(rid)
    assert job is not None
    return ctl, rid, render_fake_slices(pipe, rid, slices, job.output_width, job.output_height)


def send_responses(pipe: Pipeline, rid: str, sequences: list[int]) -> None:
    queue = pipe.services.queues.slice_response
    url = pipe.services.blobs.blob_url(SLICE_RESPONSE_CONTAINER, f"{rid}/0.png")
    queue.submit(
        [
            SliceResponseMessage(
                queue_uri=queue.url, client_id=CLIENT_ID, request_id=rid, slice_uri=url, slice_sequence=s
            )
            for s in sequences
        ]
    )


def test_slices_are_recorded_idempotently_and_stitched_once(pipe: Pipeline) -> None:
    ctl, rid, mosaic = dispatched_with_rendered_slices(pipe, 3)

    send_responses(pipe, rid, [0, 0, 1])  # a duplicate
    for received in receive_all(pipe.services.queues.slice_response, 3):
        ctl.handle_slice_response(received)
    job = pipe.job(rid)
    assert job is not None and job.slices_done == frozenset({0, 1}) and job.status == "rendering"
    assert pipe.services.queues.image_response.approximate_depth() == 0

    send_responses(pipe, rid, [2])
    [last] = receive_all(pipe.services.queues.slice_response, 1)
    ctl.handle_slice_response(last)
    job = pipe.job(rid)
    # The write that records the outputs marks the job done: no hop to the responder.
    assert job is not None and job.status == "done" and job.output_name == f"{rid}.jpg" and job.finished_at is not None
    assert np.array_equal(pipe.output_pixels(job), decode_png_jpeg(encode_output(mosaic)))
    [response] = receive_all(pipe.services.queues.image_response, 1)

    # Late duplicates change nothing and stitch nothing.
    send_responses(pipe, rid, [1, 2])
    for received in receive_all(pipe.services.queues.slice_response, 2):
        ctl.handle_slice_response(received)
    kinds = [e.kind for e in pipe.services.jobs.events(rid)]
    assert kinds.count("stitched") == 1
    assert pipe.job(rid) == job, "a late duplicate changed the job row"
    assert pipe.services.queues.image_response.accept_messages(32) == []  # no second response

    # The responder finds the job done and changes nothing; the "done" line was written once.
    assert response.message.job_done is True  # type: ignore[attr-defined]  # nothing left to read or write
    responder = Responder(RoleServices(pipe.services.storage, pipe.settings, "resp"))
    responder.handle_image_response(response)
    responder.handle_image_response(response)
    assert pipe.job(rid) == job
    assert [e.kind for e in pipe.services.jobs.events(rid)].count("done") == 1


def _left_stitched(pipe: Pipeline) -> tuple[str, Job]:
    """A job as a stitcher that does not finish it leaves it: output recorded, "stitching" still
    (a controller of an older release)."""
    ctl = controller(pipe)
    rid, _, request = submit_and_slice(pipe, slices=1)
    ctl.handle_image_request(request)
    job = pipe.services.jobs.update(
        CLIENT_ID, rid, lambda j: replace(j, status=JobStatus.STITCHING, output_name=f"{rid}.jpg")
    ).job
    return rid, job


def _image_response(pipe: Pipeline, rid: str) -> ReceivedMessage:
    queue = pipe.services.queues.image_response
    queue.submit(
        ImageResponseMessage(
            queue_uri=queue.url,
            client_id=CLIENT_ID,
            request_id=rid,
            image_uri=pipe.services.blobs.blob_url("imageoutput", f"{rid}.jpg"),
        )
    )
    [response] = receive_all(queue, 1)
    return response


def test_the_responder_finishes_a_job_that_its_stitcher_left_stitched_once(pipe: Pipeline) -> None:
    rid, _ = _left_stitched(pipe)
    response = _image_response(pipe, rid)
    responder = Responder(RoleServices(pipe.services.storage, pipe.settings, "resp"))
    responder.handle_image_response(response)
    responder.handle_image_response(response)
    done = pipe.job(rid)
    assert done is not None and done.status == "done" and done.finished_at is not None
    assert [e.actor for e in pipe.services.jobs.events(rid) if e.kind == "done"] == ["resp"]


def test_the_responder_never_finishes_a_job_whose_row_changed_after_the_stitch(pipe: Pipeline) -> None:
    """The job failed after the stitch: the responder reads the row and leaves a terminal job alone."""
    rid, _ = _left_stitched(pipe)
    response = _image_response(pipe, rid)
    pipe.services.jobs.update(CLIENT_ID, rid, lambda j: replace(j, status="failed", error="cancelled meanwhile"))
    Responder(RoleServices(pipe.services.storage, pipe.settings, "resp")).handle_image_response(response)
    job = pipe.job(rid)
    assert job is not None and job.status == "failed" and job.error == "cancelled meanwhile"
    assert "done" not in [e.kind for e in pipe.services.jobs.events(rid)]


def decode_png_jpeg(data: bytes) -> np.ndarray:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def test_two_controllers_racing_on_every_slice_stitch_exactly_once(pipe: Pipeline) -> None:
    """7 slices, each response delivered twice, handled at once by two controllers."""
    controllers = [controller(pipe, "ctl-a"), controller(pipe, "ctl-b")]
    rid, _, request = submit_and_slice(pipe, slices=7)
    controllers[0].handle_image_request(request)
    job = pipe.job(rid)
    assert job is not None
    render_fake_slices(pipe, rid, 7, job.output_width, job.output_height)
    send_responses(pipe, rid, list(range(7)) * 2)
    received = receive_all(pipe.services.queues.slice_response, 14)
    start = threading.Barrier(14)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        start.wait()
        try:
            controllers[i % 2].handle_slice_response(received[i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(14)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    job = pipe.job(rid)
    assert job is not None and job.slices_done == frozenset(range(7)), "an update was lost"
    assert job.output_name is not None
    kinds = [e.kind for e in pipe.services.jobs.events(rid)]
    assert kinds.count("stitched") == 1
    assert pipe.services.queues.image_response.approximate_depth() == 1


def test_the_stitch_claim_is_the_completing_write_retaken_by_its_own_message_and_when_stale(pipe: Pipeline) -> None:
    """No claim blob: the write that completes the slices names its message as the stitcher."""
    _, rid, _ = dispatched_with_rendered_slices(pipe, 2)
    send_responses(pipe, rid, [0, 1])
    first, last = sorted(receive_all(pipe.services.queues.slice_response, 2), key=lambda r: r.message.slice_sequence)  # type: ignore[attr-defined]
    completed = [False]

    def record_only(job: Job, message: SliceResponseMessage) -> None:  # the stitcher "dies" before stitching
        completed[0] = True

    dead = controller(pipe, "ctl-dead")
    dead._stitch = record_only  # type: ignore[method-assign]
    dead.handle_slice_response(first)
    dead.handle_slice_response(last)
    job = pipe.job(rid)
    assert job is not None and completed[0] and job.status == "stitching" and job.stitcher == last.id
    assert not pipe.services.blobs.exists(SLICE_RESPONSE_CONTAINER, f"{rid}/stitch.claim")
    # Another message (a duplicate response) backs off while the claim is fresh ...
    send_responses(pipe, rid, [1])
    [other] = receive_all(pipe.services.queues.slice_response, 1)
    controller(pipe, "ctl-b").handle_slice_response(other)
    assert (job := pipe.job(rid)) is not None and job.output_name is None and job.stitcher == last.id
    # ... and takes it over once it is stale (a wedged stitcher), with an ETag write.
    impatient = JobController(RoleServices(pipe.services.storage, replace(pipe.settings, stitch_timeout=0.0), "ctl-c"))
    impatient.handle_slice_response(other)
    job = pipe.job(rid)
    assert job is not None and job.stitcher == other.id and job.output_name == f"{rid}.jpg"
    assert [e.kind for e in pipe.services.jobs.events(rid)].count("stitched") == 1


def test_a_controller_that_died_mid_stitch_is_replaced_by_its_redelivered_message(pipe: Pipeline) -> None:
    _, rid, mosaic = dispatched_with_rendered_slices(pipe, 1)
    send_responses(pipe, rid, [0])
    [first] = receive_all(pipe.services.queues.slice_response, 1)
    # Controller A records the slice, which claims the stitch, then "dies" before stitching.
    dead = controller(pipe, "ctl-dead")
    dead._stitch = lambda job, message: None  # type: ignore[method-assign]
    dead.handle_slice_response(first)
    assert (claimed := pipe.job(rid)) is not None and claimed.stitcher == first.id
    # Another delivery of a different message is turned away while the claim is live ...
    send_responses(pipe, rid, [0])
    [other] = receive_all(pipe.services.queues.slice_response, 1)
    controller(pipe, "ctl-b").handle_slice_response(other)
    job = pipe.job(rid)
    assert job is not None and job.output_name is None
    # ... but the dead owner's own message, redelivered, is taken over and stitched.
    pipe.services.queues.slice_response.release(first)
    [again] = receive_all(pipe.services.queues.slice_response, 1)
    assert again.id == first.id and again.dequeue_count == 2
    controller(pipe, "ctl-b").handle_slice_response(again)
    job = pipe.job(rid)
    assert job is not None and job.output_name is not None
    assert np.array_equal(pipe.output_pixels(job), decode_png_jpeg(encode_output(mosaic)))
    assert [e.kind for e in pipe.services.jobs.events(rid)].count("stitched") == 1


def test_slice_response_for_a_failed_job_is_ignored(pipe: Pipeline) -> None:
    ctl = controller(pipe)
    rid, _, request = submit_and_slice(pipe, slices=1)
    ctl.handle_image_request(request)
    pipe.services.jobs.update(CLIENT_ID, rid, lambda j: replace(j, status="failed", error="x"))
    send_responses(pipe, rid, [0])
    [received] = receive_all(pipe.services.queues.slice_response, 1)
    ctl.handle_slice_response(received)
    job = pipe.job(rid)
    assert job is not None and job.status == "failed" and job.slices_done == frozenset()


def test_a_band_carries_its_rows_of_a_fair_use_choice_and_a_damaged_one_is_refused() -> None:
    from workers.imaging.slicing import BandFormatError, cut_bands, encode_band

    cells = np.zeros((5 * 4, 3 * 4, 3), np.uint8)
    choice = np.arange(15, dtype=np.int32).reshape(5, 3)
    bands = cut_bands(cells, tiles_down=5, tiles_across=3, rows=Parts((0, 3, 5)).bands(2), choice=choice)
    read = [decode_band(encode_band(b)) for b in bands]
    assert np.array_equal(np.concatenate([b.choice for b in read]), choice)  # type: ignore[misc]
    assert decode_band(encode_band(replace(bands[0], choice=None))).choice is None
    damaged = encode_png(
        bands[0].cells,
        text={
            "photomosaics:sequence": "0",
            "photomosaics:first_row": "0",
            "photomosaics:rows": "3",
            "photomosaics:tiles_across": "3",
            "photomosaics:tiles_down": "5",
            "photomosaics:choice": "bm90IHpsaWI=",
        },
    )
    with pytest.raises(BandFormatError, match="tile choice is unreadable"):
        decode_band(damaged)


@pytest.mark.parametrize("width", [64, 1024])  # 64 x 64: the compact encoder; 1024 x 512: the fast one
def test_small_and_big_bands_read_back_exactly_with_their_grid_and_choice(width: int) -> None:
    from workers.imaging.slicing import COMPACT_PNG_MAX_PIXELS, Band, encode_band

    height = width // 2 if width > 64 else 64
    assert (height * width > COMPACT_PNG_MAX_PIXELS) == (width > 64)
    rng = np.random.default_rng(width)
    rows, across = height // 4, width // 4
    band = Band(
        sequence=2,
        first_row=7,
        rows=rows,
        tiles_across=across,
        tiles_down=rows + 9,
        cells=rng.integers(0, 256, (height, width, 3), dtype=np.uint8),
        choice=rng.integers(0, 5000, (rows, across), dtype=np.int32),
    )
    encoded = encode_band(band)
    assert encoded.startswith(b"\x89PNG\r\n\x1a\n")
    read = decode_band(encoded)
    assert (read.sequence, read.first_row, read.rows, read.tiles_across, read.tiles_down) == (
        2,
        7,
        rows,
        across,
        rows + 9,
    )
    assert np.array_equal(read.cells, band.cells) and np.array_equal(read.choice, band.choice)  # type: ignore[arg-type]


def test_the_stitchs_jpeg_streams_to_its_blob_byte_for_byte_and_a_failed_write_stops_the_encode(
    pipe: Pipeline, tmp_path: Path
) -> None:
    import pyvips

    from workers.imaging.stitching import save_jpeg

    pixels = np.random.default_rng(12).integers(0, 256, (700, 900, 3), dtype=np.uint8)
    image = pyvips.Image.new_from_array(pixels, interpretation="srgb")
    save_jpeg(image, tmp_path / "mosaic.jpg")
    blobs, name = pipe.services.blobs, "00000000-0000-4000-8000-00000000000d.jpg"
    with blobs.open_writer(IMAGE_OUTPUT_CONTAINER, name, content_type="image/jpeg", block_bytes=64 * 1024) as jpeg:
        save_jpeg(image, jpeg.write)
        staged = jpeg.staged_blocks
    assert staged >= 2  # uploaded in blocks while it was encoded
    assert blobs.download(IMAGE_OUTPUT_CONTAINER, name) == (tmp_path / "mosaic.jpg").read_bytes()

    writes: list[int] = []

    def refuse(chunk: bytes) -> None:
        writes.append(len(chunk))
        if len(writes) == 3:
            raise OSError("the upload failed")

    with pytest.raises(OSError, match="the upload failed"):
        save_jpeg(image, refuse)
    assert len(writes) == 3  # libvips stopped at the failed write


@pytest.mark.parametrize("side", [65_500, 65_501])
def test_fits_jpeg_is_the_encoders_own_limit(side: int) -> None:
    """libjpeg writes at most 65,500 px a side, not the format's 65,535: a mosaic in between was
    judged to fit, and its JPEG encode failed the job on every delivery."""
    from workers.imaging.stitching import encode_jpeg, fits_jpeg

    pixels = np.zeros((side, 1, 3), np.uint8)
    if fits_jpeg(1, side):
        assert encode_jpeg(pixels)[:2] == b"\xff\xd8"
    else:
        with pytest.raises(Exception, match="65500"):
            encode_jpeg(pixels)
    assert fits_jpeg(1, side) == (side <= 65_500)
