"""The library API (list, detail with sample tiles, create from photos or a zip), the plan
endpoint, the health check and the queue monitor, against a real Azurite."""

from __future__ import annotations

import io
import uuid
import zipfile
from typing import Any

import pytest
from flask import Flask
from PIL import Image

from mosaic.grid import plan_grid
from mosaic.parts import plan_parts, unit_lattice
from tests.web.conftest import LIBRARY, SECRET, png_bytes, submit
from webapp import create_app


def upload_library(client: Any, name: str, files: list[tuple[str, bytes]], **extra: Any) -> Any:
    form: dict[str, Any] = {"name": name, "description": "Test photos", **extra}
    form["files"] = [(io.BytesIO(data), filename) for filename, data in files]
    return client.post("/api/libraries", data=form, content_type="multipart/form-data")


def new_name() -> str:
    return "lib" + uuid.uuid4().hex[:8]


def test_list_shows_the_library_with_sample_tiles(client: Any) -> None:
    libraries = client.get("/api/libraries").json["libraries"]
    found = next(lib for lib in libraries if lib["name"] == LIBRARY)
    assert found["tile_count"] == 18 and found["description"] == "Flat colours for the web tests"
    # 18 photos keep repeats 1 tile apart (2 classes of 9 at the bands' borders), not the default 3.
    assert found["variety"] == {"distance": 1, "default": 3, "tiles_for_default": 196}
    assert len(found["samples"]) == 8
    tile = client.get(found["samples"][0])
    assert tile.status_code == 200 and tile.mimetype == "image/jpeg"
    assert Image.open(io.BytesIO(tile.data)).size == (64, 64)


def test_detail_and_its_errors(client: Any) -> None:
    detail = client.get(f"/api/libraries/{LIBRARY}?samples=30")
    assert detail.status_code == 200 and len(detail.json["samples"]) == 18
    assert client.get(f"/api/libraries/{LIBRARY}?samples=-1").status_code == 400
    for name in ["nosuchlibrary", "Bad_Name", "imageinput"]:
        response = client.get(f"/api/libraries/{name}")
        assert response.status_code == 404 and response.json["error"] == "library_not_found"
    for tile in ["index.npz", "tiles/../index.npz", "tiles/nope.jpg"]:
        assert client.get(f"/api/libraries/{LIBRARY}/tiles/{tile}").status_code == 404
    assert client.get("/api/libraries/nosuchlibrary/tiles/tiles/a.jpg").status_code == 404


def test_create_from_photos_then_use_it(client: Any) -> None:
    name = new_name()
    photos = [(f"p{i}.jpg", png_bytes(80, 60, fmt="JPEG", colour=(i * 60, 100, 200 - i * 50))) for i in range(4)]
    response = upload_library(client, name, [*photos, ("notes.txt", b"not a photo")])
    assert response.status_code == 201, response.json
    assert response.json["tile_count"] == 4
    assert response.json["variety"]["distance"] == 0  # four photos: one may sit beside itself
    assert [s["file"] for s in response.json["skipped"]] == ["notes.txt"]
    assert name in [lib["name"] for lib in client.get("/api/libraries").json["libraries"]]
    assert submit(client, library=name, slices="1").status_code == 202
    again = upload_library(client, name, photos)
    assert again.status_code == 409 and again.json["error"] == "library_exists"


def test_create_from_a_zip(client: Any) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for i in range(3):
            archive.writestr(f"holiday/{i}.png", png_bytes(40, 40, colour=(i * 80, 20, 20)))
        archive.writestr("__MACOSX/holiday/._0.png", b"junk")
    response = upload_library(client, new_name(), [("photos.zip", buffer.getvalue())])
    assert response.status_code == 201, response.json
    assert response.json["tile_count"] == 3
    assert any("__MACOSX" in s["file"] for s in response.json["skipped"])


