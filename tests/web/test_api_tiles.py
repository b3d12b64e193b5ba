"""``GET /api/jobs/<id>/tiles``: which library photo is where, from the bands' maps in storage."""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pytest
import yaml

import webapp.api_tiles
from dal.blobs.libraries import LibraryStore
from dal.blobs.library_creation import tile_blob_names
from dal.blobs.names import slice_tile_map_name
from dal.blobs.store import BlobStore
from dal.blobs.tile_maps import TileMap
from dal.config import SLICE_RESPONSE_CONTAINER, Settings, StorageClients
from dal.jobs.store import JobStore
from tests.web.conftest import LIBRARY, png_bytes, submit


@pytest.fixture
def finished(client: Any, web_storage: StorageClients, web_settings: Settings) -> dict[str, Any]:
    """A 2-slice job marked done, its processors' band maps not stored yet."""
    request_id = submit(client, image=png_bytes(64, 48), tile_size="8", slices="2", tiles_across="16").json[
        "request_id"
    ]
    with client.session_transaction() as session:  # the client id the app gave this browser
        owner = str(session["cid"])
    jobs = JobStore(web_storage, prefix=web_settings.name_prefix)
    job = jobs.update(owner, request_id, lambda j: replace(j, status="done", output_name=f"{request_id}.jpg")).job
    return {"id": request_id, "job": job, "base": f"/api/jobs/{request_id}/tiles"}


def store_band_maps(
    finished: dict[str, Any],
    web_storage: StorageClients,
    web_settings: Settings,
    *,
    choice: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    bounds: Sequence[int] | None = None,
) -> tuple[np.ndarray, list[str]]:
    """The finished job's band maps, as its processors store them: ``choice`` (default: random
    candidates) cut into the job's slices at ``bounds`` (default: even), with each base cell's
    cell ``sizes`` for a mosaic of several sizes."""
    library = LibraryStore(web_storage, prefix=web_settings.name_prefix).load(LIBRARY)
    job = finished["job"]
    if choice is None:
        shape = (job.tiles_down, job.tiles_across)
        choice = np.random.default_rng(3).integers(0, 2 * len(library), shape).astype(np.int32)
    if bounds is None:
        bounds = np.linspace(0, job.tiles_down, job.slices + 1).astype(int).tolist()
    blobs = BlobStore(web_storage, prefix=web_settings.name_prefix)
    for seq, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        band = TileMap.from_choice(
            choice[start:stop],
            names=library.names,
            blobs=tile_blob_names(library.names),
            library=LIBRARY,
            first_row=int(start),
            sizes=None if sizes is None else sizes[start:stop],
        )
        blobs.upload(
            SLICE_RESPONSE_CONTAINER,
            slice_tile_map_name(finished["id"], seq),
            band.encode(),
            content_type="application/gzip",
        )
    return choice, list(library.names)


@pytest.fixture
def placement(
    finished: dict[str, Any], web_storage: StorageClients, web_settings: Settings
) -> tuple[np.ndarray, list[str]]:
    """The finished job with its band maps stored: its placement and the library's names."""
    return store_band_maps(finished, web_storage, web_settings)


