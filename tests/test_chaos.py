"""Workers killed at any moment, garbage on every queue, jobs that cannot succeed.

Real role processes against the session Azurite, isolated by name prefix. The visibility
timeout is 6 s here (``TEST_ENV``), so a message held by a SIGKILLed worker is back within
seconds; ``PHOTOMOSAICS_TEST_SLICE_DELAY`` (a test-only knob) makes each slice take long
enough for a kill to land mid-slice.
"""

from __future__ import annotations

import time

import pytest

from dal.config import IMAGE_OUTPUT_CONTAINER, SLICE_RESPONSE_CONTAINER
from tests.support.pipelines import Pipeline, RoleProcess, assert_jobs_pixel_identical, sample_photo
from tests.support.sliceable import PLAIN_TILE, plain_photo, unit_photo
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def mid_message(process: RoleProcess) -> bool:
    """The process started a message it has not finished (from its logfmt lines)."""
    text = process.log_path.read_text(errors="replace")
    return text.count("message.start") > text.count("message.done") + text.count("message.retry")


def test_processors_killed_mid_slice_lose_nothing(pipe: Pipeline) -> None:
    slow = {"PHOTOMOSAICS_TEST_SLICE_DELAY": "0.5"}
    pipe.start("controller")
    pipe.start("responder")
    processors = [pipe.start("processor", env=slow), pipe.start("processor", env=slow)]
    images = {}
    for n in range(10):
        image = plain_photo(3, seed=100 + n)
        images[pipe.submit(image, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=3)] = image

    kills = 0
    deadline = time.monotonic() + 60
    while kills < 4 and time.monotonic() < deadline:
        index = kills % 2
        victim = processors[index]
        if victim.alive() and mid_message(victim):
            victim.kill()
            kills += 1
            processors[index] = pipe.start("processor", env=slow)  # a restarted worker takes its place
            time.sleep(0.7)
        time.sleep(0.05)
    assert kills == 4, f"only {kills} processors were caught mid-slice\n{pipe.logs()}"

    finished = pipe.wait(images, timeout=150)
    assert_jobs_pixel_identical(pipe, finished, images, tile=PLAIN_TILE, slices=3)
    for rid in images:
        assert [e.kind for e in pipe.services.jobs.events(rid)].count("stitched") == 1
    # Done before its ImageResponse is consumed (the controller marks it done): drained a moment later.
    wait_for(lambda: not any(pipe.queue_depths().values()), seconds=20, what="every queue drained", details=pipe.logs)


def test_controller_killed_between_fan_out_and_stitch(pipe: Pipeline) -> None:
    pipe.start("responder")
    pipe.start("processor", env={"PHOTOMOSAICS_TEST_SLICE_DELAY": "1.5"})
    first = pipe.start("controller")
    image = unit_photo(4, seed=7)  # four Deep Zoom units: four bands
    rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=8, slices=4)

    def progress() -> int:
        job = pipe.job(rid)
        return 0 if job is None else len(job.slices_done)

    wait_for(lambda: progress() >= 1, seconds=60, what="the first slice to be recorded", details=pipe.logs)
    first.kill()  # fanned out, one slice in, three to go: no stitch yet
    job = pipe.job(rid)
    assert job is not None and job.output_name is None and len(job.slices_done) < 4
    pipe.start("controller")

    finished = pipe.wait([rid], timeout=90)
    assert_jobs_pixel_identical(pipe, finished, {rid: image}, tile=8, slices=4)
    kinds = [e.kind for e in pipe.services.jobs.events(rid)]
    assert kinds.count("stitched") == 1 and kinds.count("dispatched") == 4
    assert pipe.queue_depths()[pipe.services.queues.slice_response.poison.name] == 0


def test_garbage_on_every_queue_goes_to_poison_and_jobs_keep_flowing(pipe: Pipeline) -> None:
    from azure.storage.queue import TextBase64EncodePolicy

    queues = pipe.services.queues.workflow()
    for queue in queues:
        plain = pipe.services.storage.queue_service.get_queue_client(queue.name)
        plain.send_message("this is not base64 %%%")  # undecodable on the wire
        encoded = pipe.services.storage.queue_service.get_queue_client(
            queue.name, message_encode_policy=TextBase64EncodePolicy()
        )
        encoded.send_message('{"type": "ImageRequest", "version": 1, "oops": true}')  # not a valid message
    pipe.start("controller")
    pipe.start("processor")
    pipe.start("responder")
    image = plain_photo(2, seed=8)
    rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=2)

    finished = pipe.wait([rid], timeout=60)
    assert_jobs_pixel_identical(pipe, finished, {rid: image}, tile=PLAIN_TILE, slices=2)
    for queue in queues:
        wait_for(
            lambda q=queue: q.poison.approximate_depth() >= 2,
            seconds=20,
            what=f"{queue.poison.name}",
            details=pipe.logs,
        )
        entries = queue.poison.peek()
        assert len(entries) == 2, entries
        assert all(e.reason and e.queue == queue.name for e in entries)
        assert {e.payload_encoding for e in entries} == {"wire", "text"}
        # The job is done before its ImageResponse is consumed (the controller marks it done):
        # the last work queue drains a moment later.
        wait_for(
            lambda q=queue: q.approximate_depth() == 0, seconds=20, what=f"{queue.name} drained", details=pipe.logs
        )


def test_jobs_that_cannot_succeed_end_failed_with_their_reason(pipe: Pipeline) -> None:
    for role in ("controller", "processor", "responder"):
        pipe.start(role)
    good = sample_photo(40, 30, seed=9)
    corrupt = pipe.submit(good[:200], library_uri=pipe.library_uri, tile_size=8, slices=2)
    no_library = pipe.submit(good, library_uri=pipe.library_uri + "-gone", tile_size=8, slices=2)

    finished = pipe.wait([corrupt, no_library], timeout=60)
    expected = {corrupt: "could not be read as a picture", no_library: "does not exist"}
    for rid, text in expected.items():
        job = finished[rid]
        assert job.status == "failed" and job.error is not None and text in job.error, (job.status, job.error)
        assert [e.kind for e in pipe.services.jobs.events(rid)] == ["failed"]
    poisoned = pipe.services.queues.image_request.poison.peek()
    assert sorted(e.reason for e in poisoned) == sorted(finished[rid].error for rid in expected)


def test_a_slice_that_keeps_failing_fails_its_job_after_the_poison_threshold(pipe: Pipeline) -> None:
    env = {"PHOTOMOSAICS_POISON_THRESHOLD": "2"}
    roles = [pipe.start("controller", env=env), pipe.start("processor", env=env)]
    # Every role creates missing containers at start-up: let both finish that first.
    wait_for(
        lambda: all("role.start" in r.log_path.read_text(errors="replace") for r in roles),
        seconds=30,
        what="the roles to start",
        details=pipe.logs,
    )
    # Every render now fails to store its result: a transient-looking error that never heals.
    # (A one-slice job's processor writes the final output itself, so both containers go.)
    for container in (SLICE_RESPONSE_CONTAINER, IMAGE_OUTPUT_CONTAINER):
        pipe.services.storage.blob_service.delete_container(pipe.services.blobs.container_name(container))
    rid = pipe.submit(sample_photo(40, 30, seed=10), library_uri=pipe.library_uri, tile_size=8, slices=1)

    job = pipe.wait([rid], timeout=60)[rid]
    assert job.status == "failed" and job.error is not None
    assert "rendering a slice could not be completed" in job.error and "2 times" in job.error, job.error
    [entry] = pipe.services.queues.slice_request.poison.peek()
    assert entry.dequeue_count == 2
