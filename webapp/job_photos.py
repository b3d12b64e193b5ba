"""A finished mosaic's photos: every photo of its library with how many cells it holds, and for
each photo the mosaic left out the short reason, where it is knowable ("why isn't my photo in it?").

Built from two things already stored: the job's tile map (``dal.blobs.tile_maps``: which photo is
in which cell, and the library version it was rendered with) and the library's own list of its
photos (``read_library``): an uploads library's manifest (its indexed photos, the skipped ones
with why, the near-duplicate groups), or an operator's library's index (its names). A job's
table is made once and kept in one small LRU (``TABLES``) under the job and the library's
current version, so paging and searching a library of thousands costs no storage request while
the library is unchanged (``LibraryStore.info`` is itself trusted for ``INFO_SECONDS``).

Reasons (``PhotoTable.build``), most specific first: a photo the indexer skipped says why; a
photo of a near-duplicate group whose other photo was used names it; when the library has
changed since the mosaic was made, the photo may simply be newer; otherwise other photos
matched the colours better (and a grid with fewer cells than the library has photos says so).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from dal.blobs.libraries import LibraryStore
from dal.blobs.library_creation import tile_blob_names
from dal.blobs.library_info import TILE_PREFIX, LibraryInfo
from dal.blobs.tile_maps import TileMap, name_search, search_key

__all__ = [
    "INFO_SECONDS",
    "SHOWS",
    "SORTS",
    "TABLES",
    "LibraryPhotos",
    "PhotoRow",
    "PhotoTable",
    "TableCache",
    "read_library",
]

INFO_SECONDS = 10.0  # a library's version (its container's metadata) is trusted this long
TABLES_KEPT = 32  # jobs' tables kept per process (a table of 5,000 photos is about 1 MB)


@dataclass(frozen=True)
class LibraryPhotos:
    """What a library says of its photos: the indexed ones (their display tiles' blobs beside),
    the ones the indexer skipped with why, and near-duplicate groups (empty when it has none)."""

    version: str
    names: tuple[str, ...]
    blobs: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()


def read_library(libraries: LibraryStore, info: LibraryInfo) -> LibraryPhotos:
    """The photos of the library's current version: one manifest read for an uploads library
    (its display tiles are ``tiles/<staged name>.jpg``, ``dal.blobs.staging``), the cached
    index (``LibraryStore.load``) for an operator's (``tile_blob_names``)."""
    if info.uploads:
        manifest, _ = libraries.indexed.read(info.key)  # its container: the same after a rename
        names = tuple(manifest.indexed())
        skipped = tuple((n, p.reason) for n, p in sorted(manifest.photos.items()) if p.state == "skipped")
        return LibraryPhotos(
            version=manifest.version,
            names=names,
            blobs=tuple(f"{TILE_PREFIX}{n}.jpg" for n in names),
            skipped=skipped,
            groups=tuple(tuple(g) for g in manifest.groups),
        )
    library = libraries.load(info.key, fresh_for=INFO_SECONDS)
    # Groups, when the engine's library keeps them; none before (read as it is, degrade to none).
    groups = tuple(tuple(g) for g in getattr(library, "groups", ()) or ())
    return LibraryPhotos(
        version=library.version, names=tuple(library.names), blobs=tuple(tile_blob_names(library.names)), groups=groups
    )


@dataclass(frozen=True)
class PhotoRow:
    name: str
    uses: int  # cells holding it, mirrored or not
    blob: str | None  # its display tile in the library; None for a photo the indexer skipped
    reason: str | None  # why the mosaic left it out; None when it is used
    group_size: int = 1  # photos in its near-duplicate group (1: none)
    in_library: bool = True  # False: used by the mosaic, removed from the library since


SORTS = ("name", "most_used", "least_used")
SHOWS = ("all", "used", "left_out")


@dataclass(frozen=True)
class PhotoTable:
    """Every photo of one mosaic's library, by name, with its uses and reason; ``cells`` in all."""

    rows: tuple[PhotoRow, ...]
    cells: int
    library_version: str  # the map's ("" unknown)
    current_version: str  # the library's now ("" when it is gone)
    _keys: tuple[str, ...] = field(default=(), repr=False)  # each name's ``search_key``
    _by_uses: tuple[int, ...] = field(default=(), repr=False)

    @property
    def used(self) -> int:
        return sum(1 for r in self.rows if r.uses)

    @property
    def changed(self) -> bool | None:
        """Whether the library changed since the mosaic was made; None when the map does not say."""
        if not self.library_version or not self.current_version:
            return None
        return self.library_version != self.current_version

    @classmethod
    def build(cls, tile_map: TileMap, library: LibraryPhotos | None) -> PhotoTable:
        """The table of ``tile_map``'s mosaic and its library's photos (None: the library is gone,
        only the photos the map names are listed)."""
        uses = tile_map.uses()
        map_blobs = dict(tile_map.tiles)
        known = library or LibraryPhotos(version="", names=(), blobs=())
        current = known.version
        changed = bool(tile_map.library_version and current and tile_map.library_version != current)
        group_of = {name: group for group in known.groups for name in group}
        cells = tile_map.rows * tile_map.columns
        photos = len(known.names) - sum(len(g) - 1 for g in known.groups)  # a group counts once
        rows: dict[str, PhotoRow] = {}
        for name, blob in zip(known.names, known.blobs, strict=True):
            group = group_of.get(name, (name,))
            reason = (
                None if uses.get(name) else _left_out(name, group, uses, changed=changed, cells=cells, photos=photos)
            )
            rows[name] = PhotoRow(name, uses.get(name, 0), blob, reason, len(group))
        for name, reason in known.skipped:
            rows.setdefault(name, PhotoRow(name, 0, None, f"not indexed: {reason}"))
        for name, count in uses.items():  # used, and no longer in the library (or the library is gone)
            if name not in rows:
                rows[name] = PhotoRow(name, count, map_blobs[name], None, in_library=False)
        ordered = tuple(rows[n] for n in sorted(rows))
        by_uses = tuple(sorted(range(len(ordered)), key=lambda i: (-ordered[i].uses, ordered[i].name)))
        return cls(
            rows=ordered,
            cells=cells,
            library_version=tile_map.library_version,
            current_version=current,
            _keys=tuple(search_key(r.name) for r in ordered),
            _by_uses=by_uses,
        )

    def select(self, *, show: str = "all", sort: str = "name", search: str = "") -> list[PhotoRow]:
        """The rows asked for, in order: ``show`` one of ``SHOWS``, ``sort`` one of ``SORTS``,
        ``search`` text that finds the name (``name_search``: any case, accents and separators folded)."""
        if sort == "name":
            order: Iterable[int] = range(len(self.rows))
        elif sort == "most_used":
            order = self._by_uses
        else:
            order = reversed(self._by_uses)
        finds = name_search(search)
        keep: Callable[[PhotoRow], bool] = {
            "all": lambda r: True,
            "used": lambda r: r.uses > 0,
            "left_out": lambda r: r.uses == 0,
        }[show]
        rows = self.rows
        return [rows[i] for i in order if (not search or finds(rows[i].name, self._keys[i])) and keep(rows[i])]


def _left_out(name: str, group: Sequence[str], uses: dict[str, int], *, changed: bool, cells: int, photos: int) -> str:
    used = [g for g in group if g != name and uses.get(g)]
    if used:
        chosen = min(used, key=lambda g: (-uses[g], g))  # the group's most used photo
        return f"its near-duplicate group's photo {chosen} was used"
    if changed:
        return "not in any cell: the library has changed since this mosaic was made (it may be newer)"
    if cells < photos:
        return (
            f"not in any cell: the mosaic has {cells:,} cells for {photos:,} photos, "
            "and other photos matched the colours better"
        )
    return "not in any cell: other photos matched the colours better"


class TableCache:
    """A small LRU of jobs' tables, made once per key however many ask at once."""

    def __init__(self, kept: int = TABLES_KEPT) -> None:
        self.kept = kept
        self._items: OrderedDict[tuple[str, str], PhotoTable] = OrderedDict()
        self._lock = threading.Lock()
        self._making: dict[tuple[str, str], threading.Lock] = {}
        self.made = 0

    def get(self, key: tuple[str, str], make: Callable[[], PhotoTable]) -> PhotoTable:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            making = self._making.setdefault(key, threading.Lock())
        with making:  # one maker per key; the others wait and find its table
            with self._lock:
                if key in self._items:
                    return self._items[key]
            try:
                table = make()
            finally:
                with self._lock:
                    self._making.pop(key, None)
            with self._lock:
                self.made += 1
                self._items[key] = table
                while len(self._items) > self.kept:
                    self._items.popitem(last=False)
        return table


TABLES = TableCache()
