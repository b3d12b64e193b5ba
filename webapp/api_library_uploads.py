"""Libraries at a person's scale: photos go straight to storage (valet key), a worker indexes them.

``POST /api/libraries/<name>/uploads`` takes the list of files a client wants to upload (names
and sizes, never their bytes), creates the library if it does not exist yet (owned by the
client's cookie, under the library-creation quotas), and answers per file a URL of one blob of
the library's staging prefix with a create+write SAS (``dal.blobs.staging``): the client writes
the photo there itself. A file already staged with the same size is ``uploaded: true`` (skip
it). The declared bytes still to upload count against the client's hourly upload quota
(``PHOTOMOSAICS_UPLOAD_BYTES_PER_HOUR``). The web process never receives or decodes a photo.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from flask import Blueprint, Response, jsonify, request

from dal.blobs.library_info import LibraryInfo
from dal.blobs.staging import safe_photo_name
from dal.errors import InvalidLibraryNameError, LibraryExistsError, QuotaExceeded
from dal.queues.message_fields import MAX_PHOTOS_PER_INDEX_REQUEST
from dal.queues.messages import IndexRequestMessage
from mosaic.sources import MAX_FILE_BYTES
from webapp.api_libraries import _admit_library, _give_back_library
from webapp.clients import client_id
from webapp.errors import ApiError
from webapp.services import services
from webapp.validation import shown

log = logging.getLogger(__name__)
bp = Blueprint("api_library_uploads", __name__, url_prefix="/api")

MAX_FILES_PER_REQUEST = 500
# Photos an index request names that are looked up one HEAD each; more are found by a listing.
MAX_PHOTOS_BY_HEAD = 64
MAX_FILE_NAME = 1024


def _json_body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_body", "the body must be a JSON object (Content-Type: application/json)")
    return body


def _files(body: dict[str, Any]) -> list[tuple[str, int]]:
    files = body.get("files")
    if not isinstance(files, list) or not files:
        raise ApiError(400, "missing_field", "files is required: a list of {name, size}")
    if len(files) > MAX_FILES_PER_REQUEST:
        raise ApiError(400, "invalid_field", f"files: at most {MAX_FILES_PER_REQUEST} per request, got {len(files):,}")
    out = []
    for i, item in enumerate(files):
        if not isinstance(item, dict) or set(item) - {"name", "size"}:
            raise ApiError(400, "invalid_field", f"files[{i}] must be an object {{name, size}}")
        name, size = item.get("name"), item.get("size")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_FILE_NAME:
            raise ApiError(400, "invalid_field", f"files[{i}].name must be text of 1..{MAX_FILE_NAME} characters")
        if type(size) is not int or size < 0:
            raise ApiError(400, "invalid_field", f"files[{i}].size must be an integer >= 0, got {shown(size)}")
        out.append((name, size))
    return out


def owned_uploads_library(name: str, info: LibraryInfo | None) -> LibraryInfo:
    """The library if this client owns it and it takes uploads; else the error to answer."""
    me = client_id()
    if info is None or not info.visible_to(me):
        raise ApiError(404, "library_not_found", f"there is no tile library called {shown(name)}")
    if info.owner != me:
        raise ApiError(
            403, "not_owner", f"library {name!r} is shared by the operator; only its owner changes its photos"
        )
    if not info.uploads:
        raise ApiError(
            409,
            "not_uploadable",
            f"library {name!r} was built in one request and takes no uploads; create a new library for them",
        )
    return info


def _open(name: str, description: str) -> tuple[LibraryInfo, bool]:
    """The client's library for uploads, created now (under the creation quotas) if it does not exist."""
    libraries = services().libraries
    try:
        libraries.container_name(name)
    except InvalidLibraryNameError as exc:
        raise ApiError(400, "invalid_field", str(exc)) from None
    info = libraries.info(name)
    if info is not None:
        return owned_uploads_library(name, info), False
    owner = _admit_library(client_id())
    try:
        libraries.open_for_uploads(name, description, owner=owner)
    except LibraryExistsError:  # a racing request took the name: the same client's parallel batch is fine
        _give_back_library(owner)
        info = libraries.info(name)
        if info is None:  # claimed, not marked yet: someone else's creation in progress
            raise ApiError(409, "library_exists", f"a library called {name!r} is being created") from None
        return owned_uploads_library(name, info), False
    log.info("library %s opened for uploads", name)
    return owned_uploads_library(name, libraries.info(name)), True


