"""Upload -> index -> progress: photos written with SAS URLs, IndexRequests handled by the indexer."""

from __future__ import annotations

import io
import uuid
from typing import Any

import numpy as np
from azure.storage.blob import BlobClient
from PIL import Image

from dal.config import Settings, StorageClients
from dal.queues.messages import IndexRequestMessage
from tests.support.indexing import upload
from workers.indexer.indexer import Indexer
from workers.services import RoleServices


def _jpeg(seed: int, size: tuple[int, int] = (640, 480)) -> bytes:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, size=(6, 8, 3)).astype(np.uint8)
    image = Image.fromarray(small).resize(size, Image.Resampling.BICUBIC)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def _drain(services: RoleServices, library_uri: str) -> list[Any]:
    """Every IndexRequest of this library on the queue, handled by the indexer and deleted."""
    indexer = Indexer(services)
    queue = services.queues.index_request
    handled = []
    while True:
        batch = queue.accept_messages(32, visibility_timeout=60)
        mine = [r for r in batch if r.message.library_uri == library_uri]
        for received in batch:
            if received not in mine:
                queue.release(received)
        if not mine:
            return handled
        for received in mine:
            indexer.handle_index_request(received)
            queue.delete(received)
            handled.append(received)


def test_uploaded_photos_are_indexed_once_with_reasons_and_groups(
    client: Any, web_settings: Settings, web_storage: StorageClients
) -> None:
    library = f"ix-{uuid.uuid4().hex[:10]}"
    burst = _jpeg(1)
    noisy = np.clip(
        np.asarray(Image.open(io.BytesIO(burst))).astype(int) + np.random.default_rng(2).integers(-6, 7, (480, 640, 3)),
        0,
        255,
    ).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(noisy).save(out, "JPEG", quality=90)
    files = {
        "a.jpg": burst,
        "a-again.jpg": out.getvalue(),
        "b.jpg": _jpeg(3),
        "notes.txt": b"not a photo, just text\n" * 20,
        "cut.jpg": _jpeg(4)[:3000],
    }
    grant = client.post(
        f"/api/libraries/{library}/uploads",
        json={"files": [{"name": n, "size": len(d)} for n, d in files.items()]},
    ).get_json()
    for item in grant["uploads"]:
        BlobClient.from_blob_url(item["url"]).upload_blob(files[item["name"]])

    before = client.get(f"/api/libraries/{library}/photos").get_json()["progress"]
    assert (before["uploaded"], before["pending"], before["indexed"]) == (5, 5, 0)
    asked = client.post(f"/api/libraries/{library}/index")
    assert asked.status_code == 202 and asked.get_json()["queued"] == 5 and asked.get_json()["requests"] == 1
    services = RoleServices(web_storage, web_settings, "indexer@test")
    uri = services.libraries.uri(library)
    (received,) = _drain(services, uri)
    assert isinstance(received.message, IndexRequestMessage)

    body = client.get(f"/api/libraries/{library}/photos").get_json()
    progress = body["progress"]
    assert progress["indexed"] == 3 and progress["skipped"] == 2 and progress["groups"] == 1
    assert progress["uploaded"] == 5 and progress["pending"] == 0  # the page's "ready"
    assert body["groups"] == [["a-again.jpg", "a.jpg"]]
    states = {p["name"]: (p["state"], p["reason"]) for p in body["photos"]}
    assert states["notes.txt"][0] == "skipped" and "not an image" in states["notes.txt"][1]
    assert states["cut.jpg"][0] == "skipped" and states["b.jpg"] == ("indexed", None)
    version = body["version"]
    tiles = services.libraries.load(library)
    assert sorted(tiles.names) == ["a-again.jpg", "a.jpg", "b.jpg"] and tiles.version == version
    # The composed library carries the group: the engine sees two photos, not three.
    assert [sorted(tiles.names[i] for i in g) for g in tiles.groups] == [["a-again.jpg", "a.jpg"]]
    assert tiles.group_count == 2
    plan = client.get(f"/api/print-plan/every-photo?library={library}&tile_size=8&width=640&height=480").get_json()
    assert plan["photos"] == 2  # read from the manifest's groups, the library not loaded
    listed = client.get(f"/api/libraries/{library}").get_json()
    assert listed["tile_count"] == 3 and listed["version"] == version and listed["samples"]

    # A redelivered batch writes the same blobs and the same version; asking again queues nothing new.
    Indexer(services).handle_index_request(received)
    assert client.get(f"/api/libraries/{library}/photos").get_json()["version"] == version
    again = client.post(f"/api/libraries/{library}/index").get_json()
    assert again["queued"] == 0 and again["requests"] == 0

    # One more photo: only it is indexed, into a new version that still holds the others.
    extra = _jpeg(9)
    (item,) = client.post(
        f"/api/libraries/{library}/uploads", json={"files": [{"name": "c.jpg", "size": len(extra)}]}
    ).get_json()["uploads"]
    BlobClient.from_blob_url(item["url"]).upload_blob(extra)
    assert client.get(f"/api/libraries/{library}/photos").get_json()["progress"]["pending"] == 1
    assert client.post(f"/api/libraries/{library}/index").get_json()["queued"] == 1
    (more,) = _drain(services, uri)
    assert more.message.photos == ("c.jpg",)
    grown = services.libraries.load(library)
    assert len(grown) == 4 and grown.version != version
    page = client.get(f"/api/libraries/{library}/photos?limit=2").get_json()
    assert len(page["photos"]) == 2 and page["continuation"]
    rest = client.get(f"/api/libraries/{library}/photos?limit=10&continuation={page['continuation']}").get_json()
    assert len(rest["photos"]) == 4 and rest["continuation"] is None


