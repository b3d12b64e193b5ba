"""GET /api/libraries pages (webapp.api_libraries, LibraryStore.list_page): one listing request
of ``limit`` containers per call, a continuation for the next page, and every visible library
exactly once over the pages, with more libraries than a page holds."""

from __future__ import annotations

from typing import Any

from flask import Flask

from dal.blobs.libraries import LibraryStore
from dal.config import StorageClients
from dal.observability.transactions import TransactionCounter
from tests.web.conftest import LIBRARY, png_bytes
from tests.web.test_api_libraries import new_name, upload_library

TILES = [(f"p{i}.png", png_bytes(64, 64, colour=(50 * i, 90, 160))) for i in range(2)]


def _pages(client: Any, limit: int) -> list[dict[str, Any]]:
    pages, url = [], f"/api/libraries?limit={limit}"
    while url:
        answer = client.get(url)
        assert answer.status_code == 200, answer.get_json()
        pages.append(answer.get_json())
        token = pages[-1]["continuation"]
        url = f"/api/libraries?limit={limit}&continuation={token}" if token else ""
        assert len(pages) < 100
    return pages


def test_the_listing_pages_with_one_storage_request_each(
    app: Flask, client: Any, other_client: Any, web_storage: StorageClients
) -> None:
    mine = {new_name() for _ in range(5)}
    theirs = {new_name() for _ in range(2)}
    for name in mine:
        assert upload_library(client, name, TILES).status_code == 201
    for name in theirs:
        assert upload_library(other_client, name, TILES).status_code == 201
    counter = TransactionCounter()
    svc = app.extensions["photomosaics"]
    svc.libraries._storage = StorageClients(web_storage.connection_string, profile="probe", response_hook=counter)

    counter.reset()
    first = client.get("/api/libraries?limit=2").get_json()
    assert counter.counts() == {"blob ListContainers": 1}, counter.counts()
    assert len(first["libraries"]) <= 2 and first["continuation"]

    pages = _pages(client, 2)
    listed = [lib["name"] for page in pages for lib in page["libraries"]]
    assert len(listed) == len(set(listed)), "a library shown twice"
    assert mine | {LIBRARY} <= set(listed) and not theirs & set(listed)
    assert pages[-1]["continuation"] is None and len(pages) >= 4
    # The whole listing in one page when it fits (the default page is 100 containers).
    whole = client.get("/api/libraries?limit=1000").get_json()
    assert whole["continuation"] is None and set(listed) == {lib["name"] for lib in whole["libraries"]}


def test_a_token_the_server_did_not_issue_is_400(client: Any) -> None:
    token = client.get("/api/libraries?limit=1").get_json()["continuation"]
    assert token
    for bad in ("", "abc", token[:-2] + "xx", "Zm9v." + token.split(".")[1]):
        answer = client.get("/api/libraries", query_string={"continuation": bad})
        assert answer.status_code == 400 and answer.get_json()["error"] == "invalid_field", bad
    for limit in ("0", "1001", "x"):
        assert client.get(f"/api/libraries?limit={limit}").status_code == 400


def test_list_page_returns_the_libraries_of_one_page_and_the_marker(storage: StorageClients, unique: str) -> None:
    store = LibraryStore(storage, prefix=f"g{unique}")
    for i in range(3):
        store.create_from(f"lib-{i}", "", TILES, owner="someone")
    store.claim("lib-3")  # a container under way is not a library: it takes room, is not shown
    seen: list[str] = []
    marker = None
    for _ in range(10):
        page, marker = store.list_page(2, marker)
        seen += [info.name for info in page]
        if marker is None:
            break
    assert seen == ["lib-0", "lib-1", "lib-2"]