def test_the_map_is_there_once_the_job_is_done_and_its_bands_are_stored(
    client: Any, finished: dict[str, Any], web_storage: StorageClients, web_settings: Settings
) -> None:
    base = finished["base"]
    assert client.get(base).json["error"] == "tile_map_missing"  # done, but made by a release that kept none
    choice, names = store_band_maps(finished, web_storage, web_settings)
    rows, cols = choice.shape
    summary = client.get(base).json
    assert (summary["columns"], summary["rows"], summary["library"]) == (cols, rows, LIBRARY)
    for col, row in [(0, 0), (cols - 1, rows - 1), (5, rows // 2)]:
        cell = client.get(f"{base}?col={col}&row={row}").json
        value = int(choice[row, col])
        assert (cell["tile"], cell["mirrored"]) == (names[value % len(names)], value >= len(names))
        photo = client.get(cell["tile_url"])
        assert photo.status_code == 200 and photo.mimetype == "image/jpeg"
        # The same cell by a pixel of the full-size mosaic (what the viewer sends), anywhere inside it.
        by_pixel = client.get(f"{base}?x={col * 8 + 7}&y={row * 8 + 3}").json
        assert by_pixel == cell and (cell["x"], cell["y"], cell["size"]) == (col * 8, row * 8, 8)
    listed = list(csv.reader(io.StringIO(client.get(summary["csv_url"]).get_data(as_text=True))))
    assert listed[0] == ["col", "row", "tile", "mirrored"] and len(listed) == 1 + rows * cols
    assert all(
        (tile, mirrored)
        == (names[int(choice[int(r), int(c)]) % len(names)], str(int(choice[int(r), int(c)] >= len(names))))
        for c, r, tile, mirrored in listed[1:]
    )


def test_every_place_of_one_photo_across_the_bands(
    client: Any, finished: dict[str, Any], placement: tuple[np.ndarray, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    choice, names = placement
    count = len(names)
    tile = choice % count
    found_first: list[dict[str, Any]] = []
    used = np.bincount(tile.ravel(), minlength=count)
    for photo in (int(used.argmax()), int(np.flatnonzero(used)[0])):  # the most placed, and another
        found = client.get(finished["base"], query_string={"tile": names[photo]}).json
        rows, cols = np.nonzero(tile == photo)  # row by row, as the answer lists them
        assert (found["tile"], found["count"], found["size"]) == (names[photo], used[photo], 8)
        expected = [
            {
                "col": int(c),
                "row": int(r),
                "x": int(c) * 8,
                "y": int(r) * 8,
                "size": 8,
                "mirrored": bool(choice[r, c] >= count),
            }
            for r, c in zip(rows, cols, strict=True)
        ]
        assert found["cells"] == expected
        assert client.get(found["tile_url"]).status_code == 200
        found_first = found_first or found["cells"]
    # a photo placed more often than a page lists: the count is whole, the list its first cells
    monkeypatch.setattr(webapp.api_tiles, "PLACES_LISTED", 3)
    most = client.get(finished["base"], query_string={"tile": names[int(used.argmax())]}).json
    assert most["count"] == used.max() > 3 and most["cells"] == found_first[:3]
    # a photo the mosaic does not hold (any name: the map lists only the photos it uses)
    absent = client.get(finished["base"], query_string={"tile": "no-such-photo.jpg"}).json
    assert (absent["count"], absent["cells"], absent["tile_url"]) == (0, [], None)


def test_a_search_names_the_photos_the_mosaic_uses_that_contain_the_text(
    client: Any, finished: dict[str, Any], placement: tuple[np.ndarray, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    choice, names = placement
    used = sorted({names[int(v) % len(names)] for v in choice.ravel()})
    for text in ("c1", "C0", ".PNG"):
        expected = [n for n in used if text.casefold() in n.casefold()]
        assert expected, text
        found = client.get(finished["base"], query_string={"search": text}).json
        assert found == {"search": text, "count": len(expected), "tiles": expected}
    monkeypatch.setattr(webapp.api_tiles, "NAMES_LISTED", 3)
    capped = client.get(finished["base"], query_string={"search": "c"}).json
    assert (capped["count"], capped["tiles"]) == (len(used), used[:3])
    assert client.get(finished["base"], query_string={"search": "beach"}).json["tiles"] == []


def test_a_large_cell_answers_as_one_whichever_of_its_base_cells_is_asked(
    client: Any, finished: dict[str, Any], web_storage: StorageClients, web_settings: Settings
) -> None:
    """A mosaic of cells of several sizes: a click anywhere in a large cell is the whole cell (its
    top-left and its side, as the viewer outlines it), "find your photo" lists it once with its
    side, and the CSV has one line for it."""
    library = LibraryStore(web_storage, prefix=web_settings.name_prefix).load(LIBRARY)
    job, count = finished["job"], len(library)
    rows, cols = job.tiles_down, job.tiles_across
    big, pair = 0, 1  # photo 0 only in the 4 x 4 cell; photo 1 in a 2 x 2 cell (and elsewhere)
    choice = (np.arange(rows * cols).reshape(rows, cols) % (count - 1) + 1).astype(np.int32)
    sizes = np.ones((rows, cols), np.uint8)
    choice[4:8, 8:12], sizes[4:8, 8:12] = big, 4
    choice[0:2, 0:2], sizes[0:2, 0:2] = pair, 2
    bounds = {1: (0, rows), 2: (0, 4, rows)}[job.slices]  # the pipeline's bands start on multiples of 4
    store_band_maps(finished, web_storage, web_settings, choice=choice, sizes=sizes, bounds=bounds)
    base = finished["base"]
    for asked in ({"col": 10, "row": 6}, {"col": 8, "row": 4}, {"x": 11 * 8 + 3, "y": 7 * 8 + 7}):
        cell = client.get(base, query_string=asked).json
        assert (cell["col"], cell["row"], cell["x"], cell["y"], cell["size"]) == (8, 4, 64, 32, 32), asked
        assert cell["tile"] == library.names[big]
    cell = client.get(base, query_string={"col": 1, "row": 1}).json
    assert (cell["col"], cell["row"], cell["size"]) == (0, 0, 16)
    assert client.get(base, query_string={"col": 2, "row": 1}).json["size"] == 8
    found = client.get(base, query_string={"tile": library.names[big]}).json
    assert found["count"] == 1 and found["size"] == 8
    assert found["cells"] == [{"col": 8, "row": 4, "x": 64, "y": 32, "size": 32, "mirrored": False}]
    lines = list(csv.reader(io.StringIO(client.get(base, query_string={"format": "csv"}).get_data(as_text=True))))
    assert lines[0] == ["col", "row", "tile", "mirrored", "size"]
    assert ["8", "4", library.names[big], "0", "4"] in lines and ["0", "0", library.names[pair], "0", "2"] in lines
    assert len(lines) - 1 == rows * cols - 15 - 3  # one line per cell


@pytest.mark.parametrize(
    "query",
    [
        "search=",
        "search=c&tile=c00.png",
        "search=c&x=0&y=0",
        "search=c&format=csv",
        "tile=",
        "tile=%20",
        "tile=" + "a" * 513,
        "tile=x&col=0&row=0",
        "tile=x&format=csv",
        "col=16&row=0",
        "col=0&row=12",
        "col=-1&row=0",
        "x=128&y=0",
        "y=96&x=0",
        "col=1",
        "col=a&row=1",
        "col=1&row=1&x=1&y=1",
        "format=csv&col=0&row=0",
        "format=xml",
    ],
)
@pytest.mark.usefixtures("placement")
def test_a_cell_outside_the_grid_or_a_muddled_question_is_400(
    client: Any, finished: dict[str, Any], query: str
) -> None:
    response = client.get(f"{finished['base']}?{query}")
    assert response.status_code == 400 and response.json["error"] in ("invalid_field", "missing_field"), response.json


def test_the_map_is_the_owners_only_and_waits_for_the_mosaic(client: Any, other_client: Any) -> None:
    request_id = submit(client, image=png_bytes(64, 48), slices="1").json["request_id"]
    assert client.get(f"/api/jobs/{request_id}/tiles?col=0&row=0").status_code == 409
    assert client.get(f"/api/jobs/{request_id}/tiles?tile=%20").status_code == 400  # a bad question first
    assert other_client.get(f"/api/jobs/{request_id}/tiles?col=0&row=0").status_code == 404


_SPEC = Path(__file__).resolve().parents[2] / "webapp" / "openapi.yaml"
_ASKED = [
    "",
    "format=json",
    "format=csv",
    "col=0&row=0",
    "col=0&row=0&format=json",
    "x=0&y=0",
    "tile=c00.png&format=json",
    "search=c",
    "col=0&row=0&search=c&format=json",  # the fuzzer's case: a cell and a search together
    "search=c&tile=c00.png",
    "search=c&format=csv",
    "tile=%20",
    "col=1",
    "col=a&row=1",
    "col=1&row=1&x=1&y=1",
    "format=csv&col=0&row=0",
    "format=xml",
    "col=0&row=0&colour=red",
    "col=0&col=1&row=0",
]


@functools.cache
def _spec() -> dict[str, Any]:
    """The spec, read once for the 19 questions (0.16 s each)."""
    return yaml.safe_load(_SPEC.read_text())


def _as_question(query: str) -> dict[str, Any]:
    """The query as the spec's exploded ``question`` object (integers where they parse)."""
    pairs = [part.split("=", 1) for part in query.split("&") if part]
    return {k: int(v) if v.lstrip("-").isdigit() else unquote(v) for k, v in pairs}


@pytest.mark.parametrize("query", _ASKED)
@pytest.mark.usefixtures("placement")
def test_the_spec_says_which_questions_go_together_and_the_app_agrees(
    client: Any, finished: dict[str, Any], query: str
) -> None:
    """The spec's one ``question`` object (oneOf the question sets) is what the app answers: a
    query it allows is never 400, one it does not allow always is (a generated client and the
    fuzzer read the rule from the schema, not from prose)."""
    import jsonschema

    (question,) = [
        p for p in _spec()["paths"]["/api/jobs/{request_id}/tiles"]["parameters"] if p.get("name") == "question"
    ]
    assert (question["in"], question["style"], question["explode"]) == ("query", "form", True)
    pairs = [part.split("=", 1)[0] for part in query.split("&") if part]
    allowed = len(pairs) == len(set(pairs)) and jsonschema.Draft4Validator(question["schema"]).is_valid(
        _as_question(query)
    )
    answer = client.get(f"{finished['base']}?{query}")
    assert (answer.status_code != 400) == allowed, (query, answer.status_code, answer.get_data(as_text=True)[:200])
    if not allowed:
        assert answer.json["error"] in ("invalid_field", "missing_field", "repeated_field"), answer.json