def test_index_asks_for_the_photos_named_so_indexing_starts_while_the_rest_upload(
    client: Any, web_settings: Settings, web_storage: StorageClients
) -> None:
    library = f"ix-{uuid.uuid4().hex[:10]}"
    files = {name: _jpeg(seed) for seed, name in enumerate(["a.jpg", "b.jpg", "c.jpg"], start=20)}
    grant = client.post(
        f"/api/libraries/{library}/uploads",
        json={"files": [{"name": n, "size": len(d)} for n, d in files.items()]},
    ).get_json()
    for item in grant["uploads"]:
        BlobClient.from_blob_url(item["url"]).upload_blob(files[item["name"]])

    for bad in ({"photos": "a.jpg"}, {"photos": [1]}, {"photos": [""]}, {"photos": ["a.jpg"] * 501}, ["a.jpg"]):
        answer = client.post(f"/api/libraries/{library}/index", json=bad)
        assert answer.status_code == 400 and answer.get_json()["error"] in ("invalid_field", "invalid_body")
    # Only the photos named and staged: one, in one request; a name never uploaded is passed over.
    named = client.post(f"/api/libraries/{library}/index", json={"photos": ["a.jpg", "never-sent.jpg"]})
    assert named.status_code == 202 and named.get_json() == {
        "library": library,
        "staged": 1,  # of the photos named
        "queued": 1,
        "requests": 1,
    }
    services = RoleServices(web_storage, web_settings, "indexer@test")
    (first,) = _drain(services, services.libraries.uri(library))
    assert first.message.photos == ("a.jpg",)
    # Nothing named: nothing queued. Then no body: every staged photo not indexed yet, the other two.
    counts = client.post(f"/api/libraries/{library}/index", json={"photos": []}).get_json()
    assert (counts["staged"], counts["queued"], counts["requests"]) == (0, 0, 0)
    rest = client.post(f"/api/libraries/{library}/index", json={}).get_json()  # no photos field: as no body
    assert (rest["staged"], rest["queued"]) == (3, 2)  # the library's count
    (second,) = _drain(services, services.libraries.uri(library))
    assert second.message.photos == ("b.jpg", "c.jpg")


def test_a_staged_photo_is_read_in_one_get_that_stops_at_the_limit(
    client: Any, web_settings: Settings, web_storage: StorageClients
) -> None:
    library = f"ix-{uuid.uuid4().hex[:10]}"
    data = _jpeg(30)
    (item,) = client.post(
        f"/api/libraries/{library}/uploads", json={"files": [{"name": "a.jpg", "size": len(data)}]}
    ).get_json()["uploads"]
    BlobClient.from_blob_url(item["url"]).upload_blob(data)
    services = RoleServices(web_storage, web_settings, "indexer@test")
    staging, info = services.staging, services.libraries.info(library)
    assert info is not None
    key = info.key
    whole = staging.read_staged(key, "a.jpg", max_bytes=len(data))
    assert whole is not None and (whole.size, whole.data) == (len(data), data)
    over = staging.read_staged(key, "a.jpg", max_bytes=len(data) - 1)
    assert over is not None and (over.size, over.data) == (len(data), None)  # the size, not the bytes
    assert staging.read_staged(key, "never-sent.jpg") is None


