"""The tile-library API: list, inspect (with sample tiles), create from photos or a zip; and
the plan endpoint that tells the form the final size before anything is submitted."""

from __future__ import annotations

import io
import logging
import re
import zipfile
from typing import Any

from flask import Blueprint, Response, jsonify, request, url_for

from dal.blobs.libraries import (
    EmptyLibraryError,
    InvalidLibraryNameError,
    LibraryInfo,
    LibraryNotFoundError,
    validate_library_name,
)
from mosaic.errors import TileSourceError
from mosaic.sources import is_zip
from webapp import planning
from webapp.errors import ApiError
from webapp.services import services, settings
from webapp.validation import int_field, optional_int_field

log = logging.getLogger(__name__)
bp = Blueprint("api_libraries", __name__, url_prefix="/api")

_TILE_BLOB = re.compile(r"^tiles/[A-Za-z0-9._-]{1,200}\.jpg$")
MAX_LIBRARY_FILES = 2000
MAX_UNZIPPED_BYTES = 512 * 1024 * 1024
SAMPLES_IN_LIST = 8
MAX_SAMPLE_SCAN = 1000  # tile names listed to choose the samples from (one listing page)
SAMPLES_IN_DETAIL = 48


def _library_json(info: LibraryInfo, *, samples: int) -> dict[str, Any]:
    names = _spread(services().libraries.sample_tiles(info.name, MAX_SAMPLE_SCAN), samples) if samples else []
    return {
        "name": info.name,
        "description": info.description,
        "tile_count": info.tile_count,
        "version": info.version,
        "url": url_for("api_libraries.get_library", name=info.name),
        "samples": [url_for("api_libraries.library_tile", name=info.name, tile=n) for n in names],
    }


def _spread(names: list[str], count: int) -> list[str]:
    """``count`` names evenly spaced over the list: tiles are named by source photo, so the
    first few would all come from the same one."""
    if len(names) <= count:
        return names
    return [names[(i * len(names)) // count] for i in range(count)]


def _find(name: str) -> LibraryInfo:
    try:
        validate_library_name(name)
    except InvalidLibraryNameError:
        raise ApiError(404, "library_not_found", f"there is no tile library called {name!r}") from None
    for info in services().libraries.list():
        if info.name == name:
            return info
    raise ApiError(404, "library_not_found", f"there is no tile library called {name!r}")


@bp.get("/libraries")
def list_libraries() -> Response:
    libraries = services().libraries.list()
    return jsonify({"libraries": [_library_json(info, samples=SAMPLES_IN_LIST) for info in libraries]})


@bp.get("/libraries/<name>")
def get_library(name: str) -> Response:
    count = int_field(request.args, "samples", low=0, high=200, default=SAMPLES_IN_DETAIL)
    return jsonify(_library_json(_find(name), samples=count))


@bp.get("/libraries/<name>/tiles/<path:tile>")
def library_tile(name: str, tile: str) -> Response:
    """One tile image, streamed by the app: library containers are private like the rest."""
    if not _TILE_BLOB.match(tile):
        raise ApiError(404, "not_found", "no such tile")
    try:
        data = services().libraries.read_tile(name, tile)
    except (InvalidLibraryNameError, LibraryNotFoundError):
        raise ApiError(404, "not_found", "no such tile") from None
    headers = {
        "Cache-Control": "public, max-age=86400",
        "Content-Disposition": f'inline; filename="{tile.removeprefix("tiles/")}"',
    }
    return Response(data, mimetype="image/jpeg", headers=headers)


@bp.post("/libraries")
def create_library() -> tuple[Response, int]:
    """A new library from uploaded photos and/or zip files; names are never overwritten here."""
    name = (request.form.get("name") or "").strip()
    description = (request.form.get("description") or "").strip() or name
    if not name:
        raise ApiError(400, "missing_field", "name is required")
    try:
        services().libraries.container_name(name)  # the rule, with this deployment's prefix
    except InvalidLibraryNameError as exc:
        raise ApiError(400, "invalid_field", str(exc)) from None
    if len(description) > 200:
        raise ApiError(400, "invalid_field", "description must be at most 200 characters")
    uploads = [f for f in request.files.getlist("files") if f.filename or f.content_length]
    if not uploads:
        raise ApiError(400, "missing_field", "files is required: photos (JPEG, PNG, ...) or a zip of them")
    if len(uploads) > MAX_LIBRARY_FILES:
        raise ApiError(400, "invalid_field", f"files: at most {MAX_LIBRARY_FILES} per library, got {len(uploads)}")
    libraries = services().libraries
    if libraries.exists(name):
        raise ApiError(409, "library_exists", f"a library called {name!r} exists already; choose another name")
    files = []
    for upload in uploads:
        data = upload.read()
        filename = upload.filename or "upload"
        if is_zip(data):
            _check_zip(filename, data)
        files.append((filename, data))
    try:
        created = libraries.create_from(name, description, files)
    except EmptyLibraryError as exc:
        raise ApiError(422, "no_usable_images", str(exc)) from None
    except TileSourceError as exc:
        raise ApiError(422, "invalid_zip", str(exc)) from None
    log.info("library %s created with %d tiles", name, created.tile_count)
    body = {
        "name": name,
        "tile_count": created.tile_count,
        "version": created.version,
        "url": url_for("api_libraries.get_library", name=name),
        "first_tile": next(iter(libraries.sample_tiles(name, 1)), None),
        "skipped": [{"file": f, "reason": r} for f, r in created.skipped],
    }
    return jsonify(body), 201


def _check_zip(filename: str, data: bytes) -> None:
    """Refuse a zip that would inflate beyond the limit (a zip bomb) before inflating anything."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            total = sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile as exc:
        raise ApiError(422, "invalid_zip", f"{filename} is not a readable zip file: {exc}") from None
    if total > MAX_UNZIPPED_BYTES:
        raise ApiError(413, "too_large", f"{filename} unpacks to {total:,} bytes; the limit is {MAX_UNZIPPED_BYTES:,}")


@bp.get("/plan")
def plan() -> Response:
    """The grid and final size for a photo of ``width`` × ``height`` with these settings."""
    limits = settings()
    width = int_field(request.args, "width", low=1, high=1_000_000)
    height = int_field(request.args, "height", low=1, high=1_000_000)
    tile_size = int_field(request.args, "tile_size", low=1, high=64)
    tiles_across = optional_int_field(request.args, "tiles_across", low=1, high=planning.MAX_TILES_ACROSS)
    grid = planning.plan(
        width=width,
        height=height,
        tile_size=tile_size,
        tiles_across=tiles_across,
        max_output_pixels=limits.max_output_pixels,
    )
    body = planning.describe(grid, limit=limits.max_slices)
    body["max_output_pixels"] = limits.max_output_pixels
    body["max_tiles_across"] = planning.largest(width=width, height=height, tile_size=tile_size,
                                                max_output_pixels=limits.max_output_pixels).tiles_across  # fmt: skip
    return jsonify(body)
