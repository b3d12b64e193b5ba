"""What a tile library's container says about it: the mark, the metadata keys, the name rules.

A library is a blob container marked with the metadata key ``imagelibrarydescription`` (its
value is the description, percent-encoded where it is not printable ASCII: metadata travels in
HTTP headers). Beside the mark, the container's metadata carries the library's ``version``,
``tilecount``, ``owner`` (the client id that created it through the web app; absent for an
operator's library), ``shared`` ("true" when an operator marked it for everyone, as the demo
library is), ``samples`` (a few tiles spread over the library, so listing libraries with their
samples stays one listing request) and ``uploads`` (filled by direct uploads and the indexer).
``library_info`` reads all of it into a ``LibraryInfo``; a client sees its own libraries and the
shared ones (``LibraryInfo.visible_to``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from dal.blobs.library_names import display_name
from dal.blobs.store import CONTAINER_NAME_MAX, CONTAINER_NAME_MIN
from dal.config import INTERNAL_CONTAINERS, LIBRARY_METADATA_KEY
from dal.errors import InvalidLibraryNameError

INDEX_BLOB = "index.zip"  # TileLibrary.to_bytes(): index.json + lossless PNG atlas pages
TILE_PREFIX = "tiles/"
VERSION_KEY = "version"
TILE_COUNT_KEY = "tilecount"
OWNER_KEY = "owner"
SHARED_KEY = "shared"
SAMPLES_KEY = "samples"
UPLOADS_KEY = "uploads"  # "true": a library filled by direct uploads and the indexer (dal.blobs.staging)
SAMPLES_KEPT = 8  # tile names kept in the metadata for listings
_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*$")
_RESERVED = frozenset(INTERNAL_CONTAINERS)
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


def spread(names: list[str], count: int) -> list[str]:
    """``count`` names evenly spaced over the list (tiles are named by source photo)."""
    if len(names) <= count:
        return names
    return [names[(i * len(names)) // count] for i in range(count)]


def encode_description(description: str) -> str:
    """The mark's value: the description, percent-encoded where it is not printable ASCII."""
    return quote(description, safe=_PRINTABLE)


def library_description(metadata: Mapping[str, str | None] | None) -> str | None:
    """The library's description from its container's metadata; None: not a library."""
    for key, value in (metadata or {}).items():
        if key.lower() == LIBRARY_METADATA_KEY:
            return unquote(value or "")  # Azurite returns an empty value as None
    return None


def library_info(metadata: Mapping[str, str | None] | None, *, key: str, uri: str) -> LibraryInfo | None:
    """The library a container's metadata describes (``key``: the container without the prefix,
    ``uri``: its URL), or None when the container is not marked as one."""
    description = library_description(metadata)
    if description is None:
        return None
    values = {k.lower(): v or "" for k, v in (metadata or {}).items()}
    count = values.get(TILE_COUNT_KEY, "")
    samples = tuple(f"{TILE_PREFIX}{n}" for n in values.get(SAMPLES_KEY, "").split(",") if n)
    return LibraryInfo(
        name=display_name(metadata) or key,
        key=key,
        description=description,
        tile_count=int(count) if count.isdigit() else -1,
        version=values.get(VERSION_KEY, ""),
        uri=uri,
        owner=values.get(OWNER_KEY) or None,
        shared=values.get(SHARED_KEY) == "true",
        samples=samples,
        uploads=values.get(UPLOADS_KEY) == "true",
    )
