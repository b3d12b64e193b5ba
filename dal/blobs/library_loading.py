"""Loading tile libraries into a process, once per version.

``LoadedLibraries.load`` keeps each library in memory with the ETag of its index and asks
storage with a conditional GET (``If-None-Match``): one request that answers 304 while the
library is unchanged and carries the new index when it was replaced. A library the indexer fills
has no ``index.zip``: its manifest and segments (``dal.blobs.indexed``) are composed instead,
kept while the manifest's version is unchanged. A job's pinned version is loaded exactly, and the
last few pinned versions used stay in memory beside each library's current one.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError, ResourceNotModifiedError

from dal.blobs.indexed import IndexedLibraries
from dal.blobs.library_info import INDEX_BLOB
from dal.errors import LibraryNotFoundError
from dal.names import unprefixed
from mosaic.library import TileLibrary

_PINNED_KEPT = 4  # pinned versions a process keeps in memory besides each library's current one


@dataclass
class _Cached:
    etag: str
    version: str
    library: TileLibrary
    checked: float = 0.0  # time.monotonic() of the last request that confirmed the ETag


class LoadedLibraries:
    """The libraries this process has loaded, by container, and the pinned versions it used.

    ``blob_service`` gives the Blob service client at each request (a store's storage may be
    swapped, as tests that count requests do); ``prefix`` is the store's container name prefix.
    """

    def __init__(self, blob_service: Callable[[], Any], indexed: IndexedLibraries, *, prefix: str = "") -> None:
        self._blob_service = blob_service
        self._indexed = indexed
        self._prefix = prefix
        self._cache: dict[str, _Cached] = {}
        self._pinned: OrderedDict[tuple[str, str], TileLibrary] = OrderedDict()  # (container, version), LRU
        self._lock = threading.Lock()

    def drop(self, container: str) -> None:
        """Forget the library of ``container`` (deleted)."""
        with self._lock:
            self._cache.pop(container, None)

    def load(self, container: str, *, fresh_for: float = 0.0, version: str | None = None) -> TileLibrary:
        """``LibraryStore.load`` for a library's container (prefixed)."""
        if version is not None:
            return self._load_version(container, version)
        with self._lock:
            cached = self._cache.get(container)
        if cached is not None and fresh_for > 0 and time.monotonic() - cached.checked < fresh_for:
            return cached.library
        checked = time.monotonic()
        blob = self._blob_service().get_blob_client(container, INDEX_BLOB)
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
        indexed = self._indexed
        name = unprefixed(self._prefix, container)
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
        name = unprefixed(self._prefix, container)
        library = self._indexed.compose(name, self._indexed.read_version(name, version))
        with self._lock:
            self._pinned[(container, version)] = library
            while len(self._pinned) > _PINNED_KEPT:
                self._pinned.popitem(last=False)
        return library

    def _not_found(self, container: str, exc: ResourceNotFoundError) -> LibraryNotFoundError:
        name = unprefixed(self._prefix, container)
        if getattr(exc, "error_code", None) == "ContainerNotFound":
            return LibraryNotFoundError(f"tile library {name!r} does not exist")
        return LibraryNotFoundError(  # an uploads library before its first indexed photo, or a damaged one
            f"tile library {name!r} has no tiles yet: no photo of it is indexed (and it has no {INDEX_BLOB})"
        )
