"""Job deletion through the ``jobcleanup`` queue (``dal.operations.cleanup``): crash-safe, complete, paged."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from dal.config import (
    Settings,
    StorageClients,
)
from dal.jobs.model import Job
from dal.jobs.store import JobStore
from dal.operations.cleanup import CLEANUP_STEPS, delete_job_everywhere, request_cleanup
from tests.support.stored_jobs import CLIENT, leftovers, make_job, world  # noqa: F401 (a fixture)
from workers.runtime.listener import QueueListener
from workers.runtime.listener_options import ListenerOptions

FAST = ListenerOptions(poll_min=0.05, poll_max=0.2, retry_delay=1.0, grace=10.0)

NOW = datetime.now(UTC)


class InjectedCrash(Exception):
    """Stands for a worker dying half-way (a fault Azurite cannot produce on demand)."""


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

    listener = QueueListener(queue, handler, name="cleanup-test", options=FAST)
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
    assert (first.blobs_deleted, first.job_existed) == (12, True)  # the tile maps (3 bands and the job's) too
    assert (again.blobs_deleted, again.job_existed) == (0, False)


EVENTS = 1_001  # one more than a page


def test_1001_events_are_listed_and_deleted_through_continuation_tokens(storage: StorageClients, unique: str) -> None:
    """Table pages hold at most 1,000 entities: 1,001 rows need two pages, every listing follows them."""
    list_calls: list[Any] = []

    def hook(response: Any) -> None:
        headers = {k.lower() for k in response.http_response.headers}
        if response.http_request.method == "GET" and "x-ms-continuation-nextrowkey" in headers:
            list_calls.append(response.http_request.url)

    counted = StorageClients(storage.connection_string, profile="probe", response_hook=hook)
    jobs = JobStore(counted, prefix=f"n{unique}")
    jobs.ensure_tables()
    rid = str(uuid.uuid4())
    jobs.create(
        Job(
            client_id=CLIENT,
            request_id=rid,
            status="done",
            library="lib",
            tile_size=8,
            slices=1,
            tiles_across=1,
            tiles_down=1,
            output_width=8,
            output_height=8,
            input_name=f"{rid}.png",
        )
    )
    table = counted.table_service.get_table_client(jobs.events_table)
    for start in range(0, EVENTS, 100):  # entity-group transactions of 100: fast to write
        table.submit_transaction(
            [
                (
                    "create",
                    {
                        "PartitionKey": rid,
                        "RowKey": f"{i:020d}-000000000000",
                        "kind": "x",
                        "actor": "t",
                        "message": "m",
                        "at": NOW,
                    },
                )
                for i in range(start, min(start + 100, EVENTS))
            ]
        )
    list_calls.clear()
    assert len(jobs.events(rid)) == EVENTS
    assert len(list_calls) >= 1  # the service handed back a continuation token and it was followed

    jobs.delete(CLIENT, rid)
    assert jobs.events(rid) == [] and jobs.get(CLIENT, rid) is None


def test_the_cleaner_deletes_jobs_and_libraries_from_the_one_queue(storage: StorageClients, unique: str) -> None:
    """The responder's handler for jobcleanup takes both message types: a job's deletion and a
    library's (its owner's; another owner's library of the same name would be spared)."""
    from io import BytesIO

    from PIL import Image

    from dal.operations.cleanup import request_library_cleanup
    from workers.responder.cleaner import JobCleaner
    from workers.services import RoleServices

    services = RoleServices(storage, Settings(name_prefix=f"c{unique}"), "cleanup-test")
    services.blobs.ensure_containers()
    services.jobs.ensure_tables()
    queue = services.queues.job_cleanup
    queue.ensure_exists()
    tiles = []
    for i in range(3):
        out = BytesIO()
        Image.new("RGB", (40, 40), (60 * i, 90, 200 - 50 * i)).save(out, "PNG")
        tiles.append((f"t{i}.png", out.getvalue()))
    services.libraries.create_from("owned", "", tiles, owner=CLIENT)
    services.libraries.create_from("theirs", "", tiles, owner="someone-else")
    rid = make_job(services.blobs, services.jobs)
    request_cleanup(queue, CLIENT, rid)
    request_library_cleanup(queue, CLIENT, "owned")
    request_library_cleanup(queue, CLIENT, "theirs")  # not CLIENT's: nothing is deleted

    cleaner = JobCleaner(services)
    listener = QueueListener(queue, cleaner.handle_job_cleanup, name="cleanup-test", options=FAST)
    listener.run(max_messages=3)

    assert leftovers(services.blobs, services.jobs, rid) == []
    assert services.libraries.info("owned") is None
    assert services.libraries.info("theirs") is not None
    assert queue.approximate_depth() == 0 and queue.poison.approximate_depth() == 0
