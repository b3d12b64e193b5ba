"""Tile libraries in blob storage: one container per library, one index blob per version.

What a library is, in one place: a blob container marked with the metadata key
``imagelibrarydescription`` (its value is the description, percent-encoded where it is not
printable ASCII: metadata travels in HTTP headers). ``create`` sets the mark last, together
with the version, once the tiles and the index are stored, so a half-created container is
not a library; ``exists`` and ``list`` read the mark and nothing else. A library holds

- ``tiles/<name>.jpg``: every tile as a 64 px JPEG, for people and the web page to look at;
- ``index.zip``: the engine's ``TileLibrary.to_bytes()`` (signatures and the tile atlas), so
  a worker fetches one blob, not one per tile. The blob's metadata records the library
  ``version`` (a content hash, also inside the index) and ``tilecount``; so does the
  container's metadata, so that listing libraries costs one request.

``LibraryStore.load`` keeps each library in memory with the ETag of its index and asks
storage with a conditional GET (``If-None-Match``): one request that answers 304 while the
library is unchanged and carries the new index when it was replaced. Replacing a library
(``create`` over an existing name) uploads the new tiles and index, then deletes tiles that
are no longer part of it; the index is written in one commit, so a reader sees the old or
the new library, never a mix.
"""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from azure.core import MatchConditions
from azure.core.exceptions import (
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ResourceNotModifiedError,
)
from azure.storage.blob import ContentSettings
import numpy as np
from PIL import Image

from dal.blobs.store import CONTAINER_NAME_MAX, CONTAINER_NAME_MIN
from dal.config import (
    CLAIM_CHECK_CONTAINER,
    LIBRARY_METADATA_KEY,
    WORKFLOW_CONTAINERS,
    StorageClients,
)
from dal.errors import PhotoMosaicsError
from dal.names import prefixed, unprefixed
from mosaic.errors import NoUsableImageError
from mosaic.library import TileLibrary
from mosaic.sources import build_library_from

INDEX_BLOB = "index.zip"  # TileLibrary.to_bytes(): index.json + lossless PNG atlas pages
TILE_PREFIX = "tiles/"
VERSION_KEY = "version"
TILE_COUNT_KEY = "tilecount"
_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*$")
_RESERVED = frozenset((*WORKFLOW_CONTAINERS, CLAIM_CHECK_CONTAINER))
_UPLOAD_THREADS = 8
_PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")  # kept as is in the mark


class LibraryError(PhotoMosaicsError):
    """Root of the tile-library errors."""


class InvalidLibraryNameError(LibraryError, ValueError):
    """A library name that cannot be a container name (or is reserved by the workflow)."""


class LibraryNotFoundError(LibraryError, LookupError):
    """No such library, or a container without an index (not created by this application)."""


class EmptyLibraryError(LibraryError, ValueError):
    """The source held no usable image, so there is nothing to make a library of."""


def validate_library_name(name: str) -> str:
    """Return ``name`` if it is a valid container name, else raise with the rule that failed."""
    if not isinstance(name, str) or not CONTAINER_NAME_MIN <= len(name) <= CONTAINER_NAME_MAX:
        raise InvalidLibraryNameError(
            f"library name {name!r} must be {CONTAINER_NAME_MIN} to {CONTAINER_NAME_MAX} characters long"
        )
    if not _NAME.match(name):
        raise InvalidLibraryNameError(
            f"library name {name!r} may hold only lowercase letters, digits and single hyphens, "
            "and must start and end with a letter or digit"
        )
    if name in _RESERVED:
        raise InvalidLibraryNameError(f"library name {name!r} is reserved for the workflow containers")
    return name


@dataclass(frozen=True)
class LibraryInfo:
    name: str
    description: str
    tile_count: int  # -1 when the container metadata does not say (created elsewhere)
    version: str
    uri: str


@dataclass(frozen=True)
class LibraryCreated:
    uri: str
    tile_count: int
    version: str
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file name, reason)


@dataclass
class _Cached:
    etag: str
    version: str
    library: TileLibrary
    checked: float = 0.0  # time.monotonic() of the last request that confirmed the ETag


def _tile_blob_names(names: Iterable[str]) -> list[str]:
    """Safe, unique blob names ``tiles/<name>.jpg`` for the library's tile names, in order."""
    used: set[str] = set()
    blobs = []
    for index, name in enumerate(names):
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(name).with_suffix("").as_posix()).strip("-.") or "tile"
        candidate = stem[:180]
        if candidate in used:
            candidate = f"{candidate}-{index}"
        used.add(candidate)
        blobs.append(f"{TILE_PREFIX}{candidate}.jpg")
    return blobs


