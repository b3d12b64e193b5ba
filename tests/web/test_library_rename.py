"""Renaming a library: the name is a record pointing at a container that never moves."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest

from dal.blobs.library_names import ALIAS_KEY
from dal.config import Settings, StorageClients
from tests.support.indexing import index, photo, upload
from tests.web.conftest import LIBRARY, png_bytes
from tests.web.test_library_versions import _client_id, _handle
from workers.controller.controller import JobController
from workers.processor.processor import ImageProcessor
from workers.services import RoleServices

pytestmark = pytest.mark.timeout(120)


def _names(client: Any) -> set[str]:
    return {lib["name"] for lib in client.get("/api/libraries?limit=1000").get_json()["libraries"]}


def test_a_renamed_library_keeps_its_jobs_photos_and_old_links(
    client: Any, other_client: Any, web_settings: Settings, web_storage: StorageClients
) -> None:
    old, new = f"old-{uuid.uuid4().hex[:10]}", f"new-{uuid.uuid4().hex[:10]}"
    services = RoleServices(web_storage, web_settings, "rename@test")
    upload(client, old, {"a.jpg": photo(1), "b.jpg": photo(2)})
    index(client, services, old)
    asked = client.post(
        "/api/jobs",
        data={"image": (io.BytesIO(png_bytes(32, 24)), "p.png"), "library": old, "tile_size": "4", "slices": "1"},
        content_type="multipart/form-data",
    )
    assert asked.status_code == 202, asked.get_json()
    rid = asked.get_json()["request_id"]

    renamed = client.patch(f"/api/libraries/{old}", json={"name": new})
    assert renamed.status_code == 200 and renamed.get_json()["name"] == new, renamed.get_json()
    assert new in _names(client) and old not in _names(client)
    assert client.get(f"/api/libraries/{old}").get_json()["name"] == new  # the old name's links still work
    assert services.libraries.uri(old) == services.libraries.info(new).uri  # type: ignore[union-attr]

    # The job made before the rename renders (its messages carry the container's URL).
    controller, processor = JobController(services), ImageProcessor(services)
    _handle(services.queues.image_requests, controller.handle_image_request, rid, 1)
    _handle(services.queues.slice_requests, processor.handle_slice_request, rid, 1)
    _handle(services.queues.slice_response, controller.handle_slice_response, rid, 1)
    assert services.jobs.get(_client_id(client), rid).status == "done"  # type: ignore[union-attr]

    # Photos are added and removed under the new name; jobs take it too.
    upload(client, new, {"c.jpg": photo(3)})
    index(client, services, new)
    assert client.delete(f"/api/libraries/{new}/photos/a.jpg").status_code == 204
    page = client.get(f"/api/libraries/{new}/photos").get_json()
    assert page["library"] == new and [p["name"] for p in page["photos"]] == ["b.jpg", "c.jpg"]
    tile = page["photos"][0]["tile_url"]
    assert client.get(tile).status_code == 200 and other_client.get(tile).status_code == 404
    job = client.post(
        "/api/jobs",
        data={"image": (io.BytesIO(png_bytes(32, 24)), "p.png"), "library": new, "tile_size": "4", "slices": "1"},
        content_type="multipart/form-data",
    )
    assert job.status_code == 202

    # Names are one namespace: neither name can be taken by anyone else.
    for taken in (old, new):
        grant = other_client.post(f"/api/libraries/{taken}/uploads", json={"files": [{"name": "x.jpg", "size": 9}]})
        assert grant.status_code == 404, grant.get_json()
        made = other_client.post("/api/libraries", data={"name": taken, "files": [(io.BytesIO(png_bytes()), "a.png")]})
        assert made.status_code == 409, made.get_json()

    # Renamed again, the previous name is free; back to the first name, no alias is left.
    newer = f"newer-{uuid.uuid4().hex[:8]}"
    assert client.patch(f"/api/libraries/{new}", json={"name": newer}).get_json()["name"] == newer
    assert client.get(f"/api/libraries/{new}").status_code == 404
    assert client.patch(f"/api/libraries/{newer}", json={"name": old}).get_json()["name"] == old
    assert client.get(f"/api/libraries/{newer}").status_code == 404 and old in _names(client)
    assert client.delete(f"/api/libraries/{old}").status_code == 204


def test_rename_errors_and_an_interrupted_rename_converges(
    client: Any, other_client: Any, web_settings: Settings, web_storage: StorageClients
) -> None:
    name, target = f"ren-{uuid.uuid4().hex[:10]}", f"to-{uuid.uuid4().hex[:10]}"
    services = RoleServices(web_storage, web_settings, "rename@test")
    upload(client, name, {"a.jpg": photo(1)})
    errors = [
        (client.patch(f"/api/libraries/{name}", json={}), 400, "missing_field"),
        (client.patch(f"/api/libraries/{name}", json={"name": "Bad Name"}), 400, "invalid_field"),
        (client.patch(f"/api/libraries/{name}", json={"name": LIBRARY}), 409, "library_exists"),
        (other_client.patch(f"/api/libraries/{name}", json={"name": target}), 404, "library_not_found"),
        (client.patch(f"/api/libraries/{LIBRARY}", json={"name": target}), 403, "not_owner"),
    ]
    for response, status, error in errors:
        assert (response.status_code, response.get_json()["error"]) == (status, error), response.get_json()

    # A rename that stopped after claiming the new name: the alias points here, the library does
    # not carry the name yet, so the name resolves to nothing; asking again finishes it.
    libraries = services.libraries
    libraries.claim(target)
    libraries.container_client(target).set_container_metadata({ALIAS_KEY: libraries.container_name(name)})
    assert client.get(f"/api/libraries/{target}").status_code == 404
    assert client.patch(f"/api/libraries/{name}", json={"name": target}).status_code == 200
    assert client.get(f"/api/libraries/{target}").get_json()["name"] == target
    assert client.patch(f"/api/libraries/{target}", json={"name": target}).status_code == 200  # the same name: as is
    assert client.delete(f"/api/libraries/{target}").status_code == 204
    assert not libraries.container_client(target).exists() and not libraries.container_client(name).exists()
