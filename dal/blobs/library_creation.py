"""Storing a tile library: its tiles, its index, then the mark that makes the container a library.

A library holds ``tiles/<name>.jpg`` (every tile as a 64 px JPEG, for people and the web page
to look at) and ``index.zip`` (the engine's ``TileLibrary.to_bytes()``: signatures and the tile
atlas, so a worker fetches one blob, not one per tile), whose metadata records the ``version``
and ``tilecount``, as the container's does. ``store_library`` sets the mark last, together with
the version, once the tiles and the index are stored, so a half-created container is not a
library. Replacing a library uploads the new tiles and index, then deletes tiles that are no
longer part of it; the index is written in one commit, so a reader sees the old or the new
library, never a mix.

A *new* library (``build_and_store(..., new=True)``, the web app's path) claims its name before
anything is decoded or stored (``LibraryStore.claim``), so two concurrent creates of one name
cannot mix or delete each other's tiles, and a failed create deletes only the container it claimed.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import ContentSettings
from PIL import Image

from dal.blobs.library_info import (
    INDEX_BLOB,
    OWNER_KEY,
    SAMPLES_KEPT,
    SAMPLES_KEY,
    SHARED_KEY,
    TILE_COUNT_KEY,
    TILE_PREFIX,
    VERSION_KEY,
    encode_description,
    spread,
)
from dal.config import LIBRARY_METADATA_KEY
from dal.errors import EmptyLibraryError
from mosaic.errors import NoUsableImageError
from mosaic.library import TileLibrary
from mosaic.sources import Guard, SourceLimits, Upload, build_library_from

_UPLOAD_THREADS = 8


class Claims(Protocol):
    """What storing a library needs of ``dal.blobs.libraries.LibraryStore`` (which imports this module)."""

    def container_name(self, name: str) -> str: ...
    def container_client(self, name: str) -> Any: ...
    def claim(self, name: str) -> None: ...
    def release(self, name: str) -> None: ...
    def forget(self, name: str) -> None: ...


@dataclass(frozen=True)
class LibraryCreated:
    uri: str
    tile_count: int
    version: str
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file name, reason)


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


def _encode_tile(tile: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(tile).save(out, format="JPEG", quality=90)
    return out.getvalue()


def store_library(
    store: Claims,
    name: str,
    description: str,
    library: TileLibrary,
    *,
    owner: str | None = None,
    shared: bool = False,
    claimed: bool = False,
) -> str:
    """``LibraryStore.create``: store ``library`` as ``name``, replacing any library of that name;
    return its URI (see the module docstring)."""
    store.container_name(name)
    if len(library.names) == 0:
        raise EmptyLibraryError(f"library {name!r} would hold no tiles")
    container = store.container_client(name)
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
        _fill(container, library, blob_names, put_tile)
    except BaseException:
        if created:  # nothing half-made stays behind: an unmarked container no one would delete
            store.release(name)
        raise
    kept = container.get_container_properties().metadata.items()

    ours = {LIBRARY_METADATA_KEY, OWNER_KEY, SHARED_KEY, SAMPLES_KEY}
    metadata = {k: v for k, v in kept if k.lower() not in ours}
    metadata.update(
        {
            LIBRARY_METADATA_KEY: encode_description(description),
            VERSION_KEY: library.version,
            TILE_COUNT_KEY: str(len(blob_names)),
            SAMPLES_KEY: ",".join(b.removeprefix(TILE_PREFIX) for b in spread(blob_names, SAMPLES_KEPT)),
            **({OWNER_KEY: owner} if owner else {}),
            **({SHARED_KEY: "true"} if shared else {}),
        }
    )
    container.set_container_metadata(metadata)  # the mark: now it is a library
    store.forget(name)
    return str(container.url)


def _fill(container: Any, library: TileLibrary, blob_names: list[str], put_tile: Callable[[int], None]) -> None:
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


def build_and_store(
    store: Claims,
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
    """``LibraryStore.create_from``: build a library from a folder, a zip (path or bytes) or uploads
    and store it.

    ``new``: the name must be free; it is claimed (``claim``) before anything is decoded, so a
    racing creator of the same name gets ``LibraryExistsError`` at once and the loser's work
    and the winner's tiles are never mixed; a creation that fails gives its claim back.

    Uploads are ``(name, bytes or binary file)`` pairs; one that is a zip is read as a zip,
    one file at a time, within ``limits`` and each decode inside ``guard`` (see
    ``mosaic.sources.build_library_from``). Files that are not images are skipped and
    reported in ``LibraryCreated.skipped``; an unreadable source is a ``TileSourceError``,
    one over its limits a ``SourceLimitError``.
    """
    store.container_name(name)  # a bad name fails before any decoding work
    if new:
        store.claim(name)
    try:
        try:
            library, skipped = build_library_from(source, limits=limits, guard=guard)
        except NoUsableImageError as exc:
            raise EmptyLibraryError(f"library {name!r}: {exc}") from None
    except BaseException:
        if new:
            store.release(name)
        raise
    uri = store_library(store, name, description, library, owner=owner, shared=shared, claimed=new)
    return LibraryCreated(uri=uri, tile_count=len(library.names), version=library.version, skipped=skipped)
