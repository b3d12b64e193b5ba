"""``GET /api/jobs/<id>/photos``: a finished mosaic's library, photo by photo, with thumbnails.

"Find your photo" among thousands: one page (``offset``, ``limit`` up to ``MAX_PAGE``) of the
photos of the library the mosaic was made with, each with its display tile's URL, how many
cells it holds (``uses``) and, for a photo the mosaic left out, the short reason where it is
knowable (``webapp.job_photos``). ``show`` picks all, the used or the left-out photos; ``sort``
orders by name or by use; ``search`` keeps the names the text finds
(``dal.blobs.tile_maps.name_search``). The counts of the whole library come with every page.
Owner-only like the rest of the job API (another client's job is 404); 409 until the mosaic is
finished; an unknown parameter, one sent twice or a value out of its range is 400. The table is
made once per job and library version and kept in memory (``job_photos.TABLES``): a page costs
no storage request while the library is unchanged.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request, url_for

from dal.blobs.library_info import LibraryInfo
from dal.errors import InvalidLibraryNameError, LibraryNotFoundError
from dal.jobs.model import Job
from webapp.api_jobs import own_job
from webapp.api_tiles import MAX_NAME, job_tile_map
from webapp.clients import client_id
from webapp.errors import ApiError
from webapp.job_photos import INFO_SECONDS, SHOWS, SORTS, TABLES, PhotoRow, PhotoTable, read_library
from webapp.services import services
from webapp.validation import int_field

bp = Blueprint("api_job_photos", __name__, url_prefix="/api")

DEFAULT_PAGE = 48
MAX_PAGE = 200
MAX_OFFSET = 10_000_000  # past any library's size: the bound keeps it an int of few digits
_KNOWN = frozenset({"show", "sort", "search", "offset", "limit"})


def _choice(name: str, allowed: tuple[str, ...]) -> str:
    value = request.args.get(name, allowed[0])
    if value not in allowed:
        raise ApiError(400, "invalid_field", f"{name} must be one of {', '.join(allowed)}, got {value[:40]!r}")
    return value


def _library_info(job: Job) -> LibraryInfo | None:
    """The job's library if this client may still see it; None when it is gone (or hidden)."""
    try:
        info = services().libraries.info(job.library, max_age=INFO_SECONDS)
    except InvalidLibraryNameError:
        return None
    return info if info is not None and info.visible_to(client_id()) else None


def photo_table(job: Job) -> PhotoTable:
    """The job's table, made once per job and library version (``job_photos.TABLES``): the map
    is read and decoded only then (409 before the job is done, 404 when it has none)."""
    info = _library_info(job)

    def make() -> PhotoTable:
        tile_map = job_tile_map(job)
        try:
            library = read_library(services().libraries, info) if info is not None else None
        except LibraryNotFoundError:  # its index is gone, or nothing of it is indexed any more
            library = None
        return PhotoTable.build(tile_map, library)

    return TABLES.get((job.request_id, info.version if info is not None else ""), make)


@bp.get("/jobs/<request_id>/photos")
def job_photos(request_id: str) -> Response:
    job = own_job(request_id)
    for name in request.args:
        if name not in _KNOWN:
            raise ApiError(400, "invalid_field", f"{name[:40]!r} is not a parameter of this endpoint")
        if len(request.args.getlist(name)) > 1:
            raise ApiError(400, "repeated_field", f"{name} was sent more than once")
    show, sort = _choice("show", SHOWS), _choice("sort", SORTS)
    search = request.args.get("search", "")
    if len(search) > MAX_NAME:
        raise ApiError(400, "invalid_field", f"search must be at most {MAX_NAME} characters")
    offset = int_field(request.args, "offset", low=0, high=MAX_OFFSET, default=0)
    limit = int_field(request.args, "limit", low=1, high=MAX_PAGE, default=DEFAULT_PAGE)
    table = photo_table(job)
    rows = table.select(show=show, sort=sort, search=search.strip())
    page = rows[offset : offset + limit]
    used = table.used
    return jsonify(
        {
            "library": job.library,
            "library_version": table.library_version or None,
            "current_version": table.current_version or None,
            "library_changed": table.changed,
            "cells": table.cells,
            "photos_total": len(table.rows),
            "used": used,
            "left_out": len(table.rows) - used,
            "show": show,
            "sort": sort,
            "search": search.strip(),
            "count": len(rows),
            "offset": offset,
            "limit": limit,
            "next_offset": offset + limit if offset + limit < len(rows) else None,
            "photos": [_photo_json(job, row) for row in page],
        }
    )


def _photo_json(job: Job, row: PhotoRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "uses": row.uses,
        "thumbnail_url": url_for("api_libraries.library_tile", name=job.library, tile=row.blob) if row.blob else None,
        "reason": row.reason,
        "group_size": row.group_size,
        "in_library": row.in_library,
    }
