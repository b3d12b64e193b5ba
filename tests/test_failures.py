"""A job fails exactly once: through the listener's ``on_poison`` hook, whatever moved its message
to poison (a permanent error, a failure on every delivery, a worker that died on it), with one
``failed`` event in the job's log. Real listener, real queue and tables in Azurite."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from dal.config import StorageClients
from dal.jobs.model import Job, JobStatus
from dal.jobs.store import JobStore
from dal.queues.consumable import ReceivedMessage
from dal.queues.messages import ImageRequestMessage
from dal.queues.work_queue import ImageProcessingQueue
from tests.support.waiting import wait_for
from workers.failures import poison_hook
from workers.runtime.errors import PermanentJobError
from workers.runtime.listener import QueueListener
from workers.runtime.listener_options import ListenerOptions

CLIENT = "failures-client"


@pytest.fixture
def jobs(storage: StorageClients, unique: str) -> JobStore:
    store = JobStore(storage, prefix=f"f{unique}")
    store.ensure_tables()
    return store


@pytest.fixture
def queue_options() -> dict[str, Any]:
    """``queue`` (conftest) is a fresh imagerequest queue: 2 deliveries allowed, 1 s default invisibility."""
    return {"name": "imagerequest", "poison_threshold": 2, "timeout": 1}


def submit_job(queue: ImageProcessingQueue, jobs: JobStore) -> ImageRequestMessage:
    """A queued job row and its request message, as the web app leaves them."""
    message = ImageRequestMessage(
        queue_uri=queue.url,
        client_id=CLIENT,
        request_id=str(uuid.uuid4()),
        image_uri="http://127.0.0.1:10000/devstoreaccount1/imageinput/photo.png",
        image_library_uri="http://127.0.0.1:10000/devstoreaccount1/tiles",
        tile_size=8,
        slices=2,
    )
    jobs.create(Job.for_request(message, status=JobStatus.QUEUED, input_name="photo.png"))
    queue.submit(message)
    return message


def run_listener(queue: ImageProcessingQueue, jobs: JobStore, handler: object) -> QueueListener:
    subject = QueueListener(
        queue,
        handler,
        name="failures",
        options=ListenerOptions(poll_min=0.05, poll_max=0.2, retry_delay=0.0),
        on_poison=poison_hook(jobs, actor="ctl-test", what="slicing the picture"),
    )
    subject.run(burst=True)
    return subject


def failed_events(jobs: JobStore, message: ImageRequestMessage) -> list[str]:
    return [e.message for e in jobs.events(message.request_id) if e.kind == "failed"]


def test_a_permanent_error_fails_the_job_once_with_its_own_reason(queue: ImageProcessingQueue, jobs: JobStore) -> None:
    message = submit_job(queue, jobs)

    def handler(received: ReceivedMessage) -> None:
        raise PermanentJobError("the image could not be read as a picture")

    subject = run_listener(queue, jobs, handler)

    assert subject.stats["poisoned"] == 1
    job = jobs.get(CLIENT, message.request_id)
    assert job is not None and job.status == JobStatus.FAILED
    assert job.error == "the image could not be read as a picture"
    assert failed_events(jobs, message) == ["the image could not be read as a picture"]
    assert [e.reason for e in queue.poison.peek()] == ["the image could not be read as a picture"]


def test_a_message_failing_on_every_delivery_fails_the_job_once(queue: ImageProcessingQueue, jobs: JobStore) -> None:
    message = submit_job(queue, jobs)
    attempts: list[int] = []

    def handler(received: ReceivedMessage) -> None:
        attempts.append(received.dequeue_count)
        raise OSError("disk full")

    subject = run_listener(queue, jobs, handler)

    assert attempts == [1, 2] and subject.stats["poisoned"] == 1
    reason = "slicing the picture could not be completed: failed 2 times"  # the exception is logged, not shown
    job = jobs.get(CLIENT, message.request_id)
    assert job is not None and (job.status, job.error) == (JobStatus.FAILED, reason)
    assert failed_events(jobs, message) == [reason]


def test_a_message_a_worker_died_on_is_poisoned_at_receive_and_fails_the_job_once(
    queue: ImageProcessingQueue, jobs: JobStore
) -> None:
    message = submit_job(queue, jobs)
    for _ in range(2):  # two workers took it and died (no delete): dequeue count 2 = the threshold
        # the first at once, the second once the first taker's 1 s invisibility ends
        assert len(wait_for(lambda: queue.accept_messages(1, visibility_timeout=1), what="the message")) == 1
    wait_for(queue.peek, what="the message visible again")
    handled: list[ReceivedMessage] = []

    subject = run_listener(queue, jobs, handled.append)

    assert handled == [] and subject.stats["handled"] == 0
    [failure] = failed_events(jobs, message)
    assert failure == "slicing the picture could not be completed: dequeue count 3 exceeds the poison threshold 2"
    assert len(queue.poison.peek()) == 1


def test_a_poison_hook_never_fails_a_finished_job_again(queue: ImageProcessingQueue, jobs: JobStore) -> None:
    message = submit_job(queue, jobs)
    [received] = queue.accept_messages(1)
    hook = poison_hook(jobs, actor="ctl-test", what="slicing the picture")
    hook(received, "the library is gone", permanent=True)
    hook(received, "failed 5 times; last error: OSError: disk full")  # a late duplicate's poison
    assert failed_events(jobs, message) == ["the library is gone"]
