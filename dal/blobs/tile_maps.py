"""Which library photo is in which cell of a mosaic: a job's tile map, stored beside its outputs.

A print mosaic is bought to find one's own photo in it, so every job keeps its placement:
for each cell (column, row) the library tile's name and whether it was placed mirrored.
A processor stores its band's map beside its rendered slice
(``sliceresponse/<request_id>/<seq>.tiles.gz``); a one-slice job's processor writes the job's
map (``imageoutput/<request_id>.tiles.gz``) directly. The bands are joined only when someone
asks (``load_job_map``): a job pays one small blob per slice for its map, not a read and a
write more at its stitch. The web app answers "which photo is at this cell" and gives the
whole map as CSV (``GET /api/jobs/<id>/tiles``); ``photomosaics render --tile-map`` writes
the same CSV.

The blob: gzip (no timestamp, so the same placement gives the same bytes) of one JSON
header line, ``{"format": "photomosaics-tile-map", "version": 1, "library", "first_row",
"rows", "columns", "dtype", "tiles": [[name, tile blob], ...]}`` (and ``library_version``, the
version of the library the band was rendered with, in maps made since it was kept: the job
page tells the photos a mosaic left out from those added later), a newline, then ``rows ×
columns`` little-endian integers of ``dtype`` (``<u2``, or ``<i4`` past 32,767 distinct tiles),
row by row: ``2 × k + mirrored`` with ``k`` an index into ``tiles`` (each tile used, once).
A mosaic of cells of several sizes (``mosaic.cells``) is version 2: the header says
``"sized": true`` and the cells are followed by ``rows × columns`` bytes, the size (in base
cells) of the cell that covers each base cell; every base cell of a large cell holds its photo,
and the cell's rectangle is ``size`` base cells from the multiple of ``size`` at or below it
(``cell_at``). A single-size map stays version 1, byte for byte, and both versions are read.
A varied placement is close to random, so compression gains little: level 1, and none past
``_COMPRESS_CELLS`` (a 40 MP mosaic of 1 px tiles is 40 M cells). A 12 MP mosaic of 8 px tiles
(190,000 cells) is 0.3 MB and costs about 0.03 s to make.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dal.blobs.names import ascii_fold, slice_tile_map_name, tile_map_name
from dal.config import IMAGE_OUTPUT_CONTAINER, SLICE_RESPONSE_CONTAINER
from dal.errors import BlobMissingError, TileMapFormatError

__all__ = [
    "CSV_HEADER",
    "SIZED_CSV_HEADER",
    "TILE_MAP_CONTENT_TYPE",
    "TileMap",
    "join_bands",
    "load_job_map",
]

TILE_MAP_CONTENT_TYPE = "application/gzip"
CSV_HEADER = "col,row,tile,mirrored"
SIZED_CSV_HEADER = "col,row,tile,mirrored,size"  # one line per cell, at its top-left base cell
_FORMAT = "photomosaics-tile-map"
_VERSION = 1
_SIZED_VERSION = 2
_MAX_HEADER = 64 << 20  # bytes before the first newline: the tile names of a large library
_COMPRESS_CELLS = 1 << 21  # larger maps are stored (gzip level 0): seconds of deflate for a few %
_DTYPES = ("<u2", "<i4")


_SEPARATORS = re.compile(r"[^a-z0-9.]+")


def search_key(text: str) -> str:
    """``text`` as a photo's name is searched: accents folded, any case, and every run of
    spaces, punctuation, ``_`` or ``-`` one ``-``. An uploaded photo's name is written that way
    (``dal.blobs.staging.safe_photo_name``: ``Wedding photo #12.jpg`` is stored as
    ``Wedding-photo-12-<hash>.jpg``), so a person finds it by the name they know."""
    return _SEPARATORS.sub("-", ascii_fold(text).casefold()).strip("-.")


def name_search(text: str) -> Callable[[str, str | None], bool]:
    """Whether a search for ``text`` finds a photo, given its name and (when known) the name's
    ``search_key``: the key contains the text's key, or, for a text with nothing a key keeps
    (a name in another script, a lone symbol), the name contains the text in any case."""
    wanted = search_key(text)
    folded = text.casefold()

    def finds(name: str, key: str | None) -> bool:
        if not wanted:
            return folded in name.casefold()
        return wanted in (search_key(name) if key is None else key)

    return finds


@dataclass(frozen=True, eq=False)
class TileMap:
    """The placement of a band of cells (the whole mosaic when ``first_row`` is 0 and it has
    every row). ``cells``: ``(rows, columns) int32``, ``2 × k + mirrored``, ``k`` indexing
    ``tiles`` (``(name, tile blob)`` pairs). ``sizes``: ``(rows, columns) uint8``, the size
    of the cell covering each base cell, or None: every cell one base cell."""

    library: str
    first_row: int
    tiles: tuple[tuple[str, str], ...]
    cells: np.ndarray
    library_version: str = ""  # "" when the map does not say (made before it was kept, or bands of two versions)
    sizes: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.sizes is not None and not (self.sizes > 1).any():
            object.__setattr__(self, "sizes", None)  # one size: the version 1 map, byte for byte

    @property
    def rows(self) -> int:
        return int(self.cells.shape[0])

    @property
    def columns(self) -> int:
        return int(self.cells.shape[1])

    @classmethod
    def from_choice(
        cls,
        choice: np.ndarray,
        *,
        names: Sequence[str],
        blobs: Sequence[str],
        library: str,
        first_row: int = 0,
        library_version: str = "",
        sizes: np.ndarray | None = None,
    ) -> TileMap:
        """The map of an engine placement: ``choice`` ``(rows, columns)`` indexes the library's
        candidates, ``>= len(names)`` being mirror images (``mosaic.tile_choice.choose_tiles``);
        ``sizes``: each base cell's cell size (``mosaic.sized.cell_sizes``), None for one size."""
        count = len(names)
        choice = np.asarray(choice)
        if choice.ndim != 2 or (choice.size and (choice.min() < 0 or choice.max() >= 2 * count)):
            raise ValueError(f"a placement is (rows, columns) of 0..{2 * count - 1}, got {choice.shape}")
        tile = choice.astype(np.int32, copy=False)
        mirrored = choice >= count if choice.size and choice.max() >= count else None  # none below 4 px tiles
        if mirrored is not None:
            tile = tile - count * mirrored
        used = np.flatnonzero(np.bincount(tile.ravel(), minlength=count))  # linear: maps of 40 M cells too
        index = np.zeros(count, np.int32)
        index[used] = np.arange(0, 2 * used.size, 2, dtype=np.int32)
        cells = index[tile]
        if mirrored is not None:
            cells += mirrored
        if sizes is not None and np.asarray(sizes).shape != choice.shape:
            raise ValueError(f"sizes are {np.asarray(sizes).shape}, the placement {choice.shape}")
        tiles = tuple((names[i], blobs[i]) for i in used.tolist())
        return cls(
            library=library,
            first_row=first_row,
            tiles=tiles,
            cells=cells,
            library_version=library_version,
            sizes=sizes,
        )

    def cell_at(self, col: int, row: int) -> tuple[int, int, int]:
        """``(col, row, size)`` of the cell covering base cell ``col``, ``row`` (rows of the
        band, counted from the mosaic's first row as its first row is): its top-left base cell."""
        if self.sizes is None:
            return col, row, 1
        size = int(self.sizes[row, col])
        top = (self.first_row + row) // size * size - self.first_row
        return col // size * size, top, size

    def _origins(self) -> np.ndarray:
        """``(rows, columns) bool``: the base cells where a cell has its top-left corner."""
        if self.sizes is None:
            return np.ones(self.cells.shape, bool)
        rows = (np.arange(self.rows) + self.first_row)[:, None]
        return np.asarray((rows % self.sizes == 0) & (np.arange(self.columns)[None, :] % self.sizes == 0))

    def at(self, col: int, row: int) -> tuple[str, str, bool]:
        """``(name, tile blob, mirrored)`` of the cell at column ``col``, row ``row`` (of the band)."""
        value = int(self.cells[row, col])
        name, blob = self.tiles[value >> 1]
        return name, blob, bool(value & 1)

    def places(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, str | None]:
        """Every cell holding the photo ``name``, row by row: ``(rows, columns, mirrored,
        tile blob)``, rows of the band; empty arrays and None when the mosaic does not use it."""
        held = [i for i, (tile, _) in enumerate(self.tiles) if tile == name]
        found = np.isin(self.cells >> 1, held) & self._origins()  # a large cell once, at its top-left
        rows, columns = np.nonzero(found) if held else (np.zeros(0, np.intp),) * 2
        mirrored = (self.cells[rows, columns] & 1).astype(bool)
        return rows, columns, mirrored, self.tiles[held[0]][1] if held else None

    def uses(self) -> dict[str, int]:
        """How many cells each photo the mosaic uses holds (mirrored or not), by name; a large
        cell is one."""
        placed = self.cells >> 1 if self.sizes is None else (self.cells >> 1)[self._origins()]
        counts = np.bincount(placed.ravel(), minlength=len(self.tiles)).tolist()
        found: dict[str, int] = {}
        for (name, _), count in zip(self.tiles, counts, strict=True):
            found[name] = found.get(name, 0) + count  # one name twice: two blobs of one photo
        return found

    def names_like(self, text: str) -> list[str]:
        """The names of the photos the mosaic uses that a search for ``text`` finds (``name_search``), sorted."""
        finds = name_search(text)
        return sorted({name for name, _ in self.tiles if finds(name, None)})

    def encode(self) -> bytes:
        dtype = _DTYPES[0] if 2 * len(self.tiles) <= 1 << 16 else _DTYPES[1]
        header: dict[str, Any] = {
            "format": _FORMAT,
            "version": _VERSION if self.sizes is None else _SIZED_VERSION,
            "library": self.library,
            "first_row": self.first_row,
            "rows": self.rows,
            "columns": self.columns,
            "dtype": dtype,
            "tiles": [list(t) for t in self.tiles],
        }
        if self.library_version:
            header["library_version"] = self.library_version
        if self.sizes is not None:
            header["sized"] = True
        cells = self.cells.astype(dtype).tobytes()
        if self.sizes is not None:
            cells += self.sizes.astype(np.uint8).tobytes()
        body = json.dumps(header, separators=(",", ":")).encode() + b"\n" + cells
        return gzip.compress(body, compresslevel=1 if self.cells.size <= _COMPRESS_CELLS else 0, mtime=0)

    @classmethod
    def decode(cls, data: bytes) -> TileMap:
        try:
            raw = gzip.decompress(data)
        except (OSError, EOFError, ValueError) as exc:
            raise TileMapFormatError(f"not a gzip tile map: {exc}") from None
        line, _, _ = raw[: _MAX_HEADER + 1].partition(b"\n")
        try:
            header = json.loads(line)
            rows, columns, tiles = int(header["rows"]), int(header["columns"]), header["tiles"]
            dtype = header["dtype"]
            version = header.get("version")
            sized = version == _SIZED_VERSION and header.get("sized") is True
            ok = header.get("format") == _FORMAT and (version == _VERSION or sized) and dtype in _DTYPES
            tiles = tuple((str(name), str(blob)) for name, blob in tiles)
        except (ValueError, KeyError, TypeError) as exc:
            raise TileMapFormatError(f"the tile map's header is unreadable: {exc}") from None
        if not ok:
            raise TileMapFormatError(f"not a version {_VERSION} or {_SIZED_VERSION} tile map")
        body = raw[len(line) + 1 :]
        width = np.dtype(dtype).itemsize + (1 if sized else 0)
        if rows < 0 or columns < 0 or len(body) != width * rows * columns:
            raise TileMapFormatError(f"{len(body)} bytes of cells for {rows}x{columns}")
        split = np.dtype(dtype).itemsize * rows * columns
        cells = np.frombuffer(body[:split], dtype=dtype).reshape(rows, columns).astype(np.int32)
        if cells.size and (cells.min() < 0 or cells.max() >> 1 >= len(tiles)):
            raise TileMapFormatError("a cell names a tile the map does not list")
        sizes = np.frombuffer(body[split:], dtype=np.uint8).reshape(rows, columns).copy() if sized else None
        if sizes is not None and not np.isin(sizes, (1, 2, 4)).all():
            raise TileMapFormatError("a cell's size is not 1, 2 or 4")
        return cls(
            library=str(header["library"]),
            first_row=int(header["first_row"]),
            tiles=tiles,
            cells=cells,
            library_version=str(header.get("library_version") or ""),
            sizes=sizes,
        )

    def csv_lines(self) -> Iterator[str]:
        """``col,row,tile,mirrored`` (mirrored 0 or 1), row by row, header first; lines end in
        ``\\r\\n`` as RFC 4180 has them, names quoted as the ``csv`` module would. A map of
        several cell sizes adds ``size``: one line per cell, at its top-left base cell."""
        import csv

        yield (CSV_HEADER if self.sizes is None else SIZED_CSV_HEADER) + "\r\n"
        quoted = []
        for name, _ in self.tiles:
            out = io.StringIO()
            csv.writer(out).writerow([name])
            quoted.append(out.getvalue().rstrip("\r\n"))
        origins = self._origins()
        for r in range(self.rows):
            row = self.first_row + r
            if self.sizes is None:
                yield "".join(f"{c},{row},{quoted[v >> 1]},{v & 1}\r\n" for c, v in enumerate(self.cells[r].tolist()))
                continue
            found = np.flatnonzero(origins[r])
            values, sizes = self.cells[r, found].tolist(), self.sizes[r, found].tolist()
            yield "".join(
                f"{c},{row},{quoted[v >> 1]},{v & 1},{s}\r\n" for c, v, s in zip(found.tolist(), values, sizes)
            )


