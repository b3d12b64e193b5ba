"""ImageProcessor handler, called directly on real messages in a real Azurite."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from dal.blobs.library_info import INDEX_BLOB
from dal.blobs.names import output_blob_name, pyramid_blob_name, slice_output_name, tile_map_name
from dal.config import IMAGE_OUTPUT_CONTAINER, SLICE_REQUEST_CONTAINER, SLICE_RESPONSE_CONTAINER, StorageClients
from dal.queues.consumable import ReceivedMessage
from mosaic.images import open_image
from mosaic.library import TileLibrary
from mosaic.options import RenderOptions
from mosaic.render import placed_tiles, render, render_with_placement
from tests.support.pipelines import CLIENT_ID, Pipeline, sample_photo
from tests.support.sliceable import PLAIN_TILE, plain_photo
from workers.controller.controller import JobController
from workers.failures import poison_hook
from workers.imaging import slicing
from workers.imaging.slicing import band_bytes, decode_band
from workers.processor.processor import ImageProcessor
from workers.runtime.errors import PermanentJobError
from workers.services import RoleServices

pytestmark = pytest.mark.timeout(120)


def receive_all(queue: Any, expected: int) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    for _ in range(50):
        got += queue.accept_messages(32, visibility_timeout=30)
        if len(got) >= expected:
            break
    assert len(got) == expected, f"expected {expected} messages in {queue.name}, got {len(got)}"
    return got


def dispatch(
    pipe: Pipeline, image: bytes, *, slices: int, tile: int = 8, library: str | None = None
) -> tuple[str, list[ReceivedMessage]]:
    rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=tile, slices=slices)
    [request] = receive_all(pipe.services.queues.image_request, 1)
    JobController(RoleServices(pipe.services.storage, pipe.settings, "ctl")).handle_image_request(request)
    requests = receive_all(pipe.services.queues.slice_request, slices)
    if library is not None:  # point the slice requests elsewhere (a library deleted meanwhile)
        requests = [replace(r, message=replace(r.message, image_library_uri=library)) for r in requests]  # type: ignore[type-var]
    return rid, sorted(requests, key=lambda r: r.message.slice_sequence)  # type: ignore[attr-defined]


def test_slices_render_exactly_the_in_process_mosaic_with_one_index_download(pipe: Pipeline) -> None:
    calls: list[tuple[str, str, int]] = []

    def hook(response: Any) -> None:
        http = response.http_response
        calls.append((http.request.method, http.request.url, http.status_code))

    counted = StorageClients(pipe.connection_string, profile="probe", response_hook=hook)
    # Revalidate on every use here, to see each check (the default trusts a check for 10 s).
    processor = ImageProcessor(RoleServices(counted, replace(pipe.settings, library_revalidate_seconds=0.0), "proc-1"))
    image = plain_photo(3, seed=3)
    rid, requests = dispatch(pipe, image, slices=3, tile=PLAIN_TILE)
    for received in requests + requests[:1]:  # and one redelivery
        processor.handle_slice_request(received)

    job = pipe.job(rid)
    assert job is not None
    expected = render(
        open_image(image),
        pipe.services.libraries.load(pipe.library_uri),
        tile_size=PLAIN_TILE,
        seed=rid,
        max_output_pixels=pipe.settings.max_output_pixels,
    )
    assert np.array_equal(pipe.slice_outputs(job), expected)
    responses = receive_all(pipe.services.queues.slice_response, 4)
    assert sorted(r.message.slice_sequence for r in responses) == [0, 0, 1, 2]  # type: ignore[attr-defined]
    # Each response carries its slice's log line (the controller keeps it in the job row); the
    # processor writes no event row of its own.
    reports = [r.message.report for r in responses]  # type: ignore[attr-defined]
    assert all(r is not None and r["actor"] == "proc-1" and r["stages"].get("render", -1) >= 0 for r in reports), (
        reports
    )
    assert [e.kind for e in pipe.services.jobs.events(rid)].count("slice_done") == 0

    index_reads = [c for c in calls if c[0] == "GET" and c[1].endswith(f"/{INDEX_BLOB}")]
    assert [status for *_, status in index_reads] == [206, 304, 304, 304], (
        "the index is fetched once, then revalidated (304)"
    )
    assert not [c for c in calls if "/tiles/" in c[1]], "no tile is downloaded one by one"
    # First deliveries (dequeue count 1) do not read the job row; only a redelivery pays that.
    job_reads = [c for c in calls if c[0] == "GET" and "jobs" in c[1].split("?")[0].rsplit("/", 1)[-1]]
    assert job_reads == [], job_reads


def test_a_fair_use_job_is_assigned_once_and_its_slices_together_respect_max_uses(pipe: Pipeline) -> None:
    image = plain_photo(3, seed=5)
    rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=3, tiles_across=12, max_uses=40)
    [request] = receive_all(pipe.services.queues.image_request, 1)
    JobController(RoleServices(pipe.services.storage, pipe.settings, "ctl")).handle_image_request(request)
    requests = receive_all(pipe.services.queues.slice_request, 3)
    processor = ImageProcessor(RoleServices(pipe.services.storage, pipe.settings, "proc-1"))
    for received in sorted(requests, key=lambda r: r.message.slice_sequence, reverse=True):  # type: ignore[attr-defined]
        processor.handle_slice_request(received)

    library = pipe.services.libraries.load(pipe.library_uri)
    in_order = sorted(requests, key=lambda r: r.message.slice_sequence)  # type: ignore[attr-defined]
    bands = [decode_band(band_bytes(r.message.band, lambda: b"")) for r in in_order]  # small bands: inline  # type: ignore[attr-defined]
    choice = np.concatenate([b.choice for b in bands])  # type: ignore[misc]
    assert choice.shape == (148, 12)
    assert np.bincount(choice.ravel() % len(library)).max() <= 40  # the bands together, mirror images included
    job = pipe.job(rid)
    assert job is not None
    expected = render(
        open_image(image), library, tile_size=PLAIN_TILE, tiles_across=12, seed=rid, options=RenderOptions(max_uses=40)
    )
    assert np.array_equal(pipe.slice_outputs(job), expected)


def test_a_fair_use_job_that_the_library_cannot_cover_fails_with_the_reason(pipe: Pipeline) -> None:
    rid = pipe.submit(
        sample_photo(48, 36, seed=5), library_uri=pipe.library_uri, tile_size=16, slices=2, tiles_across=12, max_uses=2
    )
    [request] = receive_all(pipe.services.queues.image_request, 1)
    with pytest.raises(
        PermanentJobError, match="108 cells need more than 48 tiles x 2 uses: raise max_uses to at least 3"
    ):
        JobController(RoleServices(pipe.services.storage, pipe.settings, "ctl")).handle_image_request(request)
    assert pipe.services.queues.slice_request.accept_messages(32, visibility_timeout=1) == []
    assert rid


def grouped_copy(pipe: Pipeline) -> tuple[str, TileLibrary]:
    """The pipeline's library with every fourth tile and the next one a group of near-duplicates."""
    plain = pipe.services.libraries.load(pipe.library_uri)
    groups = [[i, i + 1] for i in range(0, len(plain) - 1, 4)]
    library = TileLibrary.from_tiles(plain.atlas, plain.names, groups)
    return pipe.create_library(f"grouped-{uuid.uuid4().hex[:8]}", library), library


