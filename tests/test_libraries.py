"""Tile libraries in a real Azurite: create from folders and zips, list, load with a cache."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from dal.blobs.libraries import LibraryStore
from dal.blobs.library_info import INDEX_BLOB, TILE_PREFIX, validate_library_name
from dal.config import StorageClients
from dal.errors import EmptyLibraryError, InvalidLibraryNameError, LibraryNotFoundError

COLOURS = [
    (220, 40, 40),
    (40, 200, 60),
    (30, 60, 210),
    (240, 220, 40),
    (20, 20, 20),
    (245, 245, 245),
    (200, 120, 30),
    (120, 40, 160),
    (40, 190, 200),
    (128, 128, 128),
]


def photo(colour: tuple[int, int, int], *, size: tuple[int, int] = (80, 60), fmt: str = "JPEG") -> bytes:
    image = Image.new("RGB", size, colour)
    image.paste((255 - colour[0], 255 - colour[1], 255 - colour[2]), (0, 0, size[0] // 3, size[1] // 3))
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


@pytest.fixture
def store(storage: StorageClients, unique: str) -> LibraryStore:
    return LibraryStore(storage, prefix=f"t{unique}")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "photos"
    (root / "nested" / "deeper").mkdir(parents=True)
    for i, colour in enumerate(COLOURS[:6]):
        sub = root if i < 2 else root / "nested" if i < 4 else root / "nested" / "deeper"
        (sub / f"p{i}.{'png' if i % 2 else 'jpg'}").write_bytes(photo(colour, fmt="PNG" if i % 2 else "JPEG"))
    (root / "notes.txt").write_text("not a photo")
    (root / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    return root


def test_names_follow_the_container_rules() -> None:
    assert validate_library_name("my-photos-2024") == "my-photos-2024"
    for bad in ["ab", "a" * 64, "Holiday", "a--b", "-ab", "ab-", "ab_c", "a b", "imageinput", ""]:
        with pytest.raises(InvalidLibraryNameError):
            validate_library_name(bad)


def test_invalid_name_is_rejected_before_any_work(store: LibraryStore, folder: Path) -> None:
    with pytest.raises(InvalidLibraryNameError, match="lowercase"):
        store.create_from("My_Library", "x", folder)
    with pytest.raises(InvalidLibraryNameError, match="3 to 63"):
        store.load("ab")


def test_create_from_folder_then_list_shows_it(store: LibraryStore, folder: Path) -> None:
    created = store.create_from("holiday", "Holiday — café photos", folder)
    assert created.tile_count == 6
    reasons = dict(created.skipped)
    assert "notes.txt" in reasons and ".DS_Store" in reasons
    [info] = store.list()
    assert (info.name, info.description, info.tile_count) == ("holiday", "Holiday — café photos", 6)
    assert (info.version, info.uri) == (created.version, created.uri)
    assert info.uri == store.uri("holiday") and info.uri.endswith(f"/{store.prefix}holiday")
    assert store.exists("holiday") and not store.exists("nothere")
    tiles = store.sample_tiles("holiday", 100)
    assert len(tiles) == 6 and all(t.startswith(TILE_PREFIX) and t.endswith(".jpg") for t in tiles)


def test_create_from_zip_with_nested_folders_and_junk(store: LibraryStore) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("trip/", b"")
        for i, colour in enumerate(COLOURS[:5]):
            archive.writestr(f"trip/day{i % 2}/img{i}.jpg", photo(colour))
        archive.writestr("__MACOSX/trip/day0/._img0.jpg", b"\0\5\26\7 resource fork")
        archive.writestr("trip/._img1.jpg", b"\0\5\26\7")
        archive.writestr("trip/readme.txt", b"hello")
        archive.writestr("trip/broken.jpg", photo(COLOURS[6])[:200])
    created = store.create_from("trip", "zip", buffer.getvalue())
    assert created.tile_count == 5
    skipped = {name for name, _ in created.skipped}
    assert {"__MACOSX/trip/day0/._img0.jpg", "trip/._img1.jpg", "trip/readme.txt", "trip/broken.jpg"} <= skipped
    assert store.load("trip").atlas.shape[0] == 5


def test_a_library_is_a_marked_container_and_nothing_else(store: LibraryStore, storage: StorageClients) -> None:
    """One definition, read by ``exists`` and ``list``: the mark ``create`` sets last."""
    store.create_from_images("flowers", "Flowers été", [("a.jpg", photo(COLOURS[0]))])
    store.create_from_images("plain", "Plain", [("b.jpg", photo(COLOURS[1]))])
    store.create_from_images("plain", "Plain, renamed", [("c.jpg", photo(COLOURS[2]))])  # replaced: re-marked
    service = storage.blob_service
    service.get_container_client(store.container_name("other")).create_container(metadata={"other": "x"})
    half = service.get_container_client(store.container_name("half"))
    half.create_container()  # a create that died before its mark: tiles, maybe an index, no mark
    half.upload_blob(INDEX_BLOB, b"not yet")
    assert [(i.name, i.description) for i in store.list()] == [("flowers", "Flowers été"), ("plain", "Plain, renamed")]
    assert store.exists("flowers") and store.exists(store.uri("plain"))
    assert not store.exists("other") and not store.exists("half") and not store.exists("nothere")
    assert not store.exists("http://elsewhere.example/devstoreaccount1/flowers")  # not this account's
    with pytest.raises(InvalidLibraryNameError):
        store.exists("imageinput")  # a workflow container is never a library


def test_source_without_images_is_an_error(store: LibraryStore, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("nothing here")
    with pytest.raises(EmptyLibraryError, match="no usable image"):
        store.create_from("empty", "", tmp_path)
    assert not store.exists("empty")


class RequestLog:
    """Every HTTP response seen by the clients: (method, path, status)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []

    def __call__(self, response: Any) -> None:
        request = response.http_request
        self.seen.append((request.method, request.url.split("?")[0], response.http_response.status_code))

    def index_gets(self, *statuses: int) -> int:
        return sum(1 for m, url, s in self.seen if m == "GET" and url.endswith(f"/{INDEX_BLOB}") and s in statuses)

    def downloads(self) -> int:  # the SDK's first GET asks for a range: 206
        return self.index_gets(200, 206)

    def unchanged(self) -> int:  # If-None-Match matched: 304 from Azure, 412 from Azurite
        return self.index_gets(304, 412)


