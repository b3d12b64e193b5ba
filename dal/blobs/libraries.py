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

A *new* library (``create_from(..., new=True)``, the web app's path) claims its name before
anything is decoded or stored: creating the container is the claim, a write the service makes
for one caller only (409 for every other, as ``If-None-Match: *`` would). The loser gets
``LibraryExistsError`` having written nothing, so two concurrent creates of one name cannot mix
or delete each other's tiles, and a failed create deletes only the container it claimed.
Replacing (``new=False``, the operator's ``photomosaics library create``) writes into an
existing container as before.

Ownership lives in the same container metadata, written with the mark: ``owner`` (the client
id that created it through the web app; absent for an operator's library) and ``shared``
("true" when an operator marked it for everyone, as the demo library is). A client sees its
own libraries and the shared ones (``LibraryInfo.visible_to``). ``samples`` names a few tiles
spread over the library, so listing libraries with their samples stays one listing request
(``list_containers`` with metadata, 5,000 containers a page) however many libraries there are.
"""

from __future__ import annotations

import builtins  # LibraryStore.list shadows list in the annotations of its later methods
import io
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import numpy as np
from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ResourceNotModifiedError,
)
from azure.storage.blob import ContentSettings
from PIL import Image

from dal.blobs.indexed import IndexedLibraries, Manifest
from dal.blobs.library_names import alias_target, display_name, rename_library
from dal.blobs.store import CONTAINER_NAME_MAX, CONTAINER_NAME_MIN
from dal.config import INTERNAL_CONTAINERS, LIBRARY_METADATA_KEY, StorageClients
from dal.errors import EmptyLibraryError, InvalidLibraryNameError, LibraryExistsError, LibraryNotFoundError
from dal.names import prefixed, unprefixed
from mosaic.errors import NoUsableImageError
from mosaic.library import TileLibrary
from mosaic.sources import Guard, SourceLimits, Upload, build_library_from

INDEX_BLOB = "index.zip"  # TileLibrary.to_bytes(): index.json + lossless PNG atlas pages
TILE_PREFIX = "tiles/"
VERSION_KEY = "version"
TILE_COUNT_KEY = "tilecount"
OWNER_KEY = "owner"
SHARED_KEY = "shared"
SAMPLES_KEY = "samples"
UPLOADS_KEY = "uploads"  # "true": a library filled by direct uploads and the indexer (dal.blobs.staging)
SAMPLES_KEPT = 8  # tile names kept in the metadata for listings
_INFO_SECONDS = 10.0  # how long a process trusts a library's metadata for tile reads
_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*$")
_RESERVED = frozenset(INTERNAL_CONTAINERS)
_UPLOAD_THREADS = 8
_PINNED_KEPT = 4  # pinned versions a process keeps in memory besides each library's current one
_PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")  # kept as is in the mark


def _shown(name: object) -> str:
    """A name as an error repeats it: whole up to twice the longest valid name, else its start."""
    text = str(name)
    if len(text) <= 2 * CONTAINER_NAME_MAX:
        return repr(text)
    return f"{text[:20]!r}... ({len(text):,} characters)"


def validate_library_name(name: str) -> str:
    """Return ``name`` if it is a valid container name, else raise with the rule that failed."""
    if not isinstance(name, str) or not CONTAINER_NAME_MIN <= len(name) <= CONTAINER_NAME_MAX:
        raise InvalidLibraryNameError(
            f"library name {_shown(name)} must be {CONTAINER_NAME_MIN} to {CONTAINER_NAME_MAX} characters long"
        )
    if not _NAME.match(name):
        raise InvalidLibraryNameError(
            f"library name {_shown(name)} may hold only lowercase letters, digits and single hyphens, "
            "and must start and end with a letter or digit"
        )
    if name in _RESERVED:
        raise InvalidLibraryNameError(f"library name {name!r} is reserved for the application's own containers")
    return name


@dataclass(frozen=True)
class LibraryInfo:
    name: str
    description: str
    tile_count: int  # -1 when the container metadata does not say (created elsewhere)
    version: str
    uri: str
    owner: str | None = None  # the creating client; None: an operator's library
    shared: bool = False  # marked by an operator for every client
    samples: tuple[str, ...] = ()  # a few tile blob names, spread over the library
    uploads: bool = False  # filled by direct uploads and the indexer (``open_for_uploads``)
    # The library's container (without the prefix), which never changes: ``name`` is what people
    # see and use, and differs from it once the library was renamed (``dal.blobs.library_names``).
    key: str = ""

    def visible_to(self, client_id: str) -> bool:
        """A client sees its own libraries and the shared ones."""
        return self.shared or (self.owner is not None and self.owner == client_id)


def _spread(names: list[str], count: int) -> list[str]:
    """``count`` names evenly spaced over the list (tiles are named by source photo)."""
    if len(names) <= count:
        return names
    return [names[(i * len(names)) // count] for i in range(count)]


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


def tile_blob_names(names: Iterable[str]) -> list[str]:
    """Safe, unique blob names ``tiles/<name>.jpg`` for the library's tile names, in order."""
    used: set[str] = set()
    blobs = []
    for index, name in enumerate(names):
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", _without_suffix(name)).strip("-.") or "tile"
        candidate = stem[:180]
        if candidate in used:
            candidate = f"{candidate}-{index}"
        used.add(candidate)
        blobs.append(f"{TILE_PREFIX}{candidate}.jpg")
    return blobs


def _without_suffix(name: str) -> str:
    """``name`` without its extension; a name with no file name part (``.``, ``/``) as it is."""
    try:
        return Path(name).with_suffix("").as_posix()
    except ValueError:  # "PosixPath('.') has an empty name"
        return name


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
        self._infos: dict[str, tuple[float, LibraryInfo | None]] = {}  # container -> (monotonic time, info)
        self._pinned: OrderedDict[tuple[str, str], TileLibrary] = OrderedDict()  # (container, version), LRU
        # Libraries the indexer fills: manifest and segments (dal.blobs.indexed), segments cached here.
        self.indexed = IndexedLibraries(self.container_client)
        self._lock = threading.Lock()

    @property
    def _service(self) -> Any:
        return self._storage.blob_service

    @property
    def storage(self) -> StorageClients:
        return self._storage

    def container_client(self, name: str) -> Any:
        """The container client of library ``name`` (prefixed)."""
        return self._service.get_container_client(self.container_name(name))

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

    def claim(self, name: str) -> None:
        """Take ``name`` for a new library: create its container, unmarked (not a library until
        ``create`` marks it). Exactly one caller succeeds; every other gets ``LibraryExistsError``
        with nothing written. The claimant is the only writer; ``release`` undoes a claim."""
        container = self._service.get_container_client(self.container_name(name))
        try:
            container.create_container()
        except ResourceExistsError:
            raise LibraryExistsError(f"a library called {name!r} exists or is being created") from None

    def open_for_uploads(self, name: str, description: str, *, owner: str) -> None:
        """A new, empty library that photos are uploaded into (``dal.blobs.staging``) and the indexer
        fills: the name is claimed (``LibraryExistsError`` if taken) and marked at once, with no
        tiles and no version yet, so its owner sees it while the photos arrive."""
        self.claim(name)
        container = self._service.get_container_client(self.container_name(name))
        try:
            container.set_container_metadata(
                {
                    LIBRARY_METADATA_KEY: quote(description, safe=_PRINTABLE),
                    VERSION_KEY: "",
                    TILE_COUNT_KEY: "0",
                    OWNER_KEY: owner,
                    UPLOADS_KEY: "true",
                }
            )
        except BaseException:
            self.release(name)
            raise
        self._forget(container.container_name)

    def rename(self, name: str, new: str) -> LibraryInfo:
        """Call the library ``name`` (its current name or its key) ``new`` from now on; jobs made
        with it keep working (``dal.blobs.library_names``). ``LibraryNotFoundError``, or
        ``LibraryExistsError`` when ``new`` is taken."""
        info = self.info(name)
        if info is None:
            raise LibraryNotFoundError(f"there is no tile library called {name!r}")
        rename_library(self, info, new)
        renamed = self.info(new)
        assert renamed is not None, f"library {name!r} renamed to {new!r} and not found under it"
        return renamed

    def forget(self, name: str) -> None:
        """Drop what this process remembers of the library ``name``'s metadata (after a change)."""
        self._forget(self.container_name(name))

    def publish(self, name: str, manifest: Manifest) -> None:
        """An indexed library's new version, tile count and samples in its container's metadata
        (what listings and ``info`` read); the manifest itself is the version (``dal.blobs.indexed``)."""
        container = self.container_client(name)
        indexed = manifest.indexed()
        try:
            metadata = dict(container.get_container_properties().metadata)
        except ResourceNotFoundError:
            raise LibraryNotFoundError(f"tile library {name!r} is gone") from None
        metadata[VERSION_KEY] = manifest.version
        metadata[TILE_COUNT_KEY] = str(len(indexed))
        metadata[SAMPLES_KEY] = ",".join(f"{n}.jpg" for n in _spread(indexed, SAMPLES_KEPT))
        container.set_container_metadata(metadata)
        self._forget(container.container_name)

    def pin(self, name: str) -> str | None:
        """The version a job that starts now renders with, kept for it (``IndexedLibraries.pin``), of
        a library the indexer fills; None for one with an ``index.zip`` (replaced whole, loaded as
        it is) or with nothing indexed yet."""
        info = self.info(name, max_age=_INFO_SECONDS)
        if info is None or not info.uploads:
            return None
        return self.indexed.pin(info.key)

    def release(self, name: str) -> None:
        """Give back a claim whose creation failed (best effort: the original error is the answer)."""
        try:
            self._service.delete_container(self.container_name(name))
        except Exception:
            pass

    def create(
        self,
        name: str,
        description: str,
        library: TileLibrary,
        *,
        owner: str | None = None,
        shared: bool = False,
        claimed: bool = False,
    ) -> str:
        """Store ``library`` as ``name``, replacing any library of that name; return its URI.

        ``owner``: the client that creates it (None: an operator); ``shared``: every client sees it;
        ``claimed``: this caller holds the name's claim (``claim``), so the container is its own
        and is deleted if storing fails."""
        container_name = self.container_name(name)
        if len(library.names) == 0:
            raise EmptyLibraryError(f"library {name!r} would hold no tiles")
        container = self._service.get_container_client(container_name)
        blob_names = tile_blob_names(library.names)  # before anything is created: a name cannot fail it half-made
        jpeg = ContentSettings(content_type="image/jpeg")

        def put_tile(i: int) -> None:
            container.upload_blob(blob_names[i], _encode_tile(library.atlas[i]), overwrite=True, content_settings=jpeg)

        created = claimed
        if not claimed:
            try:
                container.create_container()  # unmarked: not a library until the mark below
                created = True
            except ResourceExistsError:
                created = False  # replacing a library: it stays one (the old index) until the new index is in
        try:
            self._fill(container, library, blob_names, put_tile)
        except BaseException:
            if created:  # nothing half-made stays behind: an unmarked container no one would delete
                self.release(name)
            raise
        kept = container.get_container_properties().metadata.items()

        ours = {LIBRARY_METADATA_KEY, OWNER_KEY, SHARED_KEY, SAMPLES_KEY}
        metadata = {k: v for k, v in kept if k.lower() not in ours}
        metadata.update(
            {
                LIBRARY_METADATA_KEY: quote(description, safe=_PRINTABLE),
                VERSION_KEY: library.version,
                TILE_COUNT_KEY: str(len(blob_names)),
                SAMPLES_KEY: ",".join(b.removeprefix(TILE_PREFIX) for b in _spread(blob_names, SAMPLES_KEPT)),
                **({OWNER_KEY: owner} if owner else {}),
                **({SHARED_KEY: "true"} if shared else {}),
            }
        )
        container.set_container_metadata(metadata)  # the mark: now it is a library
        self._forget(container_name)
        return str(container.url)

    @staticmethod
    def _fill(container: Any, library: TileLibrary, blob_names: list[str], put_tile: Any) -> None:
        """Upload the tiles and the index, then delete the tiles no longer part of the library."""
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

    def create_from(
        self,
        name: str,
        description: str,
        source: str | Path | bytes | Iterable[Upload],
        *,
        owner: str | None = None,
        shared: bool = False,
        limits: SourceLimits | None = None,
        guard: Guard | None = None,
        new: bool = False,
    ) -> LibraryCreated:
        """Build a library from a folder, a zip (path or bytes) or uploads and store it.

        ``new``: the name must be free; it is claimed (``claim``) before anything is decoded, so a
        racing creator of the same name gets ``LibraryExistsError`` at once and the loser's work
        and the winner's tiles are never mixed; a creation that fails gives its claim back.

        Uploads are ``(name, bytes or binary file)`` pairs; one that is a zip is read as a zip,
        one file at a time, within ``limits`` and each decode inside ``guard`` (see
        ``mosaic.sources.build_library_from``). Files that are not images are skipped and
        reported in ``LibraryCreated.skipped``; an unreadable source is a ``TileSourceError``,
        one over its limits a ``SourceLimitError``.
        """
        self.container_name(name)  # a bad name fails before any decoding work
        if new:
            self.claim(name)
        try:
            try:
                library, skipped = build_library_from(source, limits=limits, guard=guard)
            except NoUsableImageError as exc:
                raise EmptyLibraryError(f"library {name!r}: {exc}") from None
        except BaseException:
            if new:
                self.release(name)
            raise
        uri = self.create(name, description, library, owner=owner, shared=shared, claimed=new)
        return LibraryCreated(uri=uri, tile_count=len(library.names), version=library.version, skipped=skipped)

    def create_from_images(
        self,
        name: str,
        description: str,
        images: Iterable[tuple[str, bytes]],
        *,
        owner: str | None = None,
        shared: bool = False,
    ) -> str:
        """``create_from`` for ``(name, bytes)`` pairs, returning only the URI."""
        return self.create_from(name, description, images, owner=owner, shared=shared).uri

    def delete(self, name: str) -> bool:
        """Delete the library's container (idempotent); True when there was one to delete."""
        container = self.container_name(name)
        try:
            shown = display_name(self._service.get_container_client(container).get_container_properties().metadata)
        except ResourceNotFoundError:
            shown = ""
        if shown and shown != name:  # its alias (dal.blobs.library_names): the name is free again
            alias = self._service.get_container_client(self.container_name(shown))
            try:
                if alias_target(alias.get_container_properties().metadata) == container:
                    alias.delete_container()
            except ResourceNotFoundError:
                pass
        try:
            self._service.delete_container(container)
            existed = True
        except ResourceNotFoundError:
            existed = False
        with self._lock:
            self._cache.pop(container, None)
        self._forget(container)
        return existed

    def set_shared(self, name: str, shared: bool) -> None:
        """An operator marks a library for every client (or takes the mark off); ``name`` may be
        its current name after a rename (``dal.blobs.library_names``) or its key."""
        info = self.info(name)
        container = self._service.get_container_client(self.container_name(info.key if info else name))
        try:
            metadata = dict(container.get_container_properties().metadata)
        except ResourceNotFoundError:
            raise LibraryNotFoundError(f"tile library {name!r} does not exist") from None
        if _description(metadata) is None:
            raise LibraryNotFoundError(f"tile library {name!r} does not exist")
        metadata = {k: v for k, v in metadata.items() if k.lower() != SHARED_KEY}
        if shared:
            metadata[SHARED_KEY] = "true"
        container.set_container_metadata(metadata)
        self._forget(container.container_name)
        self.forget(name)

    def _forget(self, container: str) -> None:
        with self._lock:
            self._infos.pop(container, None)

    # -- reading ---------------------------------------------------------------------------

    def load(self, uri_or_name: str, *, fresh_for: float = 0.0, version: str | None = None) -> TileLibrary:
        """The library, from memory while its index's ETag is unchanged (one conditional GET).

        ``fresh_for`` > 0: no request at all while the last check is younger than that many
        seconds (a processor's slices of one job, and of the jobs right after, share one check).
        ``version``: exactly that version of a library the indexer fills (a job's pinned version,
        ``IndexedLibraries.pin``), however the library changed since; kept in memory by version.
        """
        container = self._container_from(uri_or_name)
        if version is not None:
            return self._load_version(container, version)
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
            if getattr(exc, "error_code", None) == "ContainerNotFound":
                raise self._not_found(container, exc) from None
            return self._load_indexed(container, checked, exc)
        library = TileLibrary.from_bytes(data)
        entry = _Cached(etag=str(downloader.properties.etag), version=library.version, library=library, checked=checked)
        with self._lock:
            self._cache[container] = entry
        return library

    def _load_indexed(self, container: str, checked: float, exc: ResourceNotFoundError) -> TileLibrary:
        """A library the indexer fills has no index.zip: its manifest and segments (``dal.blobs.indexed``),
        kept while the manifest's version is unchanged."""
        indexed = self.indexed
        name = unprefixed(self.prefix, container)
        manifest, etag = indexed.read(name)
        if etag is None:
            raise self._not_found(container, exc)
        with self._lock:
            cached = self._cache.get(container)
        if cached is not None and cached.version == manifest.version:
            cached.checked = checked
            return cached.library
        library = indexed.compose(name, manifest)
        with self._lock:
            # No index.zip: the conditional GET of the next load is a 404 that comes back here.
            self._cache[container] = _Cached(etag='"none"', version=library.version, library=library, checked=checked)
        return library

    def _load_version(self, container: str, version: str) -> TileLibrary:
        """A pinned version: the library in memory when it is that version, else composed from the
        version's manifest (its segments cached), and kept among the last few versions used."""
        with self._lock:
            cached = self._cache.get(container)
            if cached is not None and cached.version == version:
                return cached.library
            pinned = self._pinned.get((container, version))
            if pinned is not None:
                self._pinned.move_to_end((container, version))
                return pinned
        name = unprefixed(self.prefix, container)
        library = self.indexed.compose(name, self.indexed.read_version(name, version))
        with self._lock:
            self._pinned[(container, version)] = library
            while len(self._pinned) > _PINNED_KEPT:
                self._pinned.popitem(last=False)
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

    def _info_from(self, container: str, metadata: Mapping[str, str | None] | None) -> LibraryInfo | None:
        description = _description(metadata)
        if description is None:
            return None
        values = {k.lower(): v or "" for k, v in (metadata or {}).items()}
        count = values.get(TILE_COUNT_KEY, "")
        samples = tuple(f"{TILE_PREFIX}{n}" for n in values.get(SAMPLES_KEY, "").split(",") if n)
        key = unprefixed(self.prefix, container)
        return LibraryInfo(
            name=display_name(metadata) or key,
            key=key,
            description=description,
            tile_count=int(count) if count.isdigit() else -1,
            version=values.get(VERSION_KEY, ""),
            uri=str(self._service.get_container_client(container).url),
            owner=values.get(OWNER_KEY) or None,
            shared=values.get(SHARED_KEY) == "true",
            samples=samples,
            uploads=values.get(UPLOADS_KEY) == "true",
        )

    def list(self) -> list[LibraryInfo]:
        """Every library of the account (under this store's prefix), by name; one listing request
        per 5,000 containers, whatever the number of libraries (their samples are in the metadata)."""
        libraries = []
        for props in self._service.list_containers(name_starts_with=self.prefix or None, include_metadata=True):
            info = self._info_from(props.name, props.metadata)
            if info is not None:
                libraries.append(info)
        return sorted(libraries, key=lambda info: info.name)

    def list_page(self, size: int, marker: str | None = None) -> tuple[builtins.list[LibraryInfo], str | None]:
        """One page of the account's containers under this store's prefix (``size`` of them, one
        listing request), as the libraries among them, and the service's marker for the next page
        (None: the last). A page may hold fewer libraries than ``size``, or none, and still have a
        next one: containers that are not libraries take room in it. ``marker`` is what the
        previous page returned; the service refuses one it did not issue (``ValueError`` here)."""
        pages = self._service.list_containers(
            name_starts_with=self.prefix or None, include_metadata=True, results_per_page=size
        ).by_page(continuation_token=marker)
        try:
            page = list(next(pages))
        except StopIteration:
            return [], None
        except HttpResponseError as exc:
            if exc.status_code == 400:
                raise ValueError("not a marker of this container listing") from None
            raise
        found = (self._info_from(props.name, props.metadata) for props in page)
        return [info for info in found if info is not None], pages.continuation_token or None

    def info(self, name: str, *, max_age: float = 0.0) -> LibraryInfo | None:
        """One library's description, owner and marks (one request), or None when there is none.

        ``max_age`` > 0: a reading younger than that many seconds is reused (tile reads)."""
        container = self.container_name(name)
        with self._lock:
            cached = self._infos.get(container)
        if cached is not None and max_age > 0 and time.monotonic() - cached[0] < max_age:
            return cached[1]
        info = self._read_info(container, name)
        with self._lock:
            self._infos[container] = (time.monotonic(), info)
        return info

    def _read_info(self, container: str, name: str) -> LibraryInfo | None:
        """The library a container is, or the one an alias of ``name`` points at while that library
        still carries the name (``dal.blobs.library_names``)."""
        try:
            metadata = self._service.get_container_client(container).get_container_properties().metadata
        except ResourceNotFoundError:
            return None
        target = alias_target(metadata) if _description(metadata) is None else ""
        if not target:
            return self._info_from(container, metadata)
        try:
            pointed = self._service.get_container_client(target).get_container_properties().metadata
        except ResourceNotFoundError:
            return None
        info = self._info_from(target, pointed)
        return info if info is not None and info.name == name else None

    def read_tile(self, name: str, blob_name: str, *, viewer: str | None = None) -> bytes:
        """One tile image's JPEG bytes (``blob_name`` as listed by ``sample_tiles``).

        Only from a library (a marked container), and with ``viewer`` only from one that client
        may see: a tile URL cannot read another container or another client's library."""
        info = self.info(name, max_age=_INFO_SECONDS)
        if info is None or (viewer is not None and not info.visible_to(viewer)):
            raise LibraryNotFoundError(f"there is no tile library called {name!r}")
        try:
            return bytes(
                self._service.get_blob_client(self.container_name(info.key), blob_name).download_blob().readall()
            )
        except ResourceNotFoundError:
            raise LibraryNotFoundError(f"tile library {name!r} has no tile {blob_name!r}") from None

    def sample_tiles(self, name: str, count: int) -> builtins.list[str]:
        """Blob names of up to ``count`` tile images of the library, for previews."""
        container = self._service.get_container_client(self.container_name(name))
        names: builtins.list[str] = []
        for blob_name in container.list_blob_names(name_starts_with=TILE_PREFIX):
            if len(names) >= count:
                break
            names.append(blob_name)
        return names