def test_a_use_every_photo_job_is_chosen_once_and_its_slices_place_every_group(pipe: Pipeline) -> None:
    uri, library = grouped_copy(pipe)
    assert pipe.services.libraries.load(uri).groups == library.groups  # the groups travel with the library
    image = plain_photo(3, seed=5)
    rid = pipe.submit(image, library_uri=uri, tile_size=PLAIN_TILE, slices=3, tiles_across=12, use_every_photo=True)
    [request] = receive_all(pipe.services.queues.image_request, 1)
    JobController(RoleServices(pipe.services.storage, pipe.settings, "ctl")).handle_image_request(request)
    requests = receive_all(pipe.services.queues.slice_request, 3)
    processor = ImageProcessor(RoleServices(pipe.services.storage, pipe.settings, "proc-1"))
    for received in requests:
        processor.handle_slice_request(received)
    in_order = sorted(requests, key=lambda r: r.message.slice_sequence)  # type: ignore[attr-defined]
    bands = [decode_band(band_bytes(r.message.band, lambda: b"")) for r in in_order]  # type: ignore[attr-defined]
    choice = np.concatenate([b.choice for b in bands])  # type: ignore[misc]
    assert set(library.group_of()[choice.ravel() % len(library)]) == set(range(library.group_count))
    job = pipe.job(rid)
    assert job is not None
    options = RenderOptions(use_every_photo=True)
    expected = render(open_image(image), library, tile_size=PLAIN_TILE, tiles_across=12, seed=rid, options=options)
    assert np.array_equal(pipe.slice_outputs(job), expected)