@bp.post("/libraries/<name>/uploads")
def grant_uploads(name: str) -> tuple[Response, int]:
    """Upload URLs for up to 500 files; see the module docstring."""
    body = _json_body()
    files = _files(body)
    description = body.get("description", name)
    if not isinstance(description, str) or len(description.strip()) > 200:
        raise ApiError(400, "invalid_field", "description must be text of at most 200 characters")
    wanted: list[tuple[str, int]] = []
    refused: list[dict[str, str]] = []
    seen: set[str] = set()
    for file_name, size in files:
        try:
            safe = safe_photo_name(file_name)
        except ValueError as exc:
            refused.append({"name": file_name, "reason": str(exc)})
            continue
        if size == 0:
            refused.append({"name": file_name, "reason": "zero bytes: an empty file is not a photo"})
        elif size > MAX_FILE_BYTES:
            refused.append({"name": file_name, "reason": f"larger than {MAX_FILE_BYTES // 2**20} MiB"})
        elif safe in seen:
            refused.append({"name": file_name, "reason": "the same file is named twice in this request"})
        else:
            seen.add(safe)
            wanted.append((file_name, size))
    info, created = _open(name, description.strip() or name)
    svc = services()
    staged = svc.staging.staged(info.key)
    declared = sum(size for file_name, size in wanted if staged.get(safe_photo_name(file_name)) != size)
    if declared:
        try:
            svc.upload_quota.admit(client_id(), amount=declared)
        except QuotaExceeded as exc:
            raise ApiError(429, "quota_exceeded", exc.detail, headers={"Retry-After": str(exc.retry_after)}) from None
    grants, expires = svc.staging.grant(info.key, wanted, staged=staged)
    body_out = {
        "library": info.name,
        "created": created,
        "uploads": [{"name": g.name, "blob": g.blob, "url": g.url, "uploaded": g.uploaded} for g in grants],
        "refused": refused,
        "expires_at": expires.isoformat().replace("+00:00", "Z"),
    }
    return jsonify(body_out), 201 if created else 200


def _index_requests(info: LibraryInfo, pending: list[str]) -> list[IndexRequestMessage]:
    """One IndexRequest per 32 photos, sorted; each request id derives from the library and its
    photos, so asking twice for the same photos sends the same requests (and handling is idempotent)."""
    svc = services()
    queue = svc.queues.index_request
    messages = []
    for start in range(0, len(pending), MAX_PHOTOS_PER_INDEX_REQUEST):
        batch = tuple(pending[start : start + MAX_PHOTOS_PER_INDEX_REQUEST])
        request_id = str(uuid.uuid5(uuid.NAMESPACE_URL, info.uri + "\n" + "\n".join(batch)))
        messages.append(
            IndexRequestMessage(
                queue_uri=queue.url, client_id=client_id(), request_id=request_id, library_uri=info.uri, photos=batch
            )
        )
    return messages


def _asked_photos() -> set[str] | None:
    """The staged names of the photos a client asks for (``{"photos": [file names]}``: the files it
    has just uploaded, so that indexing starts while the rest upload), or None (no body): all."""
    if not request.get_data(cache=True):
        return None
    body = _json_body()
    if "photos" not in body:  # an object without the field: as no body
        return None
    photos = body["photos"]
    if not isinstance(photos, list) or len(photos) > MAX_FILES_PER_REQUEST:
        raise ApiError(400, "invalid_field", f"photos must be a list of at most {MAX_FILES_PER_REQUEST} file names")
    asked = set()
    for i, photo in enumerate(photos):
        if not isinstance(photo, str) or not 0 < len(photo) <= MAX_FILE_NAME:
            raise ApiError(400, "invalid_field", f"photos[{i}] must be text of 1..{MAX_FILE_NAME} characters")
        try:
            asked.add(safe_photo_name(photo))
        except ValueError:
            continue  # names no file: nothing is staged under it (its grant refused it)
    return asked


@bp.post("/libraries/<name>/index")
def index_library(name: str) -> tuple[Response, int]:
    """Ask the indexer for the staged photos not indexed yet (or re-uploaded with another size),
    all of them or the ones named (``_asked_photos``): 202 with the counts (``staged``: of the
    library, or of the photos named); the work is queued on ``indexrequest``, one message per 32
    photos."""
    asked = _asked_photos()
    svc = services()
    info = owned_uploads_library(name, library_info(name))
    if asked is None or len(asked) > MAX_PHOTOS_BY_HEAD:
        staged = svc.staging.staged(info.key)
    else:  # a client's last few uploads: one HEAD each, not a listing of the whole library each time
        staged = {n: size for n in sorted(asked) if (size := svc.staging.staged_size(info.key, n)) is not None}
    manifest, _ = svc.libraries.indexed.read(info.key)
    pending = sorted(
        n
        for n, size in staged.items()
        if (asked is None or n in asked)
        and ((p := manifest.photos.get(n)) is None or p.size != size or p.state == "removed")
    )
    again = [n for n in pending if (p := manifest.photos.get(n)) is not None and p.state == "removed"]
    if again:  # removed, then uploaded again: the tombstones go, so that the new index is recorded
        svc.libraries.indexed.revive(info.key, again)
    messages = _index_requests(info, pending)
    for start in range(0, len(messages), 32):
        svc.send(messages[start : start + 32])
    if asked is not None:
        staged = {n: size for n, size in staged.items() if n in asked}
    body = {"library": info.name, "staged": len(staged), "queued": len(pending), "requests": len(messages)}
    return jsonify(body), 202


def library_info(name: str) -> LibraryInfo | None:
    try:
        return services().libraries.info(name)
    except InvalidLibraryNameError:
        return None
