"""``GET /api/jobs/<id>/tiles``: which library photo is where in a finished mosaic.

One cell (``?col=&row=``, or ``?x=&y=`` in the mosaic's pixels, as the viewer clicks) answers
its tile's name, whether it was placed mirrored, the URL of the library photo and the cell's
square (a large cell of a mosaic of several cell sizes: the whole cell, whichever base cell
was asked for). One photo
(``?tile=<name>``) answers every cell it holds ("find your photo"); ``?search=<text>`` the
names of the photos the mosaic uses that the text finds (``dal.blobs.tile_maps.name_search``).
No question answers the map's size and where its CSV is; ``?format=csv`` is the whole map, one
line per cell (``col,row,tile,mirrored``). One question per request: the spec says so as one exploded query
object whose ``oneOf`` lists the question sets; any other combination, an unknown parameter or
one sent twice is 400. Owner-only like the result: another client's job is 404. The map
is stored per band by the processors (``dal.blobs.tile_maps``) and joined here on first use,
then kept in the previews' memory cache (a job's map never changes).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request, url_for

from dal.blobs.library_info import TILE_PREFIX
from dal.blobs.tile_maps import CSV_HEADER, TileMap, load_job_map
from dal.errors import BlobMissingError, InvalidLibraryNameError, TileMapFormatError
from dal.jobs.model import Job, JobStatus
from webapp.api_jobs import own_job
from webapp.errors import ApiError
from webapp.previews import PREVIEWS
from webapp.services import services
from webapp.validation import int_field

bp = Blueprint("api_tiles", __name__, url_prefix="/api")

_PAIRS = (("col", "row"), ("x", "y"))
PLACES_LISTED = 1000  # cells listed for one photo (``count`` says how many there are)
NAMES_LISTED = 20  # photo names a search answers (``count`` says how many match)
MAX_NAME = 512  # characters of a tile name asked for, or searched for
_ONE_OF = ("tile", "search")
_KNOWN = frozenset({"col", "row", "x", "y", "tile", "search", "format"})
INFO_SECONDS = 10.0  # a library's marks (uploads or not) are trusted this long


def job_tile_map(job: Job) -> TileMap:
    """The finished job's whole map (409 before it is done, 404 when it has none), cached."""
    if job.status != JobStatus.DONE:
        raise ApiError(409, "not_ready", f"the mosaic is not finished yet (status {job.status})")

    def load() -> bytes:
        try:
            return load_job_map(services().download, job.request_id, job.slices)
        except BlobMissingError:
            raise ApiError(404, "tile_map_missing", "this mosaic was made before tile maps were kept") from None

    try:
        return TileMap.decode(PREVIEWS.get((job.request_id, "tiles"), load))
    except TileMapFormatError as exc:
        raise ApiError(404, "tile_map_missing", f"this mosaic's tile map is unreadable: {exc}") from None