def join_bands(bands: Sequence[TileMap]) -> TileMap:
    """The bands' maps, in order, as one map (their tile lists merged); ValueError when they
    are not consecutive bands of one grid and one library."""
    if not bands:
        raise ValueError("no bands to join")
    first = bands[0]
    row = first.first_row
    for band in bands:
        if band.first_row != row or band.columns != first.columns or band.library != first.library:
            raise ValueError(
                f"band at row {band.first_row} ({band.columns} columns, library {band.library!r}) "
                f"does not follow row {row} of {first.columns} columns of {first.library!r}"
            )
        row += band.rows
    tiles = sorted({t for band in bands for t in band.tiles})
    where = {t: i for i, t in enumerate(tiles)}
    parts = []
    for band in bands:
        remap = np.array([where[t] for t in band.tiles], dtype=np.int32)
        parts.append(2 * remap[band.cells >> 1] + (band.cells & 1))
    cells = np.concatenate(parts, axis=0).astype(np.int32)
    versions = {band.library_version for band in bands}
    version = versions.pop() if len(versions) == 1 else ""  # bands of two versions: the map cannot say which
    sizes = None
    if any(band.sizes is not None for band in bands):
        ones = [np.ones(band.cells.shape, np.uint8) if band.sizes is None else band.sizes for band in bands]
        sizes = np.concatenate(ones, axis=0)
    return TileMap(
        library=first.library,
        first_row=first.first_row,
        tiles=tuple(tiles),
        cells=cells,
        library_version=version,
        sizes=sizes,
    )


def load_job_map(download: Callable[[str, str], bytes], request_id: str, slices: int) -> bytes:
    """The encoded map of a whole job: its own blob (a job its processor finished alone), else its
    bands' joined. ``download(container, name)`` reads a blob; BlobMissingError when the job has
    no map (finished by a release that kept none), TileMapFormatError when one is unreadable."""
    try:
        return download(IMAGE_OUTPUT_CONTAINER, tile_map_name(request_id))
    except BlobMissingError:
        if slices < 1:
            raise
    names = [slice_tile_map_name(request_id, seq) for seq in range(slices)]
    bands = [TileMap.decode(download(SLICE_RESPONSE_CONTAINER, name)) for name in names]
    try:
        return join_bands(bands).encode()
    except ValueError as exc:
        raise TileMapFormatError(f"the job's band maps do not fit together: {exc}") from None
