"""Removing photos from a library, the photos page (counts, filter, search), and what is collected."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from dal.blobs.indexed import SEGMENT_PREFIX, VERSION_PREFIX, PhotoOutcome
from dal.config import Settings, StorageClients
from dal.errors import LibraryNotFoundError
from tests.support.indexing import index, photo, upload
from tests.web.conftest import LIBRARY
from workers.services import RoleServices


@pytest.fixture
def filled(client: Any, web_settings: Settings, web_storage: StorageClients) -> tuple[str, RoleServices]:
    library = f"rm-{uuid.uuid4().hex[:10]}"
    services = RoleServices(web_storage, web_settings, "removal@test")
    upload(client, library, {f"cat-{i}.jpg": photo(i) for i in range(3)} | {"dog.jpg": photo(7), "x.txt": b"no" * 50})
    index(client, services, library)
    return library, services


def test_the_owner_removes_photos_and_a_new_version_is_published(
    client: Any, other_client: Any, filled: tuple[str, RoleServices]
) -> None:
    library, services = filled
    container = services.libraries.container_client(library)
    before = client.get(f"/api/libraries/{library}/photos").get_json()
    assert before["counts"] == {"uploaded": 0, "indexed": 4, "skipped": 1} and before["total"] == 5

    assert client.delete(f"/api/libraries/{library}/photos/cat-1.jpg").status_code == 204
    assert client.delete(f"/api/libraries/{library}/photos/cat-1.jpg").status_code == 204  # again: the same
    after = client.get(f"/api/libraries/{library}/photos").get_json()
    assert after["version"] != before["version"] and after["counts"]["indexed"] == 3
    assert "cat-1.jpg" not in {p["name"] for p in after["photos"]}
    assert services.libraries.load(library).names == ("cat-0.jpg", "cat-2.jpg", "dog.jpg")
    left = set(container.list_blob_names())
    assert "staging/cat-1.jpg" not in left and "tiles/cat-1.jpg.jpg" not in left
    assert client.get(f"/api/libraries/{library}").get_json()["tile_count"] == 3

    batch = client.post(f"/api/libraries/{library}/remove-photos", json={"photos": ["x.txt", "dog.jpg", "nope.jpg"]})
    assert batch.status_code == 200
    assert batch.get_json()["removed"] == ["dog.jpg", "x.txt"] and batch.get_json()["not_found"] == ["nope.jpg"]

    errors = [
        (client.delete(f"/api/libraries/{library}/photos/nope.jpg"), 404, "photo_not_found"),
        (client.delete(f"/api/libraries/{library}/photos/..x"), 400, "invalid_field"),
        (client.post(f"/api/libraries/{library}/remove-photos", json={"photos": []}), 400, "missing_field"),
        (client.post(f"/api/libraries/{library}/remove-photos", json={"photos": ["a"] * 1001}), 400, "invalid_field"),
        (other_client.delete(f"/api/libraries/{library}/photos/cat-0.jpg"), 404, "library_not_found"),
        (client.delete(f"/api/libraries/{LIBRARY}/photos/c00.png"), 403, "not_owner"),
    ]
    for response, status, error in errors:
        assert (response.status_code, response.get_json()["error"]) == (status, error), response.get_json()


def test_the_photos_page_counts_filters_and_searches(client: Any, filled: tuple[str, RoleServices]) -> None:
    library, _ = filled
    base = f"/api/libraries/{library}/photos"
    cats = client.get(f"{base}?q=CAT&limit=2").get_json()
    assert cats["total"] == 3 and [p["name"] for p in cats["photos"]] == ["cat-0.jpg", "cat-1.jpg"]
    rest = client.get(f"{base}?q=cat&limit=2&continuation={cats['continuation']}").get_json()
    assert [p["name"] for p in rest["photos"]] == ["cat-2.jpg"] and rest["continuation"] is None
    skipped = client.get(f"{base}?state=skipped").get_json()
    assert [p["name"] for p in skipped["photos"]] == ["x.txt"] and skipped["counts"]["indexed"] == 4
    for query in ("state=lost", "continuation=../x", "continuation=", "q=" + "a" * 161):
        assert client.get(f"{base}?{query}").status_code == 400, query


def test_a_late_index_cannot_bring_a_removed_photo_back_and_an_upload_again_does(
    client: Any, filled: tuple[str, RoleServices]
) -> None:
    library, services = filled
    indexed = services.libraries.indexed
    late = indexed.read(library)[0].photos["cat-0.jpg"]
    assert client.delete(f"/api/libraries/{library}/photos/cat-0.jpg").status_code == 204
    indexed.record(library, [late])  # a batch that read the photo before it was removed, recorded after
    assert "cat-0.jpg" not in services.libraries.load(library).names
    upload(client, library, {"cat-0.jpg": photo(0)})
    index(client, services, library)
    assert "cat-0.jpg" in services.libraries.load(library).names


def test_segments_and_versions_stay_for_older_versions_until_collected(
    client: Any, filled: tuple[str, RoleServices]
) -> None:
    library, services = filled
    indexed, container = services.libraries.indexed, services.libraries.container_client(library)
    pinned = services.libraries.pin(library)
    assert pinned is not None
    (segment,) = {
        p.segment for p in indexed.read(library)[0].photos.values() if isinstance(p, PhotoOutcome) and p.segment
    }
    removed = client.post(
        f"/api/libraries/{library}/remove-photos", json={"photos": ["cat-0.jpg", "cat-1.jpg", "cat-2.jpg", "dog.jpg"]}
    )
    assert removed.status_code == 200
    # Nothing names the batch's segment now, yet the pinned version still renders: it is kept.
    assert indexed.read(library)[0].retired.keys() == {segment}
    assert len(services.libraries.load(library, version=pinned)) == 4
    assert set(indexed.collect(library, retention=0)) == {f"{VERSION_PREFIX}{pinned}.json", segment}
    assert not list(container.list_blob_names(name_starts_with=SEGMENT_PREFIX)) and not indexed.read(library)[0].retired
    services.libraries.loaded._pinned.clear()  # another process, which never saw that version
    with pytest.raises(LibraryNotFoundError, match=f"version {pinned} .* is gone"):
        services.libraries.load(library, version=pinned)
