"""Photos uploaded straight to a library's container with a valet key (a write-only SAS).

The valet-key pattern: the web app never receives a photo. For each file a client wants to
upload it hands back a URL of one blob under the library's staging prefix, ``staging/<safe
name>``, signed with the account key for **create and write only** (no read, list or delete)
and valid for ``SAS_SECONDS``; the client writes the photo there itself (Put Blob, or Put Block
and Put Block List for a large or resumed one) and asks for indexing. A block blob is visible
only once committed, so a staged blob that exists with the declared size is a complete upload:
``grant`` says ``uploaded`` for it and the client skips it. One listing of the staging prefix
per grant (5,000 names a page) answers that for the whole request.

Staged names are flat (``safe_photo_name``): ``[A-Za-z0-9._-]``, at most ``MAX_SAFE_NAME``
characters, no ``/``. A name already of that form is kept as is; any other (a folder path,
spaces, accents) is cleaned and given a short hash of the original, so two different names
never meet, and the same name always gives the same blob: a repeated upload is the same blob.
The staged name is the photo's name everywhere after (messages, the index, the API).

The URLs name the account's Blob endpoint as the roles reach it, unless the browser reaches it
elsewhere (docker compose: ``azurite:10000`` inside, the host-published ``localhost:10000``
outside): then ``public_endpoint`` (``PHOTOMOSAICS_PUBLIC_BLOB_ENDPOINT``) replaces it. The
SAS signs the account, container and blob, not the host, so the same signature works there.

What a SAS cannot bound is the size actually written: the declared sizes count against the
client's upload quota (``dal.admission.address_quotas.upload_bytes_bucket``), and the indexer
reads a staged blob's real size before downloading it.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobSasPermissions, ContentSettings, generate_blob_sas

from dal.blobs.indexed import Manifest
from dal.blobs.libraries import LibraryStore
from dal.blobs.library_info import TILE_PREFIX
from dal.blobs.listing import names_and_sizes
from dal.blobs.names import ascii_fold
from dal.config import StorageClients
from dal.errors import StorageConfigurationError

__all__ = [
    "MAX_SAFE_NAME",
    "SAS_SECONDS",
    "STAGING_PREFIX",
    "LibraryStaging",
    "StagedBytes",
    "UploadGrant",
    "public_blob_endpoint",
    "safe_photo_name",
]

STAGING_PREFIX = "staging/"
SAS_SECONDS = 15 * 60
SAS_CLOCK_SKEW = 5 * 60  # the SAS starts this much earlier: a client clock a little behind still works
MAX_SAFE_NAME = 160
_DELETE_THREADS = 8
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # how Python decodes a file name's non-UTF-8 bytes


def safe_photo_name(name: str) -> str:
    """The flat staged name of an uploaded file's name (see the module docstring); ValueError
    for a name with nothing in it, or with bytes that are not UTF-8 (no name to show or keep)."""
    if _LONE_SURROGATE.search(str(name)):
        raise ValueError(f"file name {str(name)[:80]!r} is not valid UTF-8: rename the file")
    text = unicodedata.normalize("NFC", str(name)).replace("\\", "/")
    parts = [p for p in PurePosixPath(text).parts if p not in ("/", ".", "..")]
    if not parts or not "".join(parts).strip():
        raise ValueError(f"file name {str(name)[:80]!r} names no file")
    if len(parts) == 1 and len(text) <= MAX_SAFE_NAME and _SAFE.match(text) and ".." not in text:
        return text
    suffix = PurePosixPath(parts[-1]).suffix.lower()
    suffix = suffix if re.fullmatch(r"\.[a-z0-9]{1,8}", suffix) else ""
    stem = "-".join(parts)
    stem = stem[: len(stem) - len(suffix)] if suffix and stem.lower().endswith(suffix) else stem
    ascii_stem = ascii_fold(stem)
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", ascii_stem).strip("-._") or "photo"
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    room = MAX_SAFE_NAME - len(suffix) - len(digest) - 1
    return f"{cleaned[:room].rstrip('-._') or 'photo'}-{digest}{suffix}"


def public_blob_endpoint(endpoint: str, storage: StorageClients) -> str:
    """``endpoint`` checked as the public Blob endpoint of ``storage``'s account
    (``http://localhost:10000/devstoreaccount1`` for a path-style one such as Azurite,
    ``https://<account>.blob...`` or a custom domain); without its trailing slash. ValueError for
    anything else, or for an endpoint of another account."""
    account = storage.account_name
    url = urlsplit(endpoint.strip())
    if url.scheme not in ("http", "https") or not url.netloc or url.query or url.fragment:
        raise ValueError(f"the public Blob endpoint is http(s)://host[:port][/account], got {endpoint!r}")
    path = url.path.strip("/")
    if path and path != account:
        raise ValueError(f"the public Blob endpoint {endpoint!r} names another account than {account!r}")
    if not path and urlsplit(storage.blob_service.url).path.strip("/"):
        raise ValueError(f"the account's URLs are path-style: name the account, {endpoint.rstrip('/')}/{account}")
    return f"{url.scheme}://{url.netloc}" + (f"/{path}" if path else "")


@dataclass(frozen=True)
class UploadGrant:
    """One file of a grant: its name as given, its staged blob, the URL to write it to."""

    name: str
    blob: str  # "staging/<safe name>"
    url: str  # the blob's URL with a create+write SAS
    uploaded: bool  # the staged blob exists with the declared size: skip it


@dataclass(frozen=True)
class StagedBytes:
    size: int
    data: bytes | None  # None: over the reader's limit, not read


class LibraryStaging:
    """Upload grants and the staged photos of libraries made for uploads."""

    def __init__(self, libraries: LibraryStore, *, public_endpoint: str = "") -> None:
        self.libraries = libraries
        self._storage = libraries.storage
        try:
            self._public = public_blob_endpoint(public_endpoint, self._storage) if public_endpoint else ""
        except ValueError as exc:
            raise StorageConfigurationError(f"PHOTOMOSAICS_PUBLIC_BLOB_ENDPOINT: {exc}") from None

    def _public_url(self, url: str) -> str:
        """``url`` of the roles' Blob endpoint as the browser reaches it."""
        inside = self._storage.blob_service.url.rstrip("/")
        if self._public and url.startswith(inside + "/"):
            return self._public + url[len(inside) :]
        return url

    def _container(self, library: str) -> Any:
        return self.libraries.container_client(library)

    def staged(self, library: str) -> dict[str, int]:
        """Every staged photo of the library: safe name -> size (one listing per 5,000)."""
        container = self._container(library)
        return {name.removeprefix(STAGING_PREFIX): size for name, size in names_and_sizes(container, STAGING_PREFIX)}

    def grant(
        self,
        library: str,
        files: Sequence[tuple[str, int]],
        *,
        seconds: int = SAS_SECONDS,
        now: datetime | None = None,
        staged: dict[str, int] | None = None,
    ) -> tuple[list[UploadGrant], datetime]:
        """A create+write SAS URL per ``(name, size)`` and when they expire.

        ``staged``: the library's staged photos if the caller listed them already (``staged``)."""
        key = self._storage.account_key
        if not key:
            raise StorageConfigurationError(
                "direct uploads need the storage account's key to sign upload URLs: the connection string has none"
            )
        start = (now or datetime.now(UTC)).replace(microsecond=0)
        expires = start + timedelta(seconds=seconds)
        present = self.staged(library) if staged is None else staged
        container = self._container(library)
        grants = []
        for name, size in files:
            safe = safe_photo_name(name)
            blob = STAGING_PREFIX + safe
            sas = generate_blob_sas(
                account_name=self._storage.account_name,
                container_name=container.container_name,
                blob_name=blob,
                account_key=key,
                permission=BlobSasPermissions(create=True, write=True),
                expiry=expires,
                start=start - timedelta(seconds=SAS_CLOCK_SKEW),
            )
            url = f"{self._public_url(container.get_blob_client(blob).url)}?{sas}"
            grants.append(UploadGrant(name=name, blob=blob, url=url, uploaded=present.get(safe) == size))
        return grants, expires

    def staged_size(self, library: str, name: str) -> int | None:
        """The staged photo's size (one HEAD), None when it is not there."""
        try:
            return int(self._container(library).get_blob_client(STAGING_PREFIX + name).get_blob_properties().size)
        except ResourceNotFoundError:
            return None

    def read_staged(self, library: str, name: str, *, max_bytes: int | None = None) -> StagedBytes | None:
        """The staged photo's size and bytes (its bytes None when over ``max_bytes``), None when it
        is gone. One GET: its answer carries the size, so no HEAD goes first; a blob over the
        limit (a client may write more than it declared) stops after that first GET's range."""
        blob = self._container(library).get_blob_client(STAGING_PREFIX + name)
        try:
            download = blob.download_blob()
            if max_bytes is not None and download.size > max_bytes:
                return StagedBytes(download.size, None)
            return StagedBytes(download.size, download.readall())
        except ResourceNotFoundError:
            return None

    def put_tile(self, library: str, name: str, jpeg: bytes) -> None:
        """The display tile of an indexed photo, ``tiles/<name>.jpg`` (overwritten: idempotent)."""
        self._container(library).upload_blob(
            f"{TILE_PREFIX}{name}.jpg",
            jpeg,
            overwrite=True,
            content_settings=ContentSettings(content_type="image/jpeg"),
        )

    def remove(self, library: str, names: Sequence[str]) -> Manifest:
        """Take photos out of the library (its owner's request); the version published without them.

        In this order, so that a retry converges and a racing index cannot bring a photo back:
        the staged blobs go (a later index request finds nothing to index), then the manifest
        records a tombstone per photo and publishes the new version (``IndexedLibraries.remove``),
        then the display tiles go, and what no job can need any more is collected
        (``IndexedLibraries.collect``: segments stay for older versions until then)."""
        self._delete_each(library, [STAGING_PREFIX + n for n in names])
        manifest = self.libraries.indexed.remove(library, names)
        self.libraries.publish(library, manifest)
        self._delete_each(library, [f"{TILE_PREFIX}{n}.jpg" for n in names])
        self.libraries.indexed.collect(library)
        return manifest

    def _delete_each(self, library: str, blobs: list[str]) -> None:
        container = self._container(library)

        def delete(blob: str) -> None:
            try:
                container.delete_blob(blob)
            except ResourceNotFoundError:
                pass  # gone already: a retried removal

        with ThreadPoolExecutor(max_workers=_DELETE_THREADS) as pool:
            list(pool.map(delete, blobs))

    def delete_staged(self, library: str, names: Iterable[str]) -> None:
        """Remove staged photos (best effort, missing ones are fine)."""
        container = self._container(library)
        for name in names:
            try:
                container.delete_blob(STAGING_PREFIX + name)
            except Exception:
                pass
