"""Job deletion through the ``jobcleanup`` queue (``dal.operations.cleanup``): crash-safe, complete, paged."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from dal.blobs.store import BlobStore
from dal.operations.cleanup import CLEANUP_STEPS, delete_job_everywhere, request_cleanup
from dal.config import (
    IMAGE_INPUT_CONTAINER,
    IMAGE_OUTPUT_CONTAINER,
    SLICE_REQUEST_CONTAINER,
    SLICE_RESPONSE_CONTAINER,
    Settings,
    StorageClients,
)
from dal.jobs.model import Job
from dal.jobs.store import JobStore
from dal.queues.work_queue import QueueAccessor
from workers.listener import QueueListener

CLIENT = "cleanup-test"
NOW = datetime.now(UTC)


class InjectedCrash(Exception):
    """Stands for a worker dying half-way (a fault Azurite cannot produce on demand)."""


@pytest.fixture
def world(storage: StorageClients, unique: str) -> dict[str, Any]:
    prefix = f"k{unique}"
    blobs, jobs = BlobStore(storage, prefix=prefix), JobStore(storage, prefix=prefix)
    blobs.ensure_containers()
    jobs.ensure_tables()
    queues = QueueAccessor(storage, settings=Settings(), prefix=prefix)
    queues.job_cleanup.ensure_exists()
    return {"blobs": blobs, "jobs": jobs, "queues": queues}


def make_job(blobs: BlobStore, jobs: JobStore, *, slices: int = 3, events: int = 3) -> str:
    """A finished job with everything a real one leaves: photo, bands, slices, claim, output, rows."""
    rid = str(uuid.uuid4())
    jobs.create(Job(client_id=CLIENT, request_id=rid, status="done", library="lib", tile_size=8, slices=slices,
                    tiles_across=4, tiles_down=4, output_width=32, output_height=32, input_name=f"{rid}.png",
                    output_name=f"{rid}.jpg", finished_at=datetime.now(UTC)))  # fmt: skip
    blobs.upload(IMAGE_INPUT_CONTAINER, f"{rid}.png", b"photo", content_type="image/png")
    for seq in range(slices):
        blobs.upload(SLICE_REQUEST_CONTAINER, f"{rid}/{seq}.png", b"band", content_type="image/png")
        blobs.upload(SLICE_RESPONSE_CONTAINER, f"{rid}/{seq}.png", b"slice", content_type="image/png")
    blobs.upload(SLICE_RESPONSE_CONTAINER, f"{rid}/stitch.claim", b"{}", content_type="application/json")
    blobs.upload(IMAGE_OUTPUT_CONTAINER, f"{rid}.jpg", b"mosaic", content_type="image/jpeg")
    for i in range(events):
        jobs.add_event(rid, "progress", actor="test", message=f"event {i}")
    return rid


def leftovers(blobs: BlobStore, jobs: JobStore, rid: str) -> list[str]:
    found = [f"{c}/{n}" for c in (IMAGE_INPUT_CONTAINER, SLICE_REQUEST_CONTAINER, SLICE_RESPONSE_CONTAINER,
                                  IMAGE_OUTPUT_CONTAINER) for n in blobs.list_names(c, rid)]  # fmt: skip
    if jobs.get(CLIENT, rid) is not None:
        found.append("job row")
    found += [f"event {e.kind}" for e in jobs.events(rid)]
    return found


@pytest.mark.parametrize("crash_after", CLEANUP_STEPS[:-1])
def test_a_crash_mid_cleanup_leaves_nothing_after_redelivery(world: dict[str, Any], crash_after: str) -> None:
    blobs, jobs, queue = world["blobs"], world["jobs"], world["queues"].job_cleanup
    rid, neighbour = make_job(blobs, jobs), make_job(blobs, jobs)
    request_cleanup(queue, CLIENT, rid)
    deliveries: list[int] = []

    def handler(received: Any) -> None:
        deliveries.append(received.dequeue_count)
        crash = crash_after if received.dequeue_count == 1 else None

        def after(step: str) -> None:
            if step == crash:
                raise InjectedCrash(f"killed after {step}")

        delete_job_everywhere(blobs, jobs, received.message.client_id, received.message.request_id, after_step=after)

    listener = QueueListener(queue, handler, name="cleanup-test", poll_min=0.05, poll_max=0.2, retry_delay=1.0,
                             grace=10.0)  # fmt: skip
    listener.run(max_messages=2)  # the crashed delivery, then its redelivery

    assert deliveries == [1, 2]
    assert leftovers(blobs, jobs, rid) == []
    assert queue.approximate_depth() == 0 and queue.poison.approximate_depth() == 0
    assert len(leftovers(blobs, jobs, neighbour)) > 5  # another job's things are untouched


def test_cleanup_of_a_job_already_gone_is_a_no_op(world: dict[str, Any]) -> None:
    blobs, jobs = world["blobs"], world["jobs"]
    rid = make_job(blobs, jobs)
    first = delete_job_everywhere(blobs, jobs, CLIENT, rid)
    again = delete_job_everywhere(blobs, jobs, CLIENT, rid)
    assert (first.blobs_deleted, first.job_existed) == (9, True)
    assert (again.blobs_deleted, again.job_existed) == (0, False)


def test_5001_events_and_jobs_are_listed_and_deleted_through_continuation_tokens(
    storage: StorageClients, unique: str
) -> None:
    """Table pages hold at most 1,000 entities: 5,001 rows need six pages, every listing follows them."""
    list_calls: list[Any] = []

    def hook(response: Any) -> None:
        headers = {k.lower() for k in response.http_response.headers}
        if response.http_request.method == "GET" and "x-ms-continuation-nextrowkey" in headers:
            list_calls.append(response.http_request.url)

    counted = StorageClients(storage.connection_string, profile="probe", response_hook=hook)
    jobs = JobStore(counted, prefix=f"n{unique}")
    jobs.ensure_tables()
    rid = str(uuid.uuid4())
    jobs.create(Job(client_id=CLIENT, request_id=rid, status="done", library="lib", tile_size=8, slices=1,
                    tiles_across=1, tiles_down=1, output_width=8, output_height=8, input_name=f"{rid}.png"))  # fmt: skip
    table = counted.table_service.get_table_client(jobs.events_table)
    for start in range(0, 5_001, 100):  # entity-group transactions of 100: fast to write
        table.submit_transaction([("create", {"PartitionKey": rid, "RowKey": f"{i:020d}-000000000000", "kind": "x",
                                              "actor": "t", "message": "m", "at": NOW})
                                  for i in range(start, min(start + 100, 5_001))])  # fmt: skip
    list_calls.clear()
    assert len(jobs.events(rid)) == 5_001
    assert len(list_calls) >= 5  # the service handed back continuation tokens and they were followed

    jobs.delete(CLIENT, rid)
    assert jobs.events(rid) == [] and jobs.get(CLIENT, rid) is None