def _cell(job: Job, tile_map: TileMap, given: tuple[str, str]) -> tuple[int, int]:
    """The (col, row) asked for, each within the grid (400 naming the field otherwise)."""
    if given == ("col", "row"):
        col = int_field(request.args, "col", low=0, high=tile_map.columns - 1)
        return col, int_field(request.args, "row", low=0, high=tile_map.rows - 1)
    x = int_field(request.args, "x", low=0, high=job.output_width - 1)
    y = int_field(request.args, "y", low=0, high=job.output_height - 1)
    return min(x // job.tile_size, tile_map.columns - 1), min(y // job.tile_size, tile_map.rows - 1)


@bp.get("/jobs/<request_id>/tiles")
def job_tiles(request_id: str) -> Response:
    job = own_job(request_id)
    # The spec's one exploded ``question`` object (additionalProperties: false): a name it does not
    # list, or one sent twice, is a question this endpoint cannot answer as asked.
    for name in request.args:
        if name not in _KNOWN:
            raise ApiError(400, "invalid_field", f"{name[:40]!r} is not a question of this endpoint")
        if len(request.args.getlist(name)) > 1:
            raise ApiError(400, "repeated_field", f"{name} was sent more than once")
    fmt = request.args.get("format", "json")
    if fmt not in ("json", "csv"):
        raise ApiError(400, "invalid_field", f"format must be json or csv, got {fmt[:40]!r}")
    given = [pair for pair in _PAIRS if any(name in request.args for name in pair)]
    asked = [name for name in _ONE_OF if name in request.args]
    if len(given) + len(asked) > 1 or ((given or asked) and fmt == "csv"):
        raise ApiError(
            400,
            "invalid_field",
            "ask for one cell (col and row, or x and y), one photo (tile), a search or the whole map (format=csv)",
        )
    text = _name_field(asked[0]) if asked else ""
    tile_map = job_tile_map(job)
    if asked == ["tile"]:
        return jsonify(_places(job, tile_map, text))
    if asked == ["search"]:
        names = tile_map.names_like(text)
        return jsonify({"search": text, "count": len(names), "tiles": names[:NAMES_LISTED]})
    if fmt == "csv":
        headers = {"Content-Disposition": f'attachment; filename="mosaic-{request_id[:8]}-tiles.csv"'}
        return Response(tile_map.csv_lines(), mimetype="text/csv", headers=headers)
    if not given:
        return jsonify(_summary(job, tile_map))
    col, row, cell_size = tile_map.cell_at(*_cell(job, tile_map, given[0]))  # a large cell: its top-left
    name, blob, mirrored = tile_map.at(col, row)
    return jsonify(
        {
            "col": col,
            "row": row,
            "tile": name,
            "mirrored": mirrored,
            "library": job.library,
            "tile_url": url_for("api_libraries.library_tile", name=job.library, tile=display_blob(job, name, blob)),
            "x": col * job.tile_size,
            "y": row * job.tile_size,
            "size": cell_size * job.tile_size,
        }
    )


def display_blob(job: Job, name: str, blob: str) -> str:
    """The photo's display tile: the map's blob, except in an uploads library, whose indexer
    names it after the staged photo (``tiles/<name>.jpg``, ``dal.blobs.staging``)."""
    try:
        info = services().libraries.info(job.library, max_age=INFO_SECONDS)
    except InvalidLibraryNameError:
        return blob
    return f"{TILE_PREFIX}{name}.jpg" if info is not None and info.uploads else blob


def _name_field(field: str) -> str:
    name = request.args[field]
    if not name.strip() or len(name) > MAX_NAME:
        raise ApiError(400, "invalid_field", f"{field} must be 1 to {MAX_NAME} characters, not only spaces")
    return name


def _places(job: Job, tile_map: TileMap, name: str) -> dict[str, Any]:
    """Every place the photo ``name`` holds in the mosaic ("find your photo"), the first
    ``PLACES_LISTED`` of them listed, row by row; none when the mosaic does not use it."""
    rows, columns, mirrored, blob = tile_map.places(name)
    size, count = job.tile_size, int(rows.size)
    rows, columns, mirrored = rows[:PLACES_LISTED], columns[:PLACES_LISTED], mirrored[:PLACES_LISTED]
    sides = [size] * len(rows) if tile_map.sizes is None else (tile_map.sizes[rows, columns] * size).tolist()
    listed = zip(rows.tolist(), columns.tolist(), mirrored.tolist(), sides, strict=True)
    return {
        "tile": name,
        "library": job.library,
        "tile_url": url_for("api_libraries.library_tile", name=job.library, tile=display_blob(job, name, blob))
        if blob
        else None,
        "count": count,
        "size": size,
        "cells": [
            {"col": c, "row": r, "x": c * size, "y": r * size, "size": side, "mirrored": m} for r, c, m, side in listed
        ],
    }


def _summary(job: Job, tile_map: TileMap) -> dict[str, Any]:
    return {
        "columns": tile_map.columns,
        "rows": tile_map.rows,
        "tile_size": job.tile_size,
        "library": job.library,
        "distinct_tiles": len(tile_map.tiles),
        "csv_header": CSV_HEADER,
        "csv_url": url_for("api_tiles.job_tiles", request_id=job.request_id, format="csv"),
    }