def _description(metadata: Mapping[str, str | None] | None) -> str | None:
    """The library's description from its container's metadata; None: not a library."""
    for key, value in (metadata or {}).items():
        if key.lower() == LIBRARY_METADATA_KEY:
            return unquote(value or "")  # Azurite returns an empty value as None
    return None


def _encode_tile(tile: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(tile).save(out, format="JPEG", quality=90)
    return out.getvalue()


class LibraryStore:
    """Create, list and load tile libraries; ``load`` caches per library version.

    Keep one store per process: the cache lives in the instance. ``prefix`` is prepended to
    container names (test isolation, side-by-side runs); names given to and returned by the
    store are without it.
    """

    def __init__(self, storage: StorageClients, *, prefix: str = "") -> None:
        self._storage = storage
        self.prefix = prefix
        self._cache: dict[str, _Cached] = {}
        self._lock = threading.Lock()

    @property
    def _service(self) -> Any:
        return self._storage.blob_service

    def container_name(self, name: str) -> str:
        """The container of library ``name``; the name prefix leaves ``name`` fewer characters."""
        validate_library_name(name)
        longest = CONTAINER_NAME_MAX - len(self.prefix)
        if len(name) > longest:  # said in the user's terms, not the prefixed container's
            raise InvalidLibraryNameError(
                f"library name {name!r} must be {CONTAINER_NAME_MIN} to {longest} characters long "
                f"(this deployment's name prefix takes {len(self.prefix)} of the {CONTAINER_NAME_MAX})"
            )
        return validate_library_name(prefixed(self.prefix, name))

    def uri(self, name: str) -> str:
        """The library's URI: its container URL, as carried in request messages."""
        return str(self._service.get_container_client(self.container_name(name)).url)

    def _container_from(self, uri_or_name: str) -> str:
        if "://" not in uri_or_name:
            return self.container_name(uri_or_name)
        base = str(self._service.url).rstrip("/") + "/"
        if not uri_or_name.startswith(base):
            raise LibraryNotFoundError(f"library URI {uri_or_name} is not in this storage account ({base})")
        container = uri_or_name[len(base) :].strip("/").split("/", 1)[0].split("?", 1)[0]
        return validate_library_name(container)

    # -- writing ---------------------------------------------------------------------------

    def create(self, name: str, description: str, library: TileLibrary) -> str:
        """Store ``library`` as ``name``, replacing any library of that name; return its URI."""
        container_name = self.container_name(name)
        if len(library.names) == 0:
            raise EmptyLibraryError(f"library {name!r} would hold no tiles")
        container = self._service.get_container_client(container_name)
        try:
            container.create_container()  # unmarked: not a library until the mark below
        except ResourceExistsError:
            pass  # replacing a library: it stays one (the old index) until the new index is in
        blob_names = _tile_blob_names(library.names)
        jpeg = ContentSettings(content_type="image/jpeg")

        def put_tile(i: int) -> None:
            container.upload_blob(blob_names[i], _encode_tile(library.atlas[i]), overwrite=True, content_settings=jpeg)

        with ThreadPoolExecutor(max_workers=_UPLOAD_THREADS) as pool:
            list(pool.map(put_tile, range(len(blob_names))))
            container.upload_blob(
                INDEX_BLOB,
                library.to_bytes(),
                overwrite=True,
                metadata={VERSION_KEY: library.version, TILE_COUNT_KEY: str(len(blob_names))},
                content_settings=ContentSettings(content_type="application/octet-stream"),
            )
            keep = set(blob_names)
            stale = [b for b in container.list_blob_names(name_starts_with=TILE_PREFIX) if b not in keep]
            list(pool.map(container.delete_blob, stale))
        kept = container.get_container_properties().metadata.items()
        metadata = {k: v for k, v in kept if k.lower() != LIBRARY_METADATA_KEY}
        metadata.update({
            LIBRARY_METADATA_KEY: quote(description, safe=_PRINTABLE),
            VERSION_KEY: library.version,
            TILE_COUNT_KEY: str(len(blob_names)),
        })  # fmt: skip
        container.set_container_metadata(metadata)  # the mark: now it is a library
        return str(container.url)

    def create_from(
        self,
        name: str,
        description: str,
        source: str | Path | bytes | Iterable[tuple[str, bytes]],
    ) -> LibraryCreated:
        """Build a library from a folder, a zip (path or bytes) or uploads and store it.

        Uploads are ``(name, bytes)`` pairs; one that is a zip is read as a zip (see
        ``mosaic.sources.build_library_from``). Files that are not images are skipped and
        reported in ``LibraryCreated.skipped``; an unreadable source is a ``TileSourceError``.
        """
        self.container_name(name)  # a bad name fails before any decoding work
        try:
            library, skipped = build_library_from(source)
        except NoUsableImageError as exc:
            raise EmptyLibraryError(f"library {name!r}: {exc}") from None
        uri = self.create(name, description, library)
        return LibraryCreated(uri=uri, tile_count=len(library.names), version=library.version, skipped=skipped)

    def create_from_images(self, name: str, description: str, images: Iterable[tuple[str, bytes]]) -> str:
        """``create_from`` for ``(name, bytes)`` pairs, returning only the URI."""
        return self.create_from(name, description, images).uri

    def delete(self, name: str) -> None:
        container = self.container_name(name)
        try:
            self._service.delete_container(container)
        except ResourceNotFoundError:
            pass
        with self._lock:
            self._cache.pop(container, None)

    # -- reading ---------------------------------------------------------------------------

    def load(self, uri_or_name: str, *, fresh_for: float = 0.0) -> TileLibrary:
        """The library, from memory while its index's ETag is unchanged (one conditional GET).

        ``fresh_for`` > 0: no request at all while the last check is younger than that many
        seconds (a processor's slices of one job, and of the jobs right after, share one check).
        """
        container = self._container_from(uri_or_name)
        with self._lock:
            cached = self._cache.get(container)
        if cached is not None and fresh_for > 0 and time.monotonic() - cached.checked < fresh_for:
            return cached.library
        checked = time.monotonic()
        blob = self._service.get_blob_client(container, INDEX_BLOB)
        try:
            if cached is None:
                downloader = blob.download_blob()
            else:
                downloader = blob.download_blob(etag=cached.etag, match_condition=MatchConditions.IfModified)
            data = downloader.readall()
        except (ResourceNotModifiedError, ResourceModifiedError):
            # If-None-Match matched: unchanged. Azure answers 304; Azurite answers 412.
            assert cached is not None
            cached.checked = checked
            return cached.library
        except ResourceNotFoundError as exc:
            raise self._not_found(container, exc) from None
        library = TileLibrary.from_bytes(data)
        entry = _Cached(etag=str(downloader.properties.etag), version=library.version, library=library, checked=checked)
        with self._lock:
            self._cache[container] = entry
        return library

    def _not_found(self, container: str, exc: ResourceNotFoundError) -> LibraryNotFoundError:
        name = unprefixed(self.prefix, container)
        if getattr(exc, "error_code", None) == "ContainerNotFound":
            return LibraryNotFoundError(f"tile library {name!r} does not exist")
        return LibraryNotFoundError(
            f"tile library {name!r} has no {INDEX_BLOB}: recreate it with `photomosaics library create`"
        )

    def exists(self, uri_or_name: str) -> bool:
        """True for a tile library (a marked container); a half-created one does not count.

        An impossible name raises ``InvalidLibraryNameError``; a URI of another account is no
        library of ours (False).
        """
        try:
            container = self._container_from(uri_or_name)
        except LibraryNotFoundError:
            return False
        try:
            metadata = self._service.get_container_client(container).get_container_properties().metadata
        except ResourceNotFoundError:
            return False
        return _description(metadata) is not None

    def list(self) -> list[LibraryInfo]:
        """Every library of the account (under this store's prefix), by name; one listing request."""
        libraries = []
        for props in self._service.list_containers(name_starts_with=self.prefix or None, include_metadata=True):
            metadata = props.metadata or {}
            description = _description(metadata)
            if description is None:
                continue
            count = metadata.get(TILE_COUNT_KEY, "")
            libraries.append(
                LibraryInfo(
                    name=unprefixed(self.prefix, props.name),
                    description=description,
                    tile_count=int(count) if count.isdigit() else -1,
                    version=metadata.get(VERSION_KEY, ""),
                    uri=str(self._service.get_container_client(props.name).url),
                )
            )
        return sorted(libraries, key=lambda info: info.name)

    def read_tile(self, name: str, blob_name: str) -> bytes:
        """One tile image's JPEG bytes (``blob_name`` as listed by ``sample_tiles``)."""
        try:
            return bytes(self._service.get_blob_client(self.container_name(name), blob_name).download_blob().readall())
        except ResourceNotFoundError:
            raise LibraryNotFoundError(f"tile library {name!r} has no tile {blob_name!r}") from None

    def sample_tiles(self, name: str, count: int) -> list[str]:
        """Blob names of up to ``count`` tile images of the library, for previews."""
        container = self._service.get_container_client(self.container_name(name))
        names = []
        for blob_name in container.list_blob_names(name_starts_with=TILE_PREFIX):
            if len(names) >= count:
                break
            names.append(blob_name)
        return names