def _zip_of_a_later_version() -> bytes:
    """A good zip whose directory says it needs version 25.5 to extract: ``zipfile`` raised
    NotImplementedError opening it (a 500; found by mutating zips)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.png", png_bytes())
    data = bytearray(buffer.getvalue())
    entry = data.index(b"PK\x01\x02")
    data[entry + 6 : entry + 8] = (255).to_bytes(2, "little")  # version needed to extract
    return bytes(data)


@pytest.mark.parametrize(
    ("name", "files", "status", "error"),
    [
        ("", [("a.png", png_bytes())], 400, "missing_field"),
        ("Bad Name!", [("a.png", png_bytes())], 400, "invalid_field"),
        ("imageinput", [("a.png", png_bytes())], 400, "invalid_field"),
        ("fresh", [], 400, "missing_field"),
        ("fresh", [("a.txt", b"words"), ("b.txt", b"more words")], 422, "no_usable_images"),
        ("fresh", [("a.zip", b"PK\x03\x04 broken zip")], 422, "invalid_zip"),
        ("fresh", [("a.zip", _zip_of_a_later_version())], 422, "invalid_zip"),
        (LIBRARY, [("a.png", png_bytes())], 409, "library_exists"),
    ],
)
def test_create_rejections(client: Any, name: str, files: list[tuple[str, bytes]], status: int, error: str) -> None:
    if name == "fresh":
        name = new_name()
    before = {lib["name"] for lib in client.get("/api/libraries").json["libraries"]}
    response = upload_library(client, name, files)
    assert response.status_code == status, response.json
    assert response.json["error"] == error
    assert {lib["name"] for lib in client.get("/api/libraries").json["libraries"]} == before


def test_an_empty_zip_is_named_as_one(client: Any) -> None:
    """An empty zip starts with its end record, not an entry's header: it was taken for a
    photo and refused as "empty.zip: not an image"."""
    buffer = io.BytesIO()
    zipfile.ZipFile(buffer, "w").close()
    response = upload_library(client, new_name(), [("empty.zip", buffer.getvalue())])
    assert response.status_code == 422 and response.json["error"] == "no_usable_images"
    assert "among 0 files" in response.json["detail"] and "not an image" not in response.json["detail"]


def test_create_needs_csrf(client: Any) -> None:
    form = {"name": new_name(), "files": [(io.BytesIO(png_bytes()), "a.png")]}
    response = client.post("/api/libraries", data=form, content_type="multipart/form-data", csrf=False)
    assert response.status_code == 403


def test_plan_matches_the_engine(client: Any) -> None:
    body = client.get("/api/plan?width=4000&height=3000&tile_size=16").json
    grid = plan_grid(4000, 3000, tile_size=16, tiles_across=None, max_output_pixels=4_000_000)
    assert (body["tiles_across"], body["tiles_down"]) == (grid.tiles_across, grid.tiles_down)
    assert (body["output_width"], body["output_height"]) == (grid.output_width, grid.output_height)
    assert body["output_width"] * body["output_height"] <= 4_000_000
    lattice = unit_lattice(grid)
    assert body["max_slices"] == min(16, plan_parts(grid).count if lattice is None else lattice.units)
    fixed = client.get("/api/plan?width=400&height=300&tile_size=8&tiles_across=40").json
    assert (fixed["tiles_across"], fixed["output_width"]) == (40, 320)
    assert fixed["max_slices"] == 1  # 30 rows: one part (mosaic.parts), one slice
    tall = client.get("/api/plan?width=60&height=600&tile_size=8&tiles_across=60").json
    units = unit_lattice(plan_grid(60, 600, tile_size=8, tiles_across=60, max_output_pixels=4_000_000))
    assert tall["tiles_down"] == 600 and units is not None and tall["max_slices"] == units.units == 10


def test_the_slice_range_follows_cells_of_several_sizes(client: Any) -> None:
    """A job of several cell sizes is cut into plain bands of whole parts aligned to the largest
    size (no Deep Zoom pieces): the range the page offers is that one, as the job will get."""
    base = "/api/plan?width=400&height=3000&tile_size=8&tiles_across=50"
    grid = plan_grid(400, 3000, tile_size=8, tiles_across=50, max_output_pixels=4_000_000)
    lattice = unit_lattice(grid)
    assert lattice is not None
    one, mixed = client.get(base).json, client.get(base + "&cell_sizes=1,2,4").json
    assert one["max_slices"] == min(16, lattice.units)
    assert mixed["max_slices"] == min(16, plan_parts(grid, align=4).count) != one["max_slices"]
    assert client.get(base + "&cell_sizes=1").json == one
    assert client.get(base + "&cell_sizes=1,2,3").json["error"] == "invalid_field"
    refused = client.get("/api/plan?width=400&height=300&tile_size=32&cell_sizes=1,2,4")
    assert refused.status_code == 422 and refused.json["error"] == "invalid_plan"


@pytest.mark.parametrize(
    "query",
    [
        "",
        "width=10&height=10",
        "width=10&height=10&tile_size=0",
        "width=0&height=5&tile_size=4",
        "width=9&height=9&tile_size=4&tiles_across=-2",
    ],
)
def test_plan_rejects_bad_parameters(client: Any, query: str) -> None:
    response = client.get(f"/api/plan?{query}")
    assert response.status_code == 400 and response.json["error"] in {"missing_field", "invalid_field"}


def test_healthz_and_queues(client: Any, operator: dict[str, str]) -> None:
    assert client.get("/healthz").json == {"status": "ok"}
    submit(client, slices="1")
    assert client.get("/api/queues").status_code == 401  # operators only
    queues = {q["name"]: q for q in client.get("/api/queues", headers=operator).json["queues"]}
    work = {"imagerequest", "slicerequest", "sliceresponse", "imageresponse", "jobcleanup", "indexrequest"}
    assert work <= set(queues)
    # besides them only fair-scheduling lanes and shards of the two request queues (e.g. imagerequest-lane1)
    extra = set(queues) - work
    assert all(
        (n.split("-")[0] in {"imagerequest", "slicerequest"} and "-lane" in n) or n.startswith("slicerequest-")
        for n in extra
    ), extra
    assert queues["imagerequest"]["depth"] >= 1
    assert all(isinstance(q["poison_depth"], int) for q in queues.values())


def test_healthz_reports_unreachable_storage_without_the_key(web_settings: Any) -> None:
    from dataclasses import replace

    from dal.connection_strings import DEVSTORE_KEY, azurite_connection_string

    dead = azurite_connection_string("127.0.0.1", 9, 9, 9)  # the discard port: nothing listens
    app: Flask = create_app(
        {"TESTING": True, "SECRET_KEY": SECRET, "SETTINGS": replace(web_settings, connection_string=dead)}
    )
    response = app.test_client().get("/healthz")
    assert response.status_code == 503 and response.json["error"] == "storage_unavailable"
    assert DEVSTORE_KEY not in response.get_data(as_text=True)
    assert "AccountKey" not in response.get_data(as_text=True)


def test_pages_render(client: Any) -> None:
    for path in ["/", "/jobs", "/libraries", "/queues", "/jobs/00000000-0000-4000-8000-000000000000"]:
        page = client.get(path)
        assert page.status_code == 200 and page.mimetype == "text/html", path
        assert b"Photo Mosaics" in page.data
    assert client.get("/jobs/not-a-job").status_code == 404


def test_a_library_file_named_dot_is_a_tile_not_a_500(client: Any, web_storage: Any, web_settings: Any) -> None:
    """A file name with no name part (``.``) once failed the tile naming after the container was
    made: a 500 and an empty container left behind."""
    from dal.blobs.libraries import LibraryStore
    from dal.blobs.library_creation import tile_blob_names

    assert tile_blob_names([".", "/", "..", "a/.", ".png"]) == [
        "tiles/tile.jpg",
        "tiles/tile-1.jpg",
        "tiles/tile-2.jpg",
        "tiles/a.jpg",
        "tiles/png.jpg",
    ]
    name = f"dot-{uuid.uuid4().hex[:8]}"
    answer = client.post("/api/libraries", data={"name": name, "files": [(io.BytesIO(png_bytes(64, 64)), ".")]})
    assert answer.status_code == 201, answer.get_json()
    assert answer.get_json()["tile_count"] == 1
    assert LibraryStore(web_storage, prefix=web_settings.name_prefix).exists(name)
