"""Two creates of one library name at once (dal.blobs.libraries: ``claim``): exactly one wins,
the other is 409 having written nothing, and nothing of the winner's is deleted, by the loser's
stale-tile sweep or by a failed creation's cleanup. Real concurrent requests against Azurite."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask import Flask

from dal.blobs.libraries import LibraryStore
from dal.blobs.library_creation import tile_blob_names
from dal.blobs.library_info import INDEX_BLOB, TILE_PREFIX
from dal.config import StorageClients
from dal.errors import LibraryExistsError
from tests.web.conftest import png_bytes
from tests.web.test_api_libraries import new_name, upload_library


def _tiles(tag: str, count: int) -> list[tuple[str, bytes]]:
    return [(f"{tag}{i}.png", png_bytes(64, 64, colour=(30 * i, 120, 200 - 20 * i))) for i in range(count)]


def test_two_concurrent_creates_of_one_name_one_wins_and_keeps_all_its_tiles(
    app: Flask, client: Any, other_client: Any
) -> None:
    svc = app.extensions["photomosaics"]
    svc.ensure_ready()
    store: LibraryStore = svc.libraries
    # Both requests pass the "is the name free?" look-up before either goes on: the real race.
    both_looked = threading.Barrier(2, timeout=30)
    looked_up = store.exists

    def exists(name: str) -> bool:
        free = looked_up(name)
        both_looked.wait()
        return free

    store.exists = exists  # type: ignore[method-assign]
    name = new_name()
    mine, theirs = _tiles("a", 5), _tiles("b", 3)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(upload_library, c, name, files) for c, files in ((client, mine), (other_client, theirs))]
        answers = [f.result(timeout=120) for f in futures]
    store.exists = looked_up  # type: ignore[method-assign]

    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201, 409], [a.get_json() for a in answers]
    loser = next(a for a in answers if a.status_code == 409)
    assert loser.get_json()["error"] == "library_exists"
    winner_files = mine if answers[0].status_code == 201 else theirs
    # Every tile of the winner is there, and only the winner's: nothing deleted, nothing mixed in.
    container = store._service.get_container_client(store.container_name(name))
    blobs = set(container.list_blob_names())
    assert blobs == {INDEX_BLOB, *tile_blob_names(f for f, _ in winner_files)}
    info = store.info(name)
    assert info is not None and info.tile_count == len(winner_files)
    assert all(b.startswith(TILE_PREFIX) or b == INDEX_BLOB for b in blobs)


def test_a_create_that_loses_the_claim_leaves_the_claimants_container(storage: StorageClients, unique: str) -> None:
    store = LibraryStore(storage, prefix=f"r{unique}")
    store.claim("taken")  # a creation under way (decoding, say)
    with pytest.raises(LibraryExistsError):
        store.create_from("taken", "", _tiles("x", 2), new=True)
    with pytest.raises(LibraryExistsError):  # nothing usable either: still refused before any work
        store.create_from("taken", "", [("junk.png", b"not an image")], new=True)
    assert store._service.get_container_client(store.container_name("taken")).exists()
    # A new create that fails (nothing usable) gives its own claim back: the name is free again.
    with pytest.raises(Exception, match="no usable|would hold no"):
        store.create_from("fresh", "", [("junk.png", b"not an image")], new=True)
    assert not store._service.get_container_client(store.container_name("fresh")).exists()
    store.create_from("fresh", "", _tiles("y", 2), new=True)
    assert store.info("fresh") is not None
