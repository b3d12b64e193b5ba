"""The libraries' records: what each library container's metadata says, read and written.

Reading a library's record is one metadata request (``info``), listing them one listing request
per 5,000 containers (``list``, ``list_page``: their samples are in the metadata), and a record
read for tile requests is kept ``max_age`` seconds. Every write of a record forgets what this
process kept of it. A record reached through a renamed library's alias is followed only while
the library still carries that name (``dal.blobs.library_names``). The containers here carry the
store's name prefix; ``dal.blobs.libraries.LibraryStore`` turns library names into them.
"""

from __future__ import annotations

import builtins  # LibraryCatalogue.list shadows list in the annotations of its later methods
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

from dal.blobs.indexed import Manifest
from dal.blobs.library_info import (
    OWNER_KEY,
    SAMPLES_KEPT,
    SAMPLES_KEY,
    SHARED_KEY,
    TILE_COUNT_KEY,
    UPLOADS_KEY,
    VERSION_KEY,
    LibraryInfo,
    encode_description,
    library_description,
    library_info,
    spread,
)
from dal.blobs.library_names import alias_target
from dal.config import LIBRARY_METADATA_KEY
from dal.errors import LibraryNotFoundError
from dal.names import unprefixed


class LibraryCatalogue:
    """Library records by container; ``blob_service`` gives the Blob service client at each request."""

    def __init__(self, blob_service: Callable[[], Any], *, prefix: str = "") -> None:
        self._blob_service = blob_service
        self._prefix = prefix
        self._infos: dict[str, tuple[float, LibraryInfo | None]] = {}  # container -> (monotonic time, info)
        self._lock = threading.Lock()

    def _metadata(self, container: str) -> Any:
        return self._blob_service().get_container_client(container).get_container_properties().metadata

    def record(self, container: str, metadata: Mapping[str, str | None] | None) -> LibraryInfo | None:
        """The library that ``container``'s metadata describes, or None when it is not marked as one."""
        url = str(self._blob_service().get_container_client(container).url)
        return library_info(metadata, key=unprefixed(self._prefix, container), uri=url)

    def forget(self, container: str) -> None:
        """Drop what this process remembers of a container's record (after a change)."""
        with self._lock:
            self._infos.pop(container, None)

    # -- reading ---------------------------------------------------------------------------

    def exists(self, container: str) -> bool:
        """True for a marked container; a half-created library does not count."""
        try:
            return library_description(self._metadata(container)) is not None
        except ResourceNotFoundError:
            return False

    def list(self) -> list[LibraryInfo]:
        """``LibraryStore.list``: every library under the prefix, by name."""
        libraries = []
        for props in self._blob_service().list_containers(name_starts_with=self._prefix or None, include_metadata=True):
            info = self.record(props.name, props.metadata)
            if info is not None:
                libraries.append(info)
        return sorted(libraries, key=lambda info: info.name)

    def list_page(self, size: int, marker: str | None = None) -> tuple[builtins.list[LibraryInfo], str | None]:
        """``LibraryStore.list_page``: the libraries among one page of containers, and the next marker."""
        pages = (
            self._blob_service()
            .list_containers(name_starts_with=self._prefix or None, include_metadata=True, results_per_page=size)
            .by_page(continuation_token=marker)
        )
        try:
            page = list(next(pages))
        except StopIteration:
            return [], None
        except HttpResponseError as exc:
            if exc.status_code == 400:
                raise ValueError("not a marker of this container listing") from None
            raise
        found = (self.record(props.name, props.metadata) for props in page)
        return [info for info in found if info is not None], pages.continuation_token or None

    def info(self, container: str, name: str, *, max_age: float = 0.0) -> LibraryInfo | None:
        """``LibraryStore.info`` of the library ``name`` whose container is ``container``."""
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
            metadata = self._metadata(container)
        except ResourceNotFoundError:
            return None
        target = alias_target(metadata) if library_description(metadata) is None else ""
        if not target:
            return self.record(container, metadata)
        try:
            pointed = self._metadata(target)
        except ResourceNotFoundError:
            return None
        info = self.record(target, pointed)
        return info if info is not None and info.name == name else None

    # -- writing ---------------------------------------------------------------------------

    def mark_for_uploads(self, container: str, description: str, *, owner: str) -> None:
        """Mark a claimed container as a library filled by uploads, with no tiles and no version yet."""
        self._blob_service().get_container_client(container).set_container_metadata(
            {
                LIBRARY_METADATA_KEY: encode_description(description),
                VERSION_KEY: "",
                TILE_COUNT_KEY: "0",
                OWNER_KEY: owner,
                UPLOADS_KEY: "true",
            }
        )
        self.forget(container)

    def publish(self, container: str, name: str, manifest: Manifest) -> None:
        """``LibraryStore.publish``: an indexed library's new version, tile count and samples."""
        client = self._blob_service().get_container_client(container)
        indexed = manifest.indexed()
        try:
            metadata = dict(client.get_container_properties().metadata)
        except ResourceNotFoundError:
            raise LibraryNotFoundError(f"tile library {name!r} is gone") from None
        metadata[VERSION_KEY] = manifest.version
        metadata[TILE_COUNT_KEY] = str(len(indexed))
        metadata[SAMPLES_KEY] = ",".join(f"{n}.jpg" for n in spread(indexed, SAMPLES_KEPT))
        client.set_container_metadata(metadata)
        self.forget(container)

    def set_shared(self, container: str, name: str, shared: bool) -> None:
        """``LibraryStore.set_shared`` on the library's own container (its key's)."""
        client = self._blob_service().get_container_client(container)
        try:
            metadata = dict(client.get_container_properties().metadata)
        except ResourceNotFoundError:
            raise LibraryNotFoundError(f"tile library {name!r} does not exist") from None
        if library_description(metadata) is None:
            raise LibraryNotFoundError(f"tile library {name!r} does not exist")
        metadata = {k: v for k, v in metadata.items() if k.lower() != SHARED_KEY}
        if shared:
            metadata[SHARED_KEY] = "true"
        client.set_container_metadata(metadata)
        self.forget(container)
