"""Fair scheduling between clients (dal.queues.lanes), against the session's Azurite.

Client A sends three jobs, then client B one; the real controller handler dispatches them
in that order, and the processors' consumer (``QueueAccessor.slice_requests``) is asked for
one slice at a time, as a processor does. The property is an order, never a time: with lanes,
B's slices are handed out right after A's first job's, ahead of A's later jobs; with one lane
(first come, first served) they come last.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest

from dal.config import IMAGE_INPUT_CONTAINER
from dal.queues.messages import ImageRequestMessage
from tests.support.pipelines import Pipeline
from tests.support.sliceable import PLAIN_TILE, plain_photo
from tests.web.conftest import submit
from tests.web.test_backpressure import busy  # noqa: F401 - a fixture: the web app alone on its own prefix
from workers.controller.controller import JobController
from workers.services import RoleServices

SLICES = 2


def _send(pipe: Pipeline, services: RoleServices, client: str) -> str:
    request_id = str(uuid.uuid4())
    url = services.blobs.upload(
        IMAGE_INPUT_CONTAINER, f"{request_id}.png", plain_photo(SLICES, seed=3), content_type="image/png"
    )
    queue = services.queues.image_request
    queue.submit(
        ImageRequestMessage(
            queue_uri=queue.url,
            client_id=client,
            request_id=request_id,
            image_uri=url,
            image_library_uri=pipe.library_uri,
            tile_size=PLAIN_TILE,
            slices=SLICES,
        )
    )
    return request_id


@pytest.mark.parametrize("lanes", [2, 1])
def test_a_newcomers_job_is_served_before_another_clients_backlog(pipe: Pipeline, lanes: int) -> None:
    services = RoleServices(pipe.services.storage, replace(pipe.settings, fair_lanes=lanes), "fairness")
    services.queues.ensure_all()
    a_jobs = [_send(pipe, services, "clienta") for _ in range(3)]
    b_job = _send(pipe, services, "clientb")
    controller = JobController(services)
    for _ in range(4):  # the controller takes the requests in the order they were sent
        (received,) = services.queues.image_request.accept_messages(1, visibility_timeout=30)
        controller.handle_image_request(received)
        assert services.queues.image_request.delete(received)

    consumer = services.queues.slice_requests
    order = []
    for _ in range(4 * SLICES):  # what processors are handed, one slice at a time
        (received,) = consumer.accept_messages(1, visibility_timeout=30)
        order.append(received.message.request_id)
        assert consumer.delete(received)
    assert consumer.accept_messages(1) == []

    served = [("B" if rid == b_job else f"A{a_jobs.index(rid) + 1}") for rid in order]
    if lanes == 2:
        # B waits for A's first job only, never for A's backlog.
        assert sorted(served[: 2 * SLICES]) == ["A1"] * SLICES + ["B"] * SLICES, served
        assert sorted(served[2 * SLICES :]) == ["A2"] * SLICES + ["A3"] * SLICES, served
        assert services.queues.slice_lanes[1][0].short_name == "slicerequest-lane1"
    else:
        # One lane: first come, first served, so B's single job is the last one out.
        assert served == ["A1"] * SLICES + ["A2"] * SLICES + ["A3"] * SLICES + ["B"] * SLICES, served


def test_the_web_app_sends_a_clients_later_jobs_to_a_lower_imagerequest_lane(
    busy: dict[str, Any],
) -> None:
    """The controller's side of fairness: it takes imagerequest lanes highest first, so it slices
    B's job right after A's first (A's three jobs are within the default quota of 3)."""
    app = busy["app"]
    client_a, client_b = app.test_client(), app.test_client()
    a_jobs = [submit(client_a).get_json()["request_id"] for _ in range(3)]
    b_job = submit(client_b).get_json()["request_id"]
    queues = busy["queues"]
    assert [q.approximate_depth() for q in queues.image_request_lanes] == [2, 2]  # A1 and B; A2 and A3
    consumer = queues.image_requests
    order = [consumer.accept_messages(1, visibility_timeout=30)[0].message.request_id for _ in range(4)]
    assert order == [a_jobs[0], b_job, a_jobs[1], a_jobs[2]]