def test_load_downloads_the_index_once_then_answers_from_cache(
    storage: StorageClients, store: LibraryStore, azurite_connection_string: str
) -> None:
    uri = store.create_from_images("cached", "", [(f"c{i}.jpg", photo(c)) for i, c in enumerate(COLOURS)])
    log = RequestLog()
    reader = LibraryStore(
        StorageClients(azurite_connection_string, profile="probe", response_hook=log), prefix=store.prefix
    )
    first = reader.load("cached")
    second = reader.load(uri)
    assert second is first
    assert log.downloads() == 1
    assert log.unchanged() == 1
    assert len(first.names) == len(COLOURS)


def test_a_fresh_check_is_trusted_for_fresh_for_seconds(store: LibraryStore, azurite_connection_string: str) -> None:
    store.create_from_images("fresh", "", [(f"f{i}.jpg", photo(c)) for i, c in enumerate(COLOURS)])
    log = RequestLog()
    reader = LibraryStore(
        StorageClients(azurite_connection_string, profile="probe", response_hook=log), prefix=store.prefix
    )
    first = reader.load("fresh", fresh_for=60)
    assert reader.load("fresh", fresh_for=60) is first and reader.load("fresh", fresh_for=60) is first
    assert (log.downloads(), log.unchanged()) == (1, 0)  # no request while the check is fresh
    assert reader.load("fresh") is first  # fresh_for=0: check now
    assert (log.downloads(), log.unchanged()) == (1, 1)


def test_replacing_a_library_changes_its_version_and_refreshes_caches(
    store: LibraryStore, azurite_connection_string: str
) -> None:
    store.create_from_images("swap", "old", [(f"a{i}.jpg", photo(c)) for i, c in enumerate(COLOURS)])
    log = RequestLog()
    reader = LibraryStore(
        StorageClients(azurite_connection_string, profile="probe", response_hook=log), prefix=store.prefix
    )
    old = reader.load("swap")
    new_created = store.create_from(
        "swap", "new", [(f"b{i}.png", photo(c, fmt="PNG")) for i, c in enumerate(COLOURS[:3])]
    )
    new = reader.load("swap")
    assert new.version == new_created.version != old.version
    assert len(new.names) == 3
    assert log.downloads() == 2
    assert reader.load("swap") is new
    [info] = store.list()
    assert (info.description, info.tile_count, info.version) == ("new", 3, new.version)
    assert sorted(store.sample_tiles("swap", 100)) == [f"{TILE_PREFIX}b{i}.jpg" for i in range(3)]


def test_missing_library_and_foreign_uri_are_clear_errors(store: LibraryStore) -> None:
    with pytest.raises(LibraryNotFoundError, match="does not exist"):
        store.load("nosuchlibrary")
    with pytest.raises(LibraryNotFoundError, match="not in this storage account"):
        store.load("https://elsewhere.blob.core.windows.net/demo")
