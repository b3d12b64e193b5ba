"""A job renders with the library version it started with, while photos are added and removed."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest

from dal.blobs.tile_maps import TileMap, load_job_map
from dal.config import IMAGE_OUTPUT_CONTAINER, Settings, StorageClients
from mosaic.images import open_image
from mosaic.render import render
from tests.support.indexing import index, photo, upload
from tests.web.conftest import png_bytes
from workers.controller.controller import JobController
from workers.imaging.slicing import encode_output
from workers.processor.processor import ImageProcessor
from workers.runtime.errors import PermanentJobError
from workers.services import RoleServices

pytestmark = pytest.mark.timeout(120)


def _take(queue: Any, request_id: str, count: int) -> list[Any]:
    """``count`` messages of this job from ``queue`` (others are given back)."""
    taken: list[Any] = []
    for _ in range(100):
        for received in queue.accept_messages(32, visibility_timeout=60):
            if received.message.request_id == request_id:
                taken.append(received)
            else:
                queue.release(received)
        if len(taken) >= count:
            return taken
    raise AssertionError(f"{len(taken)} of {count} messages of job {request_id} arrived")


def _handle(queue: Any, handler: Any, request_id: str, count: int) -> None:
    for received in _take(queue, request_id, count):
        handler(received)
        queue.delete(received)


def test_a_job_renders_with_its_version_while_photos_are_added_and_removed(
    client: Any, web_settings: Settings, web_storage: StorageClients
) -> None:
    library = f"ver-{uuid.uuid4().hex[:10]}"
    services = RoleServices(web_storage, web_settings, "versions@test")
    first = {f"p{i}.jpg": photo(i) for i in range(8)}
    upload(client, library, first)
    index(client, services, library)
    before = client.get(f"/api/libraries/{library}/photos").get_json()["version"]

    image = png_bytes(48, 36)
    asked = client.post(
        "/api/jobs",
        data={
            "image": (io.BytesIO(image), "photo.png"),
            "library": library,
            "tile_size": "4",
            "slices": "2",
            "tiles_across": "12",
        },
        content_type="multipart/form-data",
    )
    assert asked.status_code == 202, asked.get_json()
    rid = asked.get_json()["request_id"]
    job = services.jobs.get(client_id := _client_id(client), rid)
    assert job is not None and job.library_version == before
    controller, processor = JobController(services), ImageProcessor(services)
    queues = services.queues
    _handle(queues.image_requests, controller.handle_image_request, rid, 1)

    # Before the slices render: two photos go, two come, and the library publishes a new version.
    removed = ["p0.jpg", "p1.jpg"]
    gone = client.post(f"/api/libraries/{library}/remove-photos", json={"photos": removed}).get_json()
    assert gone["removed"] == removed and gone["not_found"] == []
    upload(client, library, {"q0.jpg": photo(100), "q1.jpg": photo(101)})
    index(client, services, library)
    after = client.get(f"/api/libraries/{library}/photos").get_json()
    assert after["version"] != before and after["counts"]["indexed"] == 8
    assert services.libraries.load(library).names == (*sorted(set(first) - set(removed)), "q0.jpg", "q1.jpg")

    parts = services.jobs.get(client_id, rid).slices  # type: ignore[union-attr]
    _handle(queues.slice_requests, processor.handle_slice_request, rid, parts)
    _handle(queues.slice_response, controller.handle_slice_response, rid, parts)
    job = services.jobs.get(client_id, rid)
    assert job is not None and job.status == "done", job

    pinned = services.libraries.load(library, version=before)
    assert pinned.names == tuple(sorted(first)) and pinned.version == before
    expected = render(
        open_image(image),
        pinned,
        tile_size=4,
        tiles_across=12,
        seed=rid,
        max_output_pixels=web_settings.max_output_pixels,
    )
    assert services.blobs.download(IMAGE_OUTPUT_CONTAINER, job.output_name) == encode_output(expected)
    tile_map = TileMap.decode(load_job_map(services.blobs.download, rid, job.slices))
    used = {name for name, _blob in tile_map.tiles}
    assert used <= set(first) and used & set(removed), used

    # A job whose version was collected fails with the reason, not with a crash or a retry.
    with pytest.raises(PermanentJobError, match="is gone"):
        processor._library(services.libraries.uri(library), "0123456789abcdef0123")


def _client_id(client: Any) -> str:
    with client.session_transaction() as session:
        return str(session["cid"])