def test_a_use_every_photo_job_on_too_few_cells_fails_naming_the_tiles_across(pipe: Pipeline) -> None:
    uri, library = grouped_copy(pipe)
    image = sample_photo(48, 36, seed=5)
    pipe.submit(image, library_uri=uri, tile_size=16, slices=1, tiles_across=4, use_every_photo=True)
    [request] = receive_all(pipe.services.queues.image_request, 1)
    with pytest.raises(PermanentJobError, match=f"{library.group_count} photos .* choose at least 8 tiles across"):
        JobController(RoleServices(pipe.services.storage, pipe.settings, "ctl")).handle_image_request(request)
    assert pipe.services.queues.slice_request.accept_messages(32, visibility_timeout=1) == []


@pytest.mark.parametrize("damage", ["missing_library", "undecodable_band", "undecodable_band_blob"])
def test_a_slice_that_cannot_render_fails_its_job_with_a_reason(
    pipe: Pipeline, damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = pipe.library_uri.rstrip("/") + "-gone" if damage == "missing_library" else None
    if damage == "undecodable_band_blob":  # bands over the inline limit are blobs
        monkeypatch.setattr(slicing, "INLINE_BAND_MAX_BYTES", 0)
    rid, requests = dispatch(pipe, plain_photo(2, seed=4), slices=2, tile=PLAIN_TILE, library=library)
    if damage == "undecodable_band":  # a small band travels inline: damage it there
        requests[1] = replace(requests[1], message=replace(requests[1].message, band="iVBORyBicm9rZW4="))  # type: ignore[type-var]
    elif damage == "undecodable_band_blob":
        assert requests[1].message.band is None  # type: ignore[attr-defined]
        pipe.services.blobs.upload(SLICE_REQUEST_CONTAINER, f"{rid}/1.png", b"\x89PNG broken", content_type="image/png")
    processor = ImageProcessor(RoleServices(pipe.services.storage, pipe.settings, "proc-1"))
    with pytest.raises(PermanentJobError) as caught:
        processor.handle_slice_request(requests[1])
    # What the listener does next: poison the message, then fail its job through the hook.
    poison_hook(pipe.services.jobs, actor="proc-1", what="rendering a slice")(
        requests[1], caught.value.reason, permanent=True
    )
    job = pipe.job(rid)
    assert job is not None and job.status == "failed" and job.error
    assert (
        ("library" in job.error)
        if damage == "missing_library"
        else ("slice 2 of the picture cannot be read" in job.error)
    )
    assert not pipe.services.blobs.exists(SLICE_RESPONSE_CONTAINER, f"{rid}/1.png")
    # The job is failed: the other slice, delivered again, is not even rendered. (A first
    # delivery does not read the job row, to save a transaction on every slice of every job:
    # such a slice renders and the controller ignores its response, as for any ended job.)
    processor.handle_slice_request(replace(requests[0], dequeue_count=2))
    assert not pipe.services.blobs.exists(SLICE_RESPONSE_CONTAINER, f"{rid}/0.png")
    assert pipe.services.queues.slice_response.approximate_depth() == 0
    assert CLIENT_ID  # the helper's client id owns the job


def test_a_slice_of_a_cancelled_job_finds_its_band_gone_and_renders_nothing(
    pipe: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel (POST /api/jobs/<id>/cancel) ends the job and deletes its bands. A processor that
    takes one of its slices on a first delivery (no job read there, to save a transaction on
    every slice) finds the band gone, reads the job then, and renders nothing: no output, no
    answer, no poison. A band gone while the job runs is still damage that fails the job."""
    monkeypatch.setattr(slicing, "INLINE_BAND_MAX_BYTES", 0)  # bands as blobs, as a large job's are
    rid, requests = dispatch(pipe, plain_photo(2, seed=7), slices=2, tile=PLAIN_TILE)
    processor = ImageProcessor(RoleServices(pipe.services.storage, pipe.settings, "proc-1"))
    assert pipe.services.blobs.delete(SLICE_REQUEST_CONTAINER, f"{rid}/1.png")
    with pytest.raises(PermanentJobError, match="slice 2 of the picture is missing from storage"):
        processor.handle_slice_request(requests[1])  # the job runs: damage

    pipe.services.jobs.update(CLIENT_ID, rid, lambda j: replace(j, status="failed", error="cancelled by its owner"))
    pipe.services.blobs.delete_prefix(SLICE_REQUEST_CONTAINER, f"{rid}/")
    for request in requests:
        assert request.dequeue_count == 1
        processor.handle_slice_request(request)  # no exception: the listener deletes the message
    assert list(pipe.services.blobs.list_names(SLICE_RESPONSE_CONTAINER, f"{rid}/")) == []
    assert pipe.services.queues.slice_response.approximate_depth() == 0


def test_a_redelivered_slice_that_is_done_already_is_not_rendered_again(pipe: Pipeline) -> None:
    """The copy of a hedged slice that comes back after its lease (``workers.controller.hedging``) while
    another processor finished the slice: the job read a redelivery pays anyway finds the slice in
    ``slices_done``, and nothing is rendered, written or sent."""
    rid, requests = dispatch(pipe, plain_photo(2, seed=6), slices=2, tile=PLAIN_TILE)
    processor = ImageProcessor(RoleServices(pipe.services.storage, pipe.settings, "proc-1"))
    processor.handle_slice_request(requests[0])
    [response] = receive_all(pipe.services.queues.slice_response, 1)
    JobController(RoleServices(pipe.services.storage, pipe.settings, "ctl")).handle_slice_response(response)
    assert pipe.services.queues.slice_response.delete(response)
    job = pipe.job(rid)
    assert job is not None and job.status == "rendering" and job.slices_done == {0}
    rendered = slice_output_name(rid, 0)
    assert pipe.services.blobs.delete(SLICE_RESPONSE_CONTAINER, rendered)  # a render would write it again

    processor.handle_slice_request(replace(requests[0], dequeue_count=2))
    assert not pipe.services.blobs.exists(SLICE_RESPONSE_CONTAINER, rendered)
    assert pipe.services.queues.slice_response.approximate_depth() == 0


def test_a_late_duplicate_of_a_one_slice_job_leaves_its_outputs_alone(pipe: Pipeline) -> None:
    """A one-slice job's JPEG, pyramid and tile map are written once: the slow first holder of a
    hedged slice (a first delivery: no job read) renders again and replaces nothing, so a download
    of the finished mosaic in progress goes on (same ETags)."""
    rid, [request] = dispatch(pipe, sample_photo(48, 36, seed=7), slices=1)
    processor = ImageProcessor(RoleServices(pipe.services.storage, pipe.settings, "proc-1"))
    outputs = [output_blob_name(rid), pyramid_blob_name(rid), tile_map_name(rid)]

    def versions() -> list[str]:
        return [pipe.services.blobs.read_range(IMAGE_OUTPUT_CONTAINER, name, 0, 1).etag for name in outputs]

    processor.handle_slice_request(request)
    first = versions()
    processor.handle_slice_request(request)  # the late duplicate, mid-handler when the job finished
    assert versions() == first
    responses = receive_all(pipe.services.queues.slice_response, 2)
    assert {r.message.slice_uri for r in responses} == {  # type: ignore[attr-defined]
        pipe.services.blobs.blob_url(IMAGE_OUTPUT_CONTAINER, output_blob_name(rid))
    }


_BLAS_PROBE = (
    "from workers.processor.processor import limit_blas_threads\n"
    "from threadpoolctl import threadpool_info\n"
    "print(limit_blas_threads(), sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}))\n"
)


@pytest.mark.parametrize(("chosen", "expected"), [(None, "1 [1]"), ("2", "None [2]")])
def test_a_processor_renders_on_one_blas_thread_unless_the_operator_chose(chosen: str | None, expected: str) -> None:
    """One processor per core: BLAS's own threads would fight the other processors for them."""
    import os
    import subprocess
    import sys

    from workers.processor.processor import BLAS_THREAD_VARIABLES

    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    if chosen:
        env["OPENBLAS_NUM_THREADS"] = chosen
    probe = subprocess.run([sys.executable, "-c", _BLAS_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == expected


def expected_placement(
    image: bytes, library: Any, *, rid: str, options: RenderOptions, tiles_across: int | None = None
) -> tuple[np.ndarray, list[tuple[str, bool]]]:
    """The in-process render's pixels and, per cell in row order, (library tile name, mirrored)."""
    pixels, choice = render_with_placement(
        open_image(image), library, tile_size=PLAIN_TILE, seed=rid, tiles_across=tiles_across, options=options
    )
    which, mirrored = placed_tiles(choice, library)
    return pixels, [(library.names[w], bool(m)) for w, m in zip(which.ravel(), mirrored.ravel(), strict=True)]


def reported(tile_map: Any) -> list[tuple[str, bool]]:
    return [tile_map.at(c, r)[0::2] for r in range(tile_map.rows) for c in range(tile_map.columns)]


@pytest.mark.parametrize("slices", [1, 3])
def test_the_tile_map_reports_the_engines_placement_and_the_correction_travels_to_every_slice(
    pipe: Pipeline, slices: int
) -> None:
    image = plain_photo(slices, seed=9)
    rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=slices, correction=20)
    [request] = receive_all(pipe.services.queues.image_request, 1)
    JobController(RoleServices(pipe.services.storage, pipe.settings, "ctl")).handle_image_request(request)
    requests = receive_all(pipe.services.queues.slice_request, slices)
    assert {r.message.correction for r in requests} == {20}  # type: ignore[attr-defined]
    processor = ImageProcessor(RoleServices(pipe.services.storage, pipe.settings, "proc-1"))
    for received in requests + requests[:1]:  # and one redelivery: the same map, rewritten
        processor.handle_slice_request(received)

    job = pipe.job(rid)
    assert job is not None
    library = pipe.services.libraries.load(pipe.library_uri)
    pixels, cells = expected_placement(image, library, rid=rid, options=RenderOptions(correction=20))
    tile_map = pipe.tile_map(job)
    assert (tile_map.columns, tile_map.rows) == (12, 48 * slices + 4) and reported(tile_map) == cells
    assert tile_map.library_version == library.version  # the job page tells left-out photos from newer ones
    if slices > 1:
        assert np.array_equal(pipe.slice_outputs(job), pixels)
        default, _ = expected_placement(image, library, rid=rid, options=RenderOptions())
        assert not np.array_equal(default, pixels), "the job's correction, not the default, was rendered"