def test_a_photo_whose_decoding_fails_unforeseen_is_skipped_and_the_batch_goes_on(
    client: Any, web_settings: Settings, web_storage: StorageClients, monkeypatch: Any, caplog: Any
) -> None:
    """A fault no real file produces on demand any more (a damaged AVIF once raised libavif's
    RuntimeError through every refusal): injected for one photo of the batch. That photo is
    skipped with what happened and logged as an error; the others are indexed in the same
    delivery, not retried with it and poisoned."""
    from workers.indexer import indexer as indexer_module

    library = f"ix-{uuid.uuid4().hex[:10]}"
    files = {"good-1.jpg": _jpeg(11), "odd.jpg": _jpeg(12), "good-2.jpg": _jpeg(13)}
    odd = files["odd.jpg"]
    real = indexer_module.index_photo

    def failing_on_odd(data: bytes) -> Any:
        if data == odd:
            raise RuntimeError("Failed to decode frame 0: something no refusal names")
        return real(data)

    monkeypatch.setattr(indexer_module, "index_photo", failing_on_odd)
    upload(client, library, files)
    assert client.post(f"/api/libraries/{library}/index").status_code == 202
    services = RoleServices(web_storage, web_settings, "indexer@test")
    (received,) = _drain(services, services.libraries.uri(library))  # handled once, no exception
    assert sorted(received.message.photos) == sorted(files)  # the three in one batch

    body = client.get(f"/api/libraries/{library}/photos").get_json()
    states = {p["name"]: (p["state"], p["reason"]) for p in body["photos"]}
    assert states["good-1.jpg"] == ("indexed", None) and states["good-2.jpg"] == ("indexed", None)
    assert states["odd.jpg"] == (
        "skipped",
        "could not be indexed (RuntimeError: Failed to decode frame 0: something no refusal names)",
    )
    assert body["progress"]["pending"] == 0
    assert any("indexer.photo_failed" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)


def test_an_index_request_naming_another_accounts_address_indexes_nothing_and_says_so(
    client: Any, web_settings: Settings, web_storage: StorageClients, caplog: Any
) -> None:
    """A request queued when the account had another address (say an embedded Azurite that
    came back on other ports) names no library here: it is logged as another account's, not
    taken for a deletion, and the photos stay pending for a request that names this account."""
    import dataclasses

    library = f"ix-{uuid.uuid4().hex[:10]}"
    upload(client, library, {"a.jpg": _jpeg(21)})
    assert client.post(f"/api/libraries/{library}/index").status_code == 202
    services = RoleServices(web_storage, web_settings, "indexer@test")
    uri = services.libraries.uri(library)
    queue = services.queues.index_request
    (received,) = [r for r in queue.accept_messages(32, visibility_timeout=60) if r.message.library_uri == uri]
    elsewhere = uri.replace("127.0.0.1:", "127.0.0.2:", 1)
    assert elsewhere != uri
    moved = dataclasses.replace(received, message=dataclasses.replace(received.message, library_uri=elsewhere))
    Indexer(services).handle_index_request(moved)
    assert client.get(f"/api/libraries/{library}/photos").get_json()["progress"]["pending"] == 1
    assert any(
        "indexer.other_account" in r.getMessage() and elsewhere in r.getMessage() and r.levelname == "WARNING"
        for r in caplog.records
    )
    Indexer(services).handle_index_request(received)  # the same request at this account's address
    queue.delete(received)
    assert client.get(f"/api/libraries/{library}/photos").get_json()["progress"]["indexed"] == 1


def test_a_job_with_a_library_none_of_whose_photos_is_indexed_yet_is_409_not_a_failed_job(
    client: Any, web_settings: Settings, web_storage: StorageClients
) -> None:
    """Photos uploaded, indexing not done: a job would be accepted and then fail in the
    controller ("no tiles"). It is refused at once, saying why, and accepted once indexed."""
    from tests.web.conftest import submit

    library = f"ix-{uuid.uuid4().hex[:10]}"
    upload(client, library, {"a.jpg": _jpeg(31)})
    refused = submit(client, library=library)
    assert refused.status_code == 409 and refused.get_json()["error"] == "library_not_ready", refused.get_json()
    assert "no indexed photos yet" in refused.get_json()["detail"]
    plan = client.post(
        "/api/plan", data={"library": library, "tile_size": "8", "image": (io.BytesIO(_jpeg(32)), "p.jpg")}
    )
    assert (plan.status_code, plan.get_json()["error"]) == (409, "library_not_ready")  # the same answer
    assert client.get("/api/jobs").get_json()["jobs"] == []  # nothing stored

    assert client.post(f"/api/libraries/{library}/index").status_code == 202
    services = RoleServices(web_storage, web_settings, "indexer@test")
    _drain(services, services.libraries.uri(library))
    assert submit(client, library=library).status_code == 202
