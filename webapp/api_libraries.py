"""The tile-library API: list, inspect (with sample tiles), create from photos or a zip, delete;
and the plan endpoint that tells the form the final size before anything is submitted.

A library is built inside the request, in bounded memory: every upload and zip is catalogued
first against one budget for the whole request (``LIBRARY_LIMITS``: files, bytes unpacked,
pixels), then the files are read and decoded one at a time, each inside the process's
decoding budget (``webapp.decode_budget``). See docs/operations.md, "Limits per request".

A library belongs to the client that created it (``dal.blobs.libraries``: the owner in its
metadata); a client sees its own libraries and those an operator marked shared (the demo
library), and another client's library is simply not found (404), as with jobs. Only the owner
deletes one, through the ``jobcleanup`` queue like a job (``dal.operations.cleanup``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request, url_for

from dal.blobs.library_info import LibraryInfo, validate_library_name
from dal.errors import (
    EmptyLibraryError,
    InvalidLibraryNameError,
    LibraryExistsError,
    LibraryNotFoundError,
    QuotaExceeded,
)
from dal.operations.cleanup import delete_library_everywhere, request_library_cleanup
from mosaic.errors import SourceLimitError, TileSourceError
from mosaic.options import DEFAULT_OPTIONS
from mosaic.sources import SourceLimits
from mosaic.variety import feasible_distance, tiles_needed
from webapp import planning
from webapp.clients import client_id
from webapp.decode_budget import DECODES
from webapp.errors import ApiError
from webapp.ingress import client_address
from webapp.job_cells import cells_fields
from webapp.services import services, settings
from webapp.validation import int_field, optional_int_field, shown

log = logging.getLogger(__name__)
bp = Blueprint("api_libraries", __name__, url_prefix="/api")

_TILE_BLOB = re.compile(r"^tiles/[A-Za-z0-9._-]{1,200}\.jpg$")
MAX_LIBRARY_FILES = 2000
MAX_UNZIPPED_BYTES = 512 * 1024 * 1024  # every file and zip member of one request together
MAX_LIBRARY_PIXELS = 1_000_000_000  # the pixels of every photo of one request, from their headers
LIBRARY_LIMITS = SourceLimits(
    max_files=MAX_LIBRARY_FILES, max_unpacked_bytes=MAX_UNZIPPED_BYTES, max_pixels=MAX_LIBRARY_PIXELS
)
SAMPLES_IN_LIST = 8
DEFAULT_LIBRARY_PAGE = 100  # containers read per GET /api/libraries (one listing request)
MAX_LIBRARY_PAGE = 1000
MAX_SAMPLE_SCAN = 1000  # tile names listed to choose the samples from (one listing page)
SAMPLES_IN_DETAIL = 48
TILE_INFO_SECONDS = 10.0  # a tile read trusts the library's marks this long (one request saved per tile)


def _library_json(info: LibraryInfo, *, samples: int | None) -> dict[str, Any]:
    """``samples`` None: the few named in the library's metadata (no storage call: listings)."""
    if samples is None:
        names = list(info.samples[:SAMPLES_IN_LIST])
    else:
        names = _spread(services().libraries.sample_tiles(info.key, MAX_SAMPLE_SCAN), samples) if samples else []
    return {
        "name": info.name,
        "description": info.description,
        "tile_count": info.tile_count,
        "variety": _variety_json(info.tile_count),
        "version": info.version,
        "owned": info.owner is not None and info.owner == client_id(),
        "shared": info.shared,
        "uploads": info.uploads,
        "url": url_for("api_libraries.get_library", name=info.name),
        "samples": [url_for("api_libraries.library_tile", name=info.name, tile=n) for n in names],
    }


def _variety_json(tile_count: int) -> dict[str, int] | None:
    """How close one photo of the library may repeat in a mosaic made with the defaults.

    The rule keeps repeats ``default`` tiles apart once the library has ``tiles_for_default``
    photos; a smaller one keeps what it can (``distance``; 0: side by side). None when the
    size is not known.
    """
    if tile_count < 1:
        return None
    wanted = DEFAULT_OPTIONS.variety
    return {
        "distance": feasible_distance(wanted, tile_count),
        "default": wanted,
        "tiles_for_default": tiles_needed(wanted),
    }


