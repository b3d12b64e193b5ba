"""Tile libraries: square tiles in one atlas, and the compact index blob workers fetch.

A library is an ``(N, 64, 64, 3) uint8`` atlas of tiles at the largest tile size plus their
names, a content-hash ``version`` and the *groups* of near-duplicate tiles (a burst of shots:
the engine treats a group as one photo for variety, ``max_uses`` and "use every photo"; a tile
in no group is a group of its own). Smaller tile sizes are derived from the atlas (Lanczos,
per tile, cached), and so are the matching signatures, so the index is all a worker needs:
one blob, not one per tile. The index is a zip of ``index.json`` and PNG pages of 4096 tiles
(lossless, so a library read back is the library written).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from PIL import Image

from .errors import ImageDecodeError, LibraryFormatError, NoUsableImageError
from .images import DECODE_FAILURES, HEIF_THUMBNAIL_SIDE, heif_brands, open_image, probe_size
from .limits import MAX_TILE_SIZE
from .signatures import SUB
from .subject_crop import SEARCH_SIDE, subject_square

ATLAS_SIZE = MAX_TILE_SIZE  # tiles are stored at the largest tile size
FORMAT = "photomosaics-tile-library"
FORMAT_VERSION = 1  # written for libraries without groups: the bytes of every library before groups
GROUPS_FORMAT_VERSION = 2  # the same, with ``groups`` in index.json
_PAGE = 64  # tiles per page side: 4096 tiles, 4096 x 4096 pixels per PNG page
T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class TileLibrary:
    """Tiles at ``ATLAS_SIZE`` pixels, their names and the version (content hash)."""

    atlas: np.ndarray
    names: tuple[str, ...]
    version: str
    groups: tuple[tuple[int, ...], ...] = ()  # near-duplicates: tile indices, groups of two or more
    _cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.atlas.ndim != 4 or self.atlas.shape[1:] != (ATLAS_SIZE, ATLAS_SIZE, 3):
            raise ValueError(f"atlas must be (N, {ATLAS_SIZE}, {ATLAS_SIZE}, 3), got {self.atlas.shape}")
        if self.atlas.dtype != np.uint8:
            raise ValueError(f"atlas must be uint8, got {self.atlas.dtype}")
        if len(self.names) != self.atlas.shape[0]:
            raise ValueError(f"{len(self.names)} names for {self.atlas.shape[0]} tiles")
        if self.atlas.shape[0] == 0:
            raise ValueError("a tile library needs at least one tile")
        self.atlas.flags.writeable = False
        groups = tuple(tuple(sorted(int(i) for i in g)) for g in self.groups if len(g) > 1)
        members = [i for g in groups for i in g]
        if any(not 0 <= i < len(self.names) for i in members) or len(set(members)) != len(members):
            raise ValueError("groups must name tiles of the library, each tile in one group at most")
        object.__setattr__(self, "groups", tuple(sorted(groups)))

    @classmethod
    def from_tiles(cls, atlas: np.ndarray, names: Iterable[str], groups: Iterable[Iterable[int]] = ()) -> TileLibrary:
        """A library whose version is the hash of its tiles, names (and groups, when it has any)."""
        atlas = np.ascontiguousarray(atlas, dtype=np.uint8)
        names = tuple(names)
        kept = tuple(tuple(int(i) for i in g) for g in groups)
        digest = hashlib.sha256(atlas.tobytes())
        digest.update(json.dumps(names).encode())
        if any(len(g) > 1 for g in kept):
            digest.update(json.dumps(sorted(sorted(g) for g in kept if len(g) > 1)).encode())
        return cls(atlas=atlas, names=names, version=digest.hexdigest()[:20], groups=kept)

    def __len__(self) -> int:
        return int(self.atlas.shape[0])

    def group_of(self) -> np.ndarray:
        """``(N,) int64``: each tile's group, numbered 0.. in the order of their first tiles. A
        library without groups numbers its tiles 0..N-1, so everything keyed on groups is keyed
        on tiles exactly as before."""

        def label() -> np.ndarray:
            first = np.arange(len(self), dtype=np.int64)
            for group in self.groups:
                first[list(group)] = group[0]
            return np.unique(first, return_inverse=True)[1].astype(np.int64).ravel()

        return self.cached(("group-of",), label)

    @property
    def group_count(self) -> int:
        """How many photos the engine sees: tiles, near-duplicates counted once."""
        return len(self) - sum(len(g) - 1 for g in self.groups)

    def cached(self, key: Any, compute: Callable[[], T]) -> T:
        """Per-library memo for derived data (tile sizes, signatures, search indexes; arrays read-only)."""
        if key not in self._cache:
            value = compute()
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
            self._cache[key] = value
        return self._cache[key]

    def tiles(self, tile_size: int) -> np.ndarray:
        """``(N, s, s, 3) uint8`` tiles at ``tile_size`` pixels (Lanczos from the atlas), cached."""
        if not 1 <= tile_size <= ATLAS_SIZE:
            raise ValueError(f"tile size must be 1..{ATLAS_SIZE}, got {tile_size}")
        if tile_size == ATLAS_SIZE:
            return self.atlas
        return self.cached(("tiles", tile_size), lambda: _resize_tiles(self.atlas, tile_size))

    def sub_cells(self, tile_size: int) -> np.ndarray:
        """``(N, SUB, SUB, 3) uint8``: each tile at ``tile_size`` box-reduced to SUB × SUB, as cells are."""
        return self.cached(("sub", tile_size), lambda: _box_tiles(self.tiles(tile_size), SUB))

    def to_bytes(self) -> bytes:
        """The index blob: a zip of ``index.json`` and PNG atlas pages."""
        buffer = io.BytesIO()
        count = len(self)
        pages = math.ceil(count / (_PAGE * _PAGE))
        meta = {
            "format": FORMAT,
            "format_version": GROUPS_FORMAT_VERSION if self.groups else FORMAT_VERSION,
            "version": self.version,
            "tile_size": ATLAS_SIZE,
            "count": count,
            "pages": pages,
            "names": list(self.names),
        }
        if self.groups:
            meta["groups"] = [list(g) for g in self.groups]
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("index.json", json.dumps(meta), compress_type=zipfile.ZIP_DEFLATED)
            for page in range(pages):
                chunk = self.atlas[page * _PAGE * _PAGE : (page + 1) * _PAGE * _PAGE]
                png = io.BytesIO()
                Image.fromarray(_sheet(chunk)).save(png, format="PNG", compress_level=3)
                archive.writestr(f"atlas-{page:03d}.png", png.getvalue())
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> TileLibrary:
        """Read an index blob written by ``to_bytes``; LibraryFormatError if it is not one."""
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                meta = json.loads(archive.read("index.json"))
                if meta.get("format") != FORMAT:
                    raise LibraryFormatError("not a tile library index")
                if meta.get("format_version") not in (FORMAT_VERSION, GROUPS_FORMAT_VERSION):
                    raise LibraryFormatError(
                        f"tile library format version {meta.get('format_version')} is not supported "
                        f"(this code reads versions {FORMAT_VERSION} and {GROUPS_FORMAT_VERSION}); rebuild the library"
                    )
                count = int(meta["count"])
                parts = []
                for page in range(int(meta["pages"])):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                        page_png = io.BytesIO(archive.read(f"atlas-{page:03d}.png"))
                        sheet = np.asarray(Image.open(page_png, formats=("PNG",)).convert("RGB"))  # PNG only
                    parts.append(_unsheet(sheet, min(_PAGE * _PAGE, count - page * _PAGE * _PAGE)))
            atlas = np.concatenate(parts) if parts else np.zeros((0, ATLAS_SIZE, ATLAS_SIZE, 3), np.uint8)
            groups = tuple(tuple(int(i) for i in g) for g in meta.get("groups", []))
            return cls(atlas=atlas, names=tuple(meta["names"]), version=str(meta["version"]), groups=groups)
        except LibraryFormatError:
            raise
        except (*DECODE_FAILURES, zipfile.BadZipFile, zlib.error) as exc:  # a damaged zip, entry or page
            raise LibraryFormatError(f"unreadable tile library index: {exc}") from exc


def _sheet(tiles: np.ndarray) -> np.ndarray:
    count = tiles.shape[0]
    columns = min(_PAGE, count)
    rows = math.ceil(count / columns)
    padded = np.zeros((rows * columns, ATLAS_SIZE, ATLAS_SIZE, 3), np.uint8)
    padded[:count] = tiles
    grid = padded.reshape(rows, columns, ATLAS_SIZE, ATLAS_SIZE, 3).transpose(0, 2, 1, 3, 4)
    return grid.reshape(rows * ATLAS_SIZE, columns * ATLAS_SIZE, 3)


def _unsheet(sheet: np.ndarray, count: int) -> np.ndarray:
    rows, columns = sheet.shape[0] // ATLAS_SIZE, sheet.shape[1] // ATLAS_SIZE
    grid = sheet.reshape(rows, ATLAS_SIZE, columns, ATLAS_SIZE, 3).transpose(0, 2, 1, 3, 4)
    return np.ascontiguousarray(grid.reshape(rows * columns, ATLAS_SIZE, ATLAS_SIZE, 3)[:count])


def _resize_tiles(atlas: np.ndarray, size: int) -> np.ndarray:
    out = np.empty((atlas.shape[0], size, size, 3), np.uint8)
    for i, tile in enumerate(atlas):
        out[i] = np.asarray(Image.fromarray(tile).resize((size, size), Image.Resampling.LANCZOS))
    return out


def _box_tiles(tiles: np.ndarray, size: int) -> np.ndarray:
    n, s = tiles.shape[0], tiles.shape[1]
    if s % size == 0:
        # Pillow's integer box reduction on a one-column sheet: the same rounding as cells.
        sheet = Image.fromarray(np.ascontiguousarray(tiles.reshape(n * s, s, 3)))
        return np.asarray(sheet.reduce(s // size)).reshape(n, size, size, 3).copy()
    out = np.empty((n, size, size, 3), np.uint8)
    for i, tile in enumerate(tiles):
        out[i] = np.asarray(Image.fromarray(tile).resize((size, size), Image.Resampling.BOX))
    return out


def decode_size(data: bytes) -> tuple[int, int]:
    """The least a photo is decoded to for its tile, as the indexer decodes it: ``SEARCH_SIDE``
    (a JPEG reduced by libjpeg, a 12 MP one at 1/8), where its faces are found; an HEIF photo's
    embedded thumbnail when it is ``HEIF_THUMBNAIL_SIDE`` (an iPhone's 320 x 240: 10 ms, where
    its whole 12 MP HEVC picture costs 0.5-1 s and 100 MB)."""
    side = HEIF_THUMBNAIL_SIDE if heif_brands(data) else SEARCH_SIDE
    return side, side


def square_tile(image: Image.Image, size: int = ATLAS_SIZE) -> np.ndarray:
    """Cut the photo's square (never squash; its faces kept, else its detail:
    ``mosaic.subject_crop``, as the indexer cuts it) and resize with Lanczos: ``(size, size, 3) uint8``."""
    left, top, side = subject_square(image)
    square = image.crop((left, top, left + side, top + side))
    return np.asarray(square.resize((size, size), Image.Resampling.LANCZOS, reducing_gap=3.0), np.uint8)


def build_library(
    sources: Iterable[tuple[str, bytes]],
    *,
    progress: Callable[[int], None] | None = None,
    admit: Callable[[int], AbstractContextManager[object]] | None = None,
) -> tuple[TileLibrary, list[tuple[str, str]]]:
    """Decode, crop and resize every source image: ``(library, skipped [(name, reason)])``.

    Files that are not images are skipped and reported, never fatal; a library with no
    usable image at all is a ``NoUsableImageError`` (a ``ValueError``). Sources are read one
    at a time and each is dropped once it is a tile. ``admit(pixels)``, when given, is told
    each image's size from its header before it is decoded and held around the decoding (it
    may raise to stop the build: a budget).
    """
    tiles: list[np.ndarray] = []
    names: list[str] = []
    skipped: list[tuple[str, str]] = []
    for count, (name, data) in enumerate(sources, start=1):
        try:
            held = nullcontext() if admit is None else admit(_header_pixels(data))
            with held:
                tiles.append(square_tile(open_image(data, min_size=decode_size(data))))
            names.append(name)
        except ImageDecodeError as exc:
            skipped.append((name, str(exc)))
        del data  # not held while the next file is read
        if progress is not None:
            progress(count)
    if not tiles:
        raise NoUsableImageError(
            f"no usable image among {len(skipped)} files"
            + (f" (first: {skipped[0][0]}: {skipped[0][1]})" if skipped else "")
        )
    return TileLibrary.from_tiles(np.stack(tiles), names), skipped


def _header_pixels(data: bytes) -> int:
    width, height = probe_size(data)
    return width * height
