"""Tile libraries in blob storage: ``LibraryStore``, one container per library.

The store is the one door to libraries: it names their containers (the name prefix, the
name rules), claims names, lists and reads what libraries say about themselves, and loads them.
What a library is lives beside it, a room per concern:

- ``dal.blobs.library_info``: the mark and the metadata keys, ``LibraryInfo``, the name rules;
- ``dal.blobs.library_catalogue``: the libraries' records (``info``, ``list``), read and written;
- ``dal.blobs.library_creation``: storing the tiles and the index, then the mark;
- ``dal.blobs.library_loading``: each library in memory per version, one conditional GET;
- ``dal.blobs.library_names``: renaming (the name is a record, the container never moves);
- ``dal.blobs.indexed``: libraries the indexer fills, as a manifest of segments.

A *new* library claims its name before anything is decoded or stored: creating the container
is the claim, a write the service makes for one caller only (409 for every other, as
``If-None-Match: *`` would). The loser gets ``LibraryExistsError`` having written nothing.
Listing libraries with their samples stays one listing request (``list_containers`` with
metadata, 5,000 containers a page) however many libraries there are.
"""

from __future__ import annotations

import builtins  # LibraryStore.list shadows list in the annotations of its later methods
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from dal.blobs.indexed import IndexedLibraries, Manifest
from dal.blobs.library_catalogue import LibraryCatalogue
from dal.blobs.library_creation import LibraryCreated, build_and_store, store_library
from dal.blobs.library_info import (
    TILE_PREFIX,
    LibraryInfo,
    validate_library_name,
)
from dal.blobs.library_loading import LoadedLibraries
from dal.blobs.library_names import drop_alias, rename_library
from dal.blobs.store import CONTAINER_NAME_MAX, CONTAINER_NAME_MIN
from dal.config import StorageClients
from dal.errors import InvalidLibraryNameError, LibraryExistsError, LibraryNotFoundError
from dal.names import prefixed
from mosaic.library import TileLibrary
from mosaic.sources import Guard, SourceLimits, Upload

_INFO_SECONDS = 10.0  # how long a process trusts a library's metadata for tile reads


class LibraryStore:
    """Create, list and load tile libraries; ``load`` caches per library version.

    Keep one store per process: the cache lives in the instance. ``prefix`` is prepended to
    container names (test isolation, side-by-side runs); names given to and returned by the
    store are without it.
    """

    def __init__(self, storage: StorageClients, *, prefix: str = "") -> None:
        self._storage = storage
        self.prefix = prefix
        # Libraries the indexer fills: manifest and segments (dal.blobs.indexed), segments cached here.
        self.indexed = IndexedLibraries(self.container_client)
        self.loaded = LoadedLibraries(lambda: self._service, self.indexed, prefix=prefix)
        self.catalogue = LibraryCatalogue(lambda: self._service, prefix=prefix)

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
        if not self.in_account(uri_or_name):
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
        try:
            self.catalogue.mark_for_uploads(self.container_name(name), description, owner=owner)
        except BaseException:
            self.release(name)
            raise

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
        self.catalogue.forget(self.container_name(name))

    def publish(self, name: str, manifest: Manifest) -> None:
        """An indexed library's new version, tile count and samples in its container's metadata
        (what listings and ``info`` read); the manifest itself is the version (``dal.blobs.indexed``)."""
        self.catalogue.publish(self.container_name(name), name, manifest)

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
        """Store ``library`` as ``name``, replacing any library of that name; return its URI
        (``dal.blobs.library_creation``).

        ``owner``: the client that creates it (None: an operator); ``shared``: every client sees it;
        ``claimed``: this caller holds the name's claim (``claim``), so the container is its own
        and is deleted if storing fails."""
        return store_library(self, name, description, library, owner=owner, shared=shared, claimed=claimed)

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
        """Build a library from a folder, a zip (path or bytes) or uploads and store it; ``new``:
        the name must be free and is claimed first (``dal.blobs.library_creation.build_and_store``)."""
        return build_and_store(
            self, name, description, source, owner=owner, shared=shared, limits=limits, guard=guard, new=new
        )

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
        drop_alias(self, name)  # a renamed library's name is free again
        try:
            self._service.delete_container(container)
            existed = True
        except ResourceNotFoundError:
            existed = False
        self.loaded.drop(container)
        self.catalogue.forget(container)
        return existed

    def set_shared(self, name: str, shared: bool) -> None:
        """An operator marks a library for every client (or takes the mark off); ``name`` may be
        its current name after a rename (``dal.blobs.library_names``) or its key."""
        info = self.info(name)
        self.catalogue.set_shared(self.container_name(info.key if info else name), name, shared)
        self.forget(name)

    # -- reading ---------------------------------------------------------------------------

    def load(self, uri_or_name: str, *, fresh_for: float = 0.0, version: str | None = None) -> TileLibrary:
        """The library, from memory while its index's ETag is unchanged (one conditional GET,
        ``dal.blobs.library_loading``).

        ``fresh_for`` > 0: no request at all while the last check is younger than that many
        seconds (a processor's slices of one job, and of the jobs right after, share one check).
        ``version``: exactly that version of a library the indexer fills (a job's pinned version,
        ``IndexedLibraries.pin``), however the library changed since; kept in memory by version.
        """
        return self.loaded.load(self._container_from(uri_or_name), fresh_for=fresh_for, version=version)

    def in_account(self, uri_or_name: str) -> bool:
        """Whether ``uri_or_name`` is at this account's address (a bare name always is)."""
        return "://" not in uri_or_name or uri_or_name.startswith(str(self._service.url).rstrip("/") + "/")

    def exists(self, uri_or_name: str) -> bool:
        """True for a tile library (a marked container); a half-created one does not count.

        An impossible name raises ``InvalidLibraryNameError``; a URI of another account is no
        library of ours (False).
        """
        return self.in_account(uri_or_name) and self.catalogue.exists(self._container_from(uri_or_name))

    def list(self) -> list[LibraryInfo]:
        """Every library of the account (under this store's prefix), by name; one listing request
        per 5,000 containers, whatever the number of libraries (their samples are in the metadata)."""
        return self.catalogue.list()

    def list_page(self, size: int, marker: str | None = None) -> tuple[builtins.list[LibraryInfo], str | None]:
        """One page of the account's containers under this store's prefix (``size`` of them, one
        listing request), as the libraries among them, and the service's marker for the next page
        (None: the last). A page may hold fewer libraries than ``size``, or none, and still have a
        next one: containers that are not libraries take room in it. ``marker`` is what the
        previous page returned; the service refuses one it did not issue (``ValueError`` here)."""
        return self.catalogue.list_page(size, marker)

    def info(self, name: str, *, max_age: float = 0.0) -> LibraryInfo | None:
        """One library's description, owner and marks (one request), or None when there is none.

        ``max_age`` > 0: a reading younger than that many seconds is reused (tile reads)."""
        return self.catalogue.info(self.container_name(name), name, max_age=max_age)

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