def _spread(names: list[str], count: int) -> list[str]:
    """``count`` names evenly spaced over the list: tiles are named by source photo, so the
    first few would all come from the same one."""
    if len(names) <= count:
        return names
    return [names[(i * len(names)) // count] for i in range(count)]


def visible_library(name: str, *, max_age: float = 0.0) -> LibraryInfo:
    """The library called ``name`` if this client may see it (its own, or shared), else 404."""
    try:
        validate_library_name(name)
        info = services().libraries.info(name, max_age=max_age)
    except InvalidLibraryNameError:
        info = None
    if info is None or not info.visible_to(client_id()):
        raise ApiError(404, "library_not_found", f"there is no tile library called {shown(name)}")
    return info


def _signature(marker: str, secret: str | bytes) -> str:
    key = secret.encode() if isinstance(secret, str) else bytes(secret or b"")
    mac = hmac.new(b"photomosaics library pages\0" + key, marker.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac[:18]).decode()


def library_page_token(marker: str, secret: str | bytes) -> str:
    """The continuation of the library listing: the storage marker, signed with the app's secret
    key, so a token this server did not issue is 400. Signed, not encrypted: the marker may name
    the next container, but which names are taken is no secret (creating one says 409)."""
    return base64.urlsafe_b64encode(marker.encode()).decode().rstrip("=") + "." + _signature(marker, secret)


def _page_marker(token: str) -> str:
    encoded, _, signature = token.partition(".")
    try:
        marker = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (ValueError, UnicodeError):
        marker = ""
    if not marker or not hmac.compare_digest(signature, _signature(marker, current_app.secret_key or b"")):
        raise ApiError(400, "invalid_field", "continuation: not a token of this library listing")
    return marker


@bp.get("/libraries")
def list_libraries() -> Response:
    """One page of this client's libraries and the shared ones: one listing request of ``limit``
    containers, however many are stored; ``continuation`` (null on the last page) asks for the
    next. A page may be short, or empty, and still carry a continuation: other clients'
    libraries take room in the listing and are not shown."""
    limit = int_field(request.args, "limit", low=1, high=MAX_LIBRARY_PAGE, default=DEFAULT_LIBRARY_PAGE)
    token = request.args.get("continuation")
    marker = None if token is None else _page_marker(token)
    me = client_id()
    try:
        page, next_marker = services().libraries.list_page(limit, marker)
    except ValueError as exc:
        raise ApiError(400, "invalid_field", f"continuation: {exc}") from None
    libraries = [info for info in page if info.visible_to(me)]
    continuation = library_page_token(next_marker, current_app.secret_key or b"") if next_marker else None
    return jsonify(
        {"libraries": [_library_json(info, samples=None) for info in libraries], "continuation": continuation}
    )


@bp.get("/libraries/<name>")
def get_library(name: str) -> Response:
    count = int_field(request.args, "samples", low=0, high=200, default=SAMPLES_IN_DETAIL)
    return jsonify(_library_json(visible_library(name), samples=count))


@bp.get("/libraries/<name>/tiles/<path:tile>")
def library_tile(name: str, tile: str) -> Response:
    """One tile image, streamed by the app: library containers are private like the rest, and
    a tile is read only from a library this client may see (``read_tile`` checks the mark)."""
    if not _TILE_BLOB.match(tile):
        raise ApiError(404, "not_found", "no such tile")
    try:
        info = visible_library(name, max_age=TILE_INFO_SECONDS)
        data = services().libraries.read_tile(name, tile, viewer=client_id())
    except (ApiError, InvalidLibraryNameError, LibraryNotFoundError):
        raise ApiError(404, "not_found", "no such tile") from None
    headers = {
        # A shared library's tiles are the same for everyone; a client's own are for it alone.
        "Cache-Control": f"{'public' if info.shared else 'private'}, max-age=86400",
        "Content-Disposition": f'inline; filename="{tile.removeprefix("tiles/")}"',
    }
    return Response(data, mimetype="image/jpeg", headers=headers)


@bp.delete("/libraries/<name>")
def delete_library(name: str) -> tuple[str, int]:
    """Delete one of this client's libraries: queued first (``jobcleanup``, the durable intent),
    then done at once, so the answer is 204 and the name is gone when the client looks again.
    A shared library this client does not own is 403; anyone else's is not found (404)."""
    info = visible_library(name)
    me = client_id()
    if info.owner != me:
        raise ApiError(403, "not_owner", f"library {name!r} is shared by the operator; only its owner can delete it")
    svc = services()
    request_library_cleanup(svc.queues.job_cleanup, me, info.key)
    delete_library_everywhere(svc.libraries, me, info.key)
    log.info("library %s deleted by its owner", name)
    return "", 204


@bp.patch("/libraries/<name>")
def rename_library(name: str) -> Response:
    """Rename one of this client's libraries: ``{"name": "new-name"}``. The name is a record that
    points at the library's container, which never moves (``dal.blobs.library_names``), so jobs
    made with the library, and its old name's links, keep working."""
    body = request.get_json(silent=True)
    new = body.get("name") if isinstance(body, dict) else None
    if not isinstance(new, str) or not new.strip():
        raise ApiError(400, "missing_field", "name is required: the library's new name")
    libraries = services().libraries
    try:
        libraries.container_name(new.strip())
    except InvalidLibraryNameError as exc:
        raise ApiError(400, "invalid_field", str(exc)) from None
    info = visible_library(name)
    if info.owner != client_id():
        raise ApiError(403, "not_owner", f"library {name!r} is shared by the operator; only its owner can rename it")
    try:
        renamed = libraries.rename(name, new.strip())
    except LibraryExistsError:
        raise ApiError(
            409, "library_exists", f"a library called {new.strip()!r} exists already; choose another name"
        ) from None
    log.info("library %s renamed %s by its owner", info.key, renamed.name)
    return jsonify(_library_json(renamed, samples=0))


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
    owner = _admit_library(client_id())  # before the name is looked up or a byte is decoded
    if libraries.exists(name):  # anyone's: names are one namespace (container names)
        _give_back_library(owner)
        raise ApiError(409, "library_exists", f"a library called {name!r} exists already; choose another name")
    # The uploads stay where werkzeug spooled them; each file is read when it is decoded.
    files = [(upload.filename or "upload", upload.stream) for upload in uploads]
    try:
        # new=True: the name is claimed before decoding; a racing create of it is 409 at once.
        created = libraries.create_from(
            name, description, files, owner=client_id(), limits=LIBRARY_LIMITS, guard=DECODES.reserve, new=True
        )
    except LibraryExistsError:
        _give_back_library(owner)
        raise ApiError(
            409, "library_exists", f"a library called {name!r} exists already; choose another name"
        ) from None
    except EmptyLibraryError as exc:
        raise ApiError(422, "no_usable_images", str(exc)) from None
    except SourceLimitError as exc:
        raise ApiError(413, "too_large", str(exc)) from None
    except TileSourceError as exc:
        raise ApiError(422, "invalid_zip", str(exc)) from None
    log.info("library %s created with %d tiles", name, created.tile_count)
    body = {
        "name": name,
        "tile_count": created.tile_count,
        "variety": _variety_json(created.tile_count),
        "version": created.version,
        "url": url_for("api_libraries.get_library", name=name),
        "first_tile": next(iter(libraries.sample_tiles(name, 1)), None),
        "skipped": [{"file": f, "reason": r} for f, r in created.skipped],
    }
    return jsonify(body), 201


def _admit_library(owner: str) -> str:
    """Take a token from the library buckets of this client's address and of the client
    (``dal.admission.address_quotas.library_buckets``), or answer 429 taking nothing.

    A creation refused once decoding has begun keeps its tokens: the work was spent."""
    by_address, by_client = services().library_quotas
    address = client_address()
    try:
        by_address.admit(address)
        try:
            by_client.admit(owner)
        except QuotaExceeded:
            by_address.give_back(address)
            raise
    except QuotaExceeded as exc:
        raise ApiError(429, "quota_exceeded", exc.detail, headers={"Retry-After": str(exc.retry_after)}) from None
    return owner


def _give_back_library(owner: str) -> None:
    by_address, by_client = services().library_quotas
    by_address.give_back(client_address())
    by_client.give_back(owner)


@bp.get("/plan")
def plan() -> Response:
    """The grid and final size for a photo of ``width`` × ``height`` with these settings."""
    limits = settings()
    width = int_field(request.args, "width", low=1, high=1_000_000)
    height = int_field(request.args, "height", low=1, high=1_000_000)
    tile_size = int_field(request.args, "tile_size", low=1, high=64)
    tiles_across = optional_int_field(request.args, "tiles_across", low=1, high=planning.MAX_TILES_ACROSS)
    # Cells of several sizes cut the grid into fewer, aligned parts: the slice range says so.
    cell_sizes, _ = cells_fields(request.args, tile_size=tile_size, max_uses=None, use_every_photo=False)
    grid = planning.plan(
        width=width,
        height=height,
        tile_size=tile_size,
        tiles_across=tiles_across,
        max_output_pixels=limits.max_output_pixels,
    )
    body = planning.describe(grid, limit=limits.max_slices, align=cell_sizes[-1] if cell_sizes else 1)
    body["max_output_pixels"] = limits.max_output_pixels
    body["max_tiles_across"] = planning.largest(
        width=width, height=height, tile_size=tile_size, max_output_pixels=limits.max_output_pixels
    ).tiles_across
    return jsonify(body)
