"""``GET /api/jobs/<id>/photos``: the library's photos with thumbnails, use counts and why a
photo was left out, against real Azurite (an operator's library and an indexed uploads library)."""

from __future__ import annotations

import io
import uuid
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from azure.storage.blob import BlobClient
from PIL import Image

import webapp.api_job_photos
import webapp.job_photos
from dal.blobs.libraries import LibraryStore
from dal.blobs.library_creation import tile_blob_names
from dal.blobs.names import tile_map_name
from dal.blobs.store import BlobStore
from dal.blobs.tile_maps import TileMap
from dal.config import IMAGE_OUTPUT_CONTAINER, Settings, StorageClients
from dal.jobs.model import JobStatus
from dal.jobs.store import JobStore
from tests.web.conftest import LIBRARY, png_bytes, submit
from tests.web.test_library_indexing import _drain, _jpeg
from workers.services import RoleServices


def finish_with_map(
    client: Any, storage: StorageClients, settings: Settings, library: str, used: list[int], *, tiles_across: int = 16
) -> dict[str, Any]:
    """A job on ``library`` marked done, its whole tile map stored as a processor would (blobs
    from ``tile_blob_names``, the library's version kept), placing only the photos ``used``
    (indexes into the library's names), the first of them most often."""
    request_id = submit(client, library=library, image=png_bytes(64, 48), slices="1", tiles_across=str(tiles_across))
    request_id = request_id.json["request_id"]
    with client.session_transaction() as session:
        owner = str(session["cid"])
    job = (
        JobStore(storage, prefix=settings.name_prefix)
        .update(owner, request_id, lambda j: replace(j, status=JobStatus.DONE, output_name=f"{request_id}.jpg"))
        .job
    )
    tiles = LibraryStore(storage, prefix=settings.name_prefix).load(library)
    rng = np.random.default_rng(5)
    choice = np.array(used)[rng.integers(0, len(used), (job.tiles_down, job.tiles_across))]
    choice[: job.tiles_down // 2] = used[0]
    choice[0, 0] += len(tiles)  # one mirrored
    tile_map = TileMap.from_choice(
        choice,
        names=tiles.names,
        blobs=tile_blob_names(tiles.names),
        library=library,
        library_version=tiles.version,
    )
    BlobStore(storage, prefix=settings.name_prefix).upload(
        IMAGE_OUTPUT_CONTAINER, tile_map_name(request_id), tile_map.encode(), content_type="application/gzip"
    )
    uses = np.bincount((choice % len(tiles)).ravel(), minlength=len(tiles))
    return {"id": request_id, "base": f"/api/jobs/{request_id}/photos", "names": list(tiles.names), "uses": uses}


def test_every_photo_with_its_uses_sorted_searched_and_paged(
    client: Any, web_storage: StorageClients, web_settings: Settings
) -> None:
    job = finish_with_map(client, web_storage, web_settings, LIBRARY, used=[3, 0, 7, 11, 12])
    names, uses = job["names"], job["uses"]
    body = client.get(job["base"], query_string={"limit": 200}).json
    assert (body["library"], body["photos_total"], body["used"], body["left_out"]) == (LIBRARY, 18, 5, 13)
    assert body["library_changed"] is False and body["library_version"] == body["current_version"]
    assert body["cells"] == int(uses.sum()) and body["next_offset"] is None
    assert [p["name"] for p in body["photos"]] == sorted(names)
    for photo in body["photos"]:
        assert photo["uses"] == uses[names.index(photo["name"])]
        assert (photo["reason"] is None) == (photo["uses"] > 0)
    thumb = client.get(body["photos"][0]["thumbnail_url"])
    assert thumb.status_code == 200 and thumb.mimetype == "image/jpeg"

    most = client.get(job["base"], query_string={"sort": "most_used", "limit": 3}).json
    assert [p["name"] for p in most["photos"]] == [names[i] for i in np.argsort(-uses, kind="stable")[:3]]
    assert most["photos"][0]["name"] == names[3] and most["next_offset"] == 3 and most["count"] == 18
    fewest = client.get(job["base"], query_string={"sort": "least_used", "show": "used"}).json
    assert [p["uses"] for p in fewest["photos"]] == sorted(int(u) for u in uses if u)

    left = client.get(job["base"], query_string={"show": "left_out", "limit": 10}).json
    assert left["count"] == 13 and len(left["photos"]) == 10 and left["next_offset"] == 10
    rest = client.get(job["base"], query_string={"show": "left_out", "offset": 10}).json
    left_out = left["photos"] + rest["photos"]
    assert {p["name"] for p in left_out} == {n for n, u in zip(names, uses, strict=True) if not u}
    # 192 cells for 18 photos: colour is the reason
    assert {p["reason"] for p in left_out} == {"not in any cell: other photos matched the colours better"}

    found = client.get(job["base"], query_string={"search": " C0 "}).json  # trimmed, any case
    assert found["search"] == "C0" and [p["name"] for p in found["photos"]] == sorted(n for n in names if "c0" in n)


BAD_QUERIES = [
    "bogus=1",
    "sort=name&sort=most_used",
    "sort=random",
    "show=everything",
    "limit=0",
    "limit=201",
    "offset=-1",
    "offset=ten",
    "search=" + "x" * 513,
]


def test_bad_parameters_are_400(client: Any, web_storage: StorageClients, web_settings: Settings) -> None:
    job = finish_with_map(client, web_storage, web_settings, LIBRARY, used=[0, 1])
    for query in BAD_QUERIES:
        answer = client.get(f"{job['base']}?{query}")
        assert answer.status_code == 400 and answer.json["error"] in ("invalid_field", "repeated_field"), query


def test_owner_only_and_only_once_finished(
    client: Any, other_client: Any, web_storage: StorageClients, web_settings: Settings
) -> None:
    job = finish_with_map(client, web_storage, web_settings, LIBRARY, used=[0])
    assert other_client.get(job["base"]).status_code == 404
    assert client.get("/api/jobs/not-a-job/photos").status_code == 404
    waiting = submit(client, slices="1").json["request_id"]
    assert client.get(f"/api/jobs/{waiting}/photos").json["error"] == "not_ready"


def test_an_uploads_library_says_why_each_photo_is_out_and_pages_from_memory(
    client: Any, web_storage: StorageClients, web_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Indexed for real: a near-duplicate pair, a third photo and two the indexer skipped. The
    mosaic uses one photo of the pair: the other names it, the third is out for its colours, the
    skipped ones say why; a library grown since says that it changed."""
    library = f"jp-{uuid.uuid4().hex[:10]}"
    burst = _jpeg(1)
    brighter = np.asarray(Image.open(io.BytesIO(burst))).astype(int) + 3
    again = io.BytesIO()
    Image.fromarray(brighter.clip(0, 255).astype(np.uint8)).save(again, "JPEG", quality=90)
    files = {"a.jpg": burst, "a-again.jpg": again.getvalue(), "b.jpg": _jpeg(3), "notes.txt": b"just text\n" * 20}
    upload(client, library, files)
    services = RoleServices(web_storage, web_settings, "indexer@test")
    uri = services.libraries.uri(library)
    _drain(services, uri)
    names = ["a-again.jpg", "a.jpg", "b.jpg"]
    job = finish_with_map(client, web_storage, web_settings, library, used=[names.index("a-again.jpg")], tiles_across=4)
    tables = webapp.job_photos.TABLES
    made = tables.made
    body = client.get(job["base"]).json
    reasons = {p["name"]: p["reason"] for p in body["photos"]}
    assert reasons["a-again.jpg"] is None
    assert reasons["a.jpg"] == "its near-duplicate group's photo a-again.jpg was used"
    assert reasons["b.jpg"] == "not in any cell: other photos matched the colours better"
    assert reasons["notes.txt"].startswith("not indexed: ") and "not an image" in reasons["notes.txt"]
    sizes = {p["name"]: p["group_size"] for p in body["photos"]}
    assert (sizes["a.jpg"], sizes["a-again.jpg"], sizes["b.jpg"]) == (2, 2, 1)
    # Thumbnails are the indexer's display tiles, and the viewer's own answers point at them too.
    for photo in body["photos"]:
        if photo["thumbnail_url"]:
            assert client.get(photo["thumbnail_url"]).status_code == 200, photo
    placed = client.get(f"/api/jobs/{job['id']}/tiles", query_string={"tile": "a-again.jpg"}).json
    assert placed["count"] == 12 and client.get(placed["tile_url"]).status_code == 200
    cell = client.get(f"/api/jobs/{job['id']}/tiles", query_string={"col": 0, "row": 0}).json
    assert cell["mirrored"] and client.get(cell["tile_url"]).status_code == 200
    # Pages, searches and sorts of an unchanged library are answered from the one table.
    client.get(job["base"], query_string={"show": "left_out", "sort": "most_used", "search": "a"})
    assert tables.made == made + 1

    upload(client, library, {"c.jpg": _jpeg(9)})
    _drain(services, uri)
    monkeypatch.setattr(webapp.job_photos, "INFO_SECONDS", 0.0)
    monkeypatch.setattr(webapp.api_job_photos, "INFO_SECONDS", 0.0)
    grown = client.get(job["base"], query_string={"show": "left_out"}).json
    assert grown["library_changed"] is True and grown["library_version"] != grown["current_version"]
    assert (
        "the library has changed since this mosaic was made"
        in {p["name"]: p["reason"] for p in grown["photos"]}["c.jpg"]
    )


def upload(client: Any, library: str, files: dict[str, bytes]) -> None:
    grant = client.post(
        f"/api/libraries/{library}/uploads", json={"files": [{"name": n, "size": len(d)} for n, d in files.items()]}
    ).get_json()
    for item in grant["uploads"]:
        BlobClient.from_blob_url(item["url"]).upload_blob(files[item["name"]])
    assert client.post(f"/api/libraries/{library}/index").status_code == 202
