"""A library's photos: the page a person looks through, and taking photos out.

``GET /api/libraries/<name>/photos`` answers the indexing progress and one page of the photos,
with their total, filtered by ``state`` and by a ``q`` in the name: one listing of the staged
photos (5,000 names a request) and one read of the manifest, whatever the page. The
``continuation`` is the last name of the page (photos are sorted by name), so a page never
repeats or skips a photo while others are added.

``DELETE /api/libraries/<name>/photos/<photo>`` removes one photo and ``POST
/api/libraries/<name>/remove-photos`` up to ``MAX_REMOVE`` (``dal.blobs.staging.LibraryStaging.remove``):
the library publishes a version without them; a job that started before renders with its
own version. Only the owner; repeating a removal answers the same (a tombstone remembers it).
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, Response, jsonify, request, url_for

from dal.blobs.indexed import Manifest
from dal.blobs.library_info import LibraryInfo
from webapp.api_library_uploads import library_info, owned_uploads_library
from webapp.clients import client_id
from webapp.errors import ApiError
from webapp.services import services
from webapp.validation import int_field, shown

bp = Blueprint("api_library_photos", __name__, url_prefix="/api")

MAX_REMOVE = 1000
STATES = ("uploaded", "indexed", "skipped")
MAX_QUERY = 160
_PHOTO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,159}")


def _visible(name: str) -> LibraryInfo:
    info = library_info(name)
    if info is None or not info.visible_to(client_id()):
        raise ApiError(404, "library_not_found", f"there is no tile library called {shown(name)}")
    return info


def _states(staged: dict[str, int], manifest: Manifest) -> dict[str, tuple[str, int]]:
    """Every photo of the library, its state and size: staged ones by their outcome ("uploaded"
    until indexed at this size), and indexed ones whose staged blob is gone (a removal under way)."""
    states = {}
    for name, size in staged.items():
        outcome = manifest.photos.get(name)
        fresh = outcome is None or outcome.size != size or outcome.state == "removed"
        states[name] = ("uploaded" if fresh or outcome is None else outcome.state, size)
    for name, outcome in manifest.photos.items():
        if name not in states and outcome.state == "indexed":
            states[name] = ("indexed", outcome.size)
    return states


@bp.get("/libraries/<name>/photos")
def library_photos(name: str) -> Response:
    """Progress, counts and one page of the photos; see the module docstring."""
    info = _visible(name)
    limit = int_field(request.args, "limit", low=1, high=1000, default=100)
    after = request.args.get("continuation")
    if after is not None and not _PHOTO.fullmatch(after):  # present: a name of the previous page
        raise ApiError(400, "invalid_field", "continuation: not a marker of this listing")
    state = request.args.get("state") or None
    if state is not None and state not in STATES:
        raise ApiError(400, "invalid_field", f"state must be one of {', '.join(STATES)}, got {shown(state)}")
    query = (request.args.get("q") or "").strip().lower()
    if len(query) > MAX_QUERY:
        raise ApiError(400, "invalid_field", f"q: at most {MAX_QUERY} characters")
    svc = services()
    manifest, _ = svc.libraries.indexed.read(info.key)
    staged = svc.staging.staged(info.key)
    states = _states(staged, manifest)
    counts = {s: 0 for s in STATES}
    for value, _size in states.values():
        counts[value] += 1
    chosen = sorted(n for n, (s, _) in states.items() if (state is None or s == state) and query in n.lower())
    start = next((i for i, n in enumerate(chosen) if n > after), len(chosen)) if after is not None else 0
    page = chosen[start : start + limit]
    more = start + limit < len(chosen)
    group_of = {n: i for i, group in enumerate(manifest.groups) for n in group}
    skipped = [
        p for p in manifest.photos.values() if p.state == "skipped" and states.get(p.name, ("",))[0] == "skipped"
    ]
    reasons: dict[str, int] = {}
    for p in skipped:
        reasons[p.reason] = reasons.get(p.reason, 0) + 1
    body = {
        "library": info.name,
        "version": manifest.version or None,
        "total": len(chosen),
        "counts": counts,
        "progress": {
            "uploaded": len(staged),  # photos staged
            "pending": counts["uploaded"],  # ... the indexer has not handled yet: 0 when ready
            "indexed": counts["indexed"],
            "skipped": counts["skipped"],
            "skipped_reasons": reasons,
            "groups": len(manifest.groups),
        },
        "groups": manifest.groups[:100],
        "photos": [_photo(info, n, *states[n], manifest, group_of) for n in page],
        "continuation": page[-1] if more else None,
    }
    return jsonify(body)


def _photo(
    info: LibraryInfo, name: str, state: str, size: int, manifest: Manifest, group_of: dict[str, int]
) -> dict[str, Any]:
    outcome = manifest.photos.get(name)
    return {
        "name": name,
        "size": size,
        "state": state,
        "reason": outcome.reason if state == "skipped" and outcome else None,
        "group": group_of.get(name),
        "tile_url": url_for("api_libraries.library_tile", name=info.name, tile=f"tiles/{name}.jpg")
        if state == "indexed"
        else None,
    }


def _removable(info: LibraryInfo, names: list[str]) -> tuple[list[str], list[str]]:
    """(photos of the library, names it has no photo of): staged, recorded, or removed before
    (a repeated removal is the same answer)."""
    svc = services()
    manifest, _ = svc.libraries.indexed.read(info.key)
    staged = svc.staging.staged(info.key) if len(names) > 1 else {}
    if len(names) == 1 and names[0] not in manifest.photos:
        size = svc.staging.staged_size(info.key, names[0])  # one HEAD, not a listing
        staged = {} if size is None else {names[0]: size}
    found = [n for n in names if n in staged or n in manifest.photos]
    return found, [n for n in names if n not in found]


def _photo_name(value: object, where: str) -> str:
    if not isinstance(value, str) or not _PHOTO.fullmatch(value) or ".." in value:
        raise ApiError(
            400, "invalid_field", f"{where}: {shown(value)} is not a photo name of a library ([A-Za-z0-9._-], 1..160)"
        )
    return value


@bp.delete("/libraries/<name>/photos/<photo>")
def remove_photo(name: str, photo: str) -> tuple[str, int]:
    """Remove one photo: 204; 404 when the library has no such photo."""
    info = owned_uploads_library(name, library_info(name))
    found, missing = _removable(info, [_photo_name(photo, "photo")])
    if missing:
        raise ApiError(404, "photo_not_found", f"library {info.name!r} has no photo {photo!r}")
    services().staging.remove(info.key, found)
    return "", 204


@bp.post("/libraries/<name>/remove-photos")
def remove_photos(name: str) -> Response:
    """Remove up to ``MAX_REMOVE`` photos: the ones removed, the names the library has no photo
    of, and the version published without them."""
    body = request.get_json(silent=True)
    photos = body.get("photos") if isinstance(body, dict) else None
    if not isinstance(photos, list) or not photos:
        raise ApiError(400, "missing_field", "photos is required: a list of photo names")
    if len(photos) > MAX_REMOVE:
        raise ApiError(400, "invalid_field", f"photos: at most {MAX_REMOVE} per request, got {len(photos):,}")
    names = sorted({_photo_name(p, f"photos[{i}]") for i, p in enumerate(photos)})
    info = owned_uploads_library(name, library_info(name))
    found, missing = _removable(info, names)
    version = services().staging.remove(info.key, found).version if found else None
    return jsonify({"library": info.name, "removed": found, "not_found": missing, "version": version or None})
