"""Tile libraries have an owner (dal.blobs.libraries, webapp.api_libraries): the creating client sees,
uses and deletes its library (DELETE through the jobcleanup queue); other clients see only the
shared ones; listing costs the same storage calls however many libraries there are; internal
container names are reserved; a tile is read only from a marked library the client may see."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from flask import Flask

import dal.config
from dal.blobs.libraries import LibraryStore
from dal.blobs.library_info import validate_library_name
from dal.config import Settings, StorageClients
from dal.errors import InvalidLibraryNameError, LibraryNotFoundError
from dal.observability.transactions import TransactionCounter
from dal.operations.cleanup import delete_library_everywhere
from dal.queues.accessor import QueueAccessor
from dal.queues.messages import LibraryCleanupMessage
from tests.web.conftest import LIBRARY, png_bytes, submit
from tests.web.test_api_libraries import new_name, upload_library

TILES = [(f"c{i}.png", png_bytes(64, 64, colour=(40 * i, 200 - 30 * i, 90))) for i in range(4)]


def _own_library(client: Any) -> str:
    name = new_name()
    created = upload_library(client, name, TILES)
    assert created.status_code == 201, created.get_json()
    return name


def _listed(client: Any) -> dict[str, dict[str, Any]]:
    return {lib["name"]: lib for lib in client.get("/api/libraries").get_json()["libraries"]}


def test_a_library_is_its_creators_and_the_shared_ones_are_everyones(client: Any, other_client: Any) -> None:
    name = _own_library(client)
    mine, theirs = _listed(client), _listed(other_client)
    assert mine[name]["owned"] is True and mine[name]["shared"] is False
    assert mine[name]["samples"], "samples come with the listing (from the library's metadata)"
    assert name not in theirs
    assert theirs[LIBRARY]["shared"] is True and theirs[LIBRARY]["owned"] is False
    tile_url = mine[name]["samples"][0]
    assert client.get(tile_url).headers["Cache-Control"].startswith("private")
    for response in (
        other_client.get(f"/api/libraries/{name}"),
        other_client.get(tile_url),
        other_client.delete(f"/api/libraries/{name}"),
    ):
        assert response.status_code == 404
    refused = submit(other_client, library=name)
    assert refused.status_code == 404 and refused.get_json()["error"] == "library_not_found"
    assert submit(client, library=name).status_code == 202
    shared_tile = _listed(other_client)[LIBRARY]["samples"][0]
    assert other_client.get(shared_tile).headers["Cache-Control"].startswith("public")


def test_only_the_owner_deletes_and_the_deletion_goes_through_the_cleanup_queue(
    app: Flask, client: Any, other_client: Any, web_settings: Settings, web_storage: StorageClients
) -> None:
    name = _own_library(client)
    shared = client.delete(f"/api/libraries/{LIBRARY}")
    assert shared.status_code == 403 and shared.get_json()["error"] == "not_owner"
    queue = QueueAccessor(web_storage, settings=web_settings, prefix=web_settings.name_prefix).job_cleanup
    queue.ensure_exists()
    queue.clear()

    deleted = client.delete(f"/api/libraries/{name}")

    assert deleted.status_code == 204
    assert name not in _listed(client)
    assert client.get(f"/api/libraries/{name}").status_code == 404
    assert client.delete(f"/api/libraries/{name}").status_code == 404
    messages = [m.message for m in queue.accept_messages(max_messages=32, visibility_timeout=5)]
    intents = [m for m in messages if isinstance(m, LibraryCleanupMessage) and m.library == name]
    assert len(intents) == 1
    # The queued copy (what the responder runs later) finds nothing left to delete.
    store = LibraryStore(web_storage, prefix=web_settings.name_prefix)
    assert delete_library_everywhere(store, intents[0].client_id, name) is False


def test_a_redelivered_deletion_spares_a_library_someone_else_made_since(storage: StorageClients, unique: str) -> None:
    store = LibraryStore(storage, prefix=f"o{unique}")
    store.create_from("reused", "by B", TILES, owner="client-b")
    assert delete_library_everywhere(store, "client-a", "reused") is False
    assert store.info("reused") is not None
    assert delete_library_everywhere(store, "client-b", "reused") is True
    assert store.info("reused") is None


def test_listing_costs_the_same_storage_calls_for_one_library_or_many(storage: StorageClients, unique: str) -> None:
    counter = TransactionCounter()
    counted = StorageClients(storage.connection_string, profile="probe", response_hook=counter)
    store = LibraryStore(counted, prefix=f"n{unique}")
    store.create_from("only-one", "", TILES[:2], owner="someone")

    def listing_cost() -> int:
        counter.reset()
        assert store.list()
        return counter.total()

    one = listing_cost()
    for i in range(5):
        store.create_from(f"more-{i}", "", TILES[:2], shared=i % 2 == 0)
    assert listing_cost() == one == 1
    assert {info.name for info in store.list() if info.visible_to("someone")} == {
        "only-one",
        "more-0",
        "more-2",
        "more-4",
    }


def test_the_libraries_endpoint_makes_one_storage_call_however_many_libraries(
    app: Flask, client: Any, web_storage: StorageClients
) -> None:
    counter = TransactionCounter()
    svc = app.extensions["photomosaics"]
    svc.ensure_ready()
    counted = StorageClients(web_storage.connection_string, profile="probe", response_hook=counter)
    svc.libraries._storage = counted  # the app's store, counted (the list reads nothing else)
    _own_library(client)
    counter.reset()
    assert len(_listed(client)) >= 2
    assert counter.counts() == {"blob ListContainers": 1}, counter.counts()


def _internal_containers() -> set[str]:
    from dal.operations import retention

    names = {v for k, v in vars(dal.config).items() if k.endswith("_CONTAINER") and isinstance(v, str)}
    return names | set(dal.config.WORKFLOW_CONTAINERS) | {retention.LOCK_CONTAINER}


@pytest.mark.parametrize("name", sorted(_internal_containers()))
def test_every_internal_container_name_is_reserved(name: str, client: Any) -> None:
    with pytest.raises(InvalidLibraryNameError, match="reserved"):
        validate_library_name(name)
    refused = upload_library(client, name, TILES)
    assert refused.status_code == 400 and "reserved" in refused.get_json()["detail"]


def test_read_tile_reads_only_from_a_marked_library(storage: StorageClients, unique: str) -> None:
    store = LibraryStore(storage, prefix=f"m{unique}")
    container = storage.blob_service.get_container_client(f"m{unique}plainbox")
    container.create_container()
    container.upload_blob("tiles/x.jpg", b"not a library's tile")
    with pytest.raises(LibraryNotFoundError):
        store.read_tile("plainbox", "tiles/x.jpg")
    store.create_from("mine", "", TILES, owner="client-a")
    tile = store.info("mine").samples[0]  # type: ignore[union-attr]
    assert store.read_tile("mine", tile, viewer="client-a")
    with pytest.raises(LibraryNotFoundError):
        store.read_tile("mine", tile, viewer="client-b")
    store.set_shared("mine", True)
    assert store.read_tile("mine", tile, viewer="client-b")
    assert dataclasses.replace(store.info("mine"), shared=False).visible_to("client-b") is False  # type: ignore[type-var]
