"""Final-format pieces of a giant mosaic: which rows each band turns into which output pieces.

A giant job's bands are planned on Deep Zoom tile-row boundaries (``plan_pieces``) so that
each processor can make final outputs from the pixels it rendered, and the controller only
assembles them:

- **Pyramid tiles.** Band ``i`` *owns* the output rows ``splits[i] .. splits[i + 1]``, a
  multiple of ``DZI_TILE_SIZE * 2 ** (levels - 1)`` (the last band ends at the height). Every
  pyramid level from the full size down ``levels`` levels then has whole tile rows inside the
  band: the band cuts and encodes those tiles itself (``band_tiles``). A tile reaches one
  overlap pixel past its row, so the band renders ``2 ** (levels - 1)`` rows of margin.
- **The reduced band.** The next level down (``levels`` halvings) is where bands stop owning
  whole tile rows; the band hands that level's rows to the controller (``band_tiles``'
  second result, ``1 / 4 ** levels`` of its pixels), which builds the remaining small
  pyramid from the joined reduced bands.
- **JPEG rows.** Band ``i`` encodes the full-size JPEG rows ``jpeg[i]``, which start on the
  multiple of ``JPEG_ROWS`` nearest its pyramid rows (8 MCU rows of 16 px): its scan, with a restart marker after
  every MCU row, continues the whole image's restart numbering unchanged, so the controller
  concatenates the bands' scans under one header (``workers.jpeg_segments``).

**Tile choice.** A band renders a few rows past its own (the margin, and JPEG rows that start
before its pyramid rows), rows its neighbour renders too, so both must choose the same tiles
there. The choice (``mosaic.render.choose_tiles``, with variety) depends on the band it is
made in, so the plan cuts the grid's cell rows into *choice segments* (``PiecePlan.cuts``:
each band's first cell row, and the row below each band's last) and every segment's tiles are
chosen on their own, by whichever process renders them (``render_piece``). The overlap is a
few cell rows; its segments are chosen twice, identically.

Each halving is libvips' Deep Zoom reduction (``shrink``: the mean of 2 x 2 pixels, rounded,
the last row or column repeated when a side is odd), so the assembled pyramid is the one
``dzsave`` writes for the whole mosaic, tile for tile, byte for byte (tests compare them).
Pure NumPy: no storage, no encoding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .deepzoom import DZI_OVERLAP, DZI_TILE_SIZE, top_level
from .grid import Grid, min_slices
from .library import TileLibrary
from .limits import JPEG_MAX_SIDE, MAX_SLICE_PIXELS
from .render import DEFAULT_OPTIONS, RenderOptions, choose_tiles, render_band

__all__ = [
    "JPEG_ROWS",
    "MAX_BAND_LEVELS",
    "Piece",
    "PiecePlan",
    "band_tiles",
    "job_plan",
    "plan_pieces",
    "render_piece",
    "segments",
    "shrink",
]

JPEG_ROWS = 128  # 8 MCU rows of 16 px: restart markers RST0..RST7 come round whole at each band start
MAX_BAND_LEVELS = 4  # the most pyramid levels a band makes (a unit of 4,080 rows)


@dataclass(frozen=True)
class Piece:
    """What band ``index`` renders and makes; every range is of output pixel rows, except ``cells``."""

    index: int
    width: int
    height: int
    levels: int
    owned: range  # pyramid rows it makes tiles for (at full size)
    jpeg: range  # full-size JPEG rows it encodes
    pyramid_rows: range  # the rows its tiles need: owned plus the margin
    cells: range  # the cell rows it renders: everything above, in whole cells

    tile_size: int  # output pixels per cell row

    @property
    def rendered(self) -> range:
        """The output rows of ``cells``."""
        return range(self.cells.start * self.tile_size, min(self.height, self.cells.stop * self.tile_size))


@dataclass(frozen=True)
class PiecePlan:
    """Bands on pyramid unit boundaries: ``splits`` (0 .. height) and ``levels`` made per band."""

    width: int
    height: int
    tile_size: int
    levels: int
    splits: tuple[int, ...]

    @property
    def bands(self) -> int:
        return len(self.splits) - 1

    def _rows(self, index: int) -> tuple[range, range, range]:
        """(owned, jpeg, pyramid_rows) of band ``index``, in output pixel rows."""
        lo, hi = self.splits[index], self.splits[index + 1]
        # JPEG rows cut at the multiple of JPEG_ROWS nearest the pyramid's cut: the least overlap.
        jlo = 0 if index == 0 else round(lo / JPEG_ROWS) * JPEG_ROWS
        jhi = self.height if index == self.bands - 1 else round(hi / JPEG_ROWS) * JPEG_ROWS
        margin = 2 ** (self.levels - 1) * DZI_OVERLAP
        return range(lo, hi), range(jlo, jhi), range(max(0, lo - margin), min(self.height, hi + margin))

    def _first_cell(self, index: int) -> int:
        _, jpeg, pyramid = self._rows(index)
        return min(jpeg.start, pyramid.start) // self.tile_size

    def _last_cell(self, index: int) -> int:
        _, jpeg, pyramid = self._rows(index)
        return math.ceil(max(jpeg.stop, pyramid.stop) / self.tile_size)

    @property
    def cuts(self) -> tuple[int, ...]:
        """The choice segments' cell-row boundaries, 0 .. cells down (see the module docstring)."""
        down = math.ceil(self.height / self.tile_size)
        found = {0, down}
        for index in range(self.bands):
            found.add(self._first_cell(index))
            found.add(self._last_cell(index))
        return tuple(sorted(found))

    def piece(self, index: int) -> Piece:
        owned, jpeg, pyramid_rows = self._rows(index)
        cells = range(self._first_cell(index), self._last_cell(index))
        return Piece(
            index=index,
            width=self.width,
            height=self.height,
            levels=self.levels,
            owned=owned,
            jpeg=jpeg,
            pyramid_rows=pyramid_rows,
            cells=cells,
            tile_size=self.tile_size,
        )

    def pieces(self) -> list[Piece]:
        return [self.piece(i) for i in range(self.bands)]

    def reduced_size(self) -> tuple[int, int]:
        """The size of the level the controller builds from: the full size halved ``levels`` times."""
        return math.ceil(self.width / 2**self.levels), math.ceil(self.height / 2**self.levels)


def segments(cuts: tuple[int, ...], cells: range) -> list[range]:
    """The choice segments covering ``cells`` (whose ends are cuts), in order."""
    inside = [c for c in cuts if cells.start <= c <= cells.stop]
    if not inside or inside[0] != cells.start or inside[-1] != cells.stop:
        raise ValueError(f"cell rows {cells.start}..{cells.stop} do not start and end on choice cuts")
    return [range(a, b) for a, b in zip(inside, inside[1:])]


def choose_piece(
    cells: np.ndarray,
    library: TileLibrary,
    *,
    tile_size: int,
    seed: str,
    rows: range,
    cuts: tuple[int, ...],
    options: RenderOptions = DEFAULT_OPTIONS,
) -> np.ndarray:
    """The tiles of cell rows ``rows`` (``cells`` is their cell image), each choice segment's
    tiles chosen on their own, as the neighbouring bands choose them."""
    per_row = cells.shape[0] // len(rows)
    return np.concatenate(
        [
            choose_tiles(
                cells[(seg.start - rows.start) * per_row : (seg.stop - rows.start) * per_row],
                library,
                tile_size=tile_size,
                seed=seed,
                row_offset=seg.start,
                options=options,
            )
            for seg in segments(cuts, rows)
        ]
    )


def render_piece(
    cells: np.ndarray,
    library: TileLibrary,
    *,
    tile_size: int,
    seed: str,
    rows: range,
    cuts: tuple[int, ...],
    options: RenderOptions = DEFAULT_OPTIONS,
    choice: np.ndarray | None = None,
) -> np.ndarray:
    """The pixels of cell rows ``rows``: ``choose_piece``'s tiles, or ``choice``, those rows of a
    whole-grid choice (fair use). Each choice segment is painted on its own too (the correction
    evens a flat patch within the rows painted together), so two bands that both render a
    segment give it the same pixels."""
    if choice is None:
        choice = choose_piece(cells, library, tile_size=tile_size, seed=seed, rows=rows, cuts=cuts, options=options)
    per_row = cells.shape[0] // len(rows)
    out = np.empty((choice.shape[0] * tile_size, choice.shape[1] * tile_size, 3), np.uint8)
    for seg in segments(cuts, rows):
        first, last = seg.start - rows.start, seg.stop - rows.start
        render_band(
            cells[first * per_row : last * per_row],
            library,
            tile_size=tile_size,
            seed=seed,
            row_offset=seg.start,
            options=options,
            choice=choice[first:last],
            out=out[first * tile_size : last * tile_size],  # painted in place: no second copy of the band
        )
    return out


def job_plan(grid: Grid, slices: int) -> PiecePlan | None:
    """The plan a job of ``slices`` asked for gets: pieces when it has several bands (asked for,
    or forced by ``MAX_SLICE_PIXELS``), fits a JPEG and is tall enough; None: plain bands."""
    if max(slices, min_slices(grid)) < 2 or max(grid.output_width, grid.output_height) > JPEG_MAX_SIDE:
        return None
    return plan_pieces(grid, slices)


def plan_pieces(grid: Grid, slices: int, *, max_slice_pixels: int = MAX_SLICE_PIXELS) -> PiecePlan | None:
    """Bands on pyramid units for ``grid``: at least ``slices`` bands, none over ``max_slice_pixels``
    of owned rows, each making as many levels as allows that; None when no plan of two bands or
    more fits (a small mosaic: the ordinary bands and stitch)."""
    width, height = grid.output_width, grid.output_height
    if top_level(width, height) <= MAX_BAND_LEVELS:
        return None
    for levels in range(MAX_BAND_LEVELS, 0, -1):
        unit = DZI_TILE_SIZE * 2 ** (levels - 1)
        units = math.ceil(height / unit)
        if units > 1 and round((units - 1) * unit / JPEG_ROWS) * JPEG_ROWS >= height:
            units -= 1  # a sliver of a last unit joins the unit above: every band keeps JPEG rows of its own
        per_band = max_slice_pixels // (unit * width)
        if per_band < 1:
            continue
        bands = max(slices, 2, math.ceil(units / per_band))
        if bands > units:
            continue
        base, extra = divmod(units, bands)
        splits, at = [0], 0
        for index in range(bands):
            at += (base + (1 if index < extra else 0)) * unit
            splits.append(min(at, height))
        splits[-1] = height  # the last band ends at the bottom (with a sliver of a unit, if any)
        return PiecePlan(width, height, grid.tile_size, levels, tuple(splits))
    return None


def shrink(pixels: np.ndarray) -> np.ndarray:
    """One Deep Zoom halving of ``(H, W, 3) uint8``: 2 x 2 means, rounded; an odd side repeats its last pixel."""
    h, w = pixels.shape[:2]
    if h % 2:
        pixels = np.concatenate([pixels, pixels[-1:]], axis=0)
    if w % 2:
        pixels = np.concatenate([pixels, pixels[:, -1:]], axis=1)
    out = pixels[0::2, 0::2].astype(np.uint16)
    out += pixels[1::2, 0::2]
    out += pixels[0::2, 1::2]
    out += pixels[1::2, 1::2]
    out += 2
    out >>= 2
    return out.astype(np.uint8)


def band_tiles(
    pixels: np.ndarray, piece: Piece, *, first_row: int
) -> tuple[list[tuple[int, int, int, np.ndarray]], np.ndarray]:
    """The band's pyramid tiles ``(level, column, row, pixels)`` and its reduced rows.

    ``pixels`` are the output rows from ``first_row`` on (at least ``piece.pyramid_rows``)."""
    rows = piece.pyramid_rows
    level_pixels = pixels[rows.start - first_row : rows.stop - first_row]
    top, tiles = top_level(piece.width, piece.height), []
    offset = rows.start  # the level's row of level_pixels[0]
    for j in range(piece.levels):
        height, width = math.ceil(piece.height / 2**j), math.ceil(piece.width / 2**j)
        lo = piece.owned.start // 2**j
        hi = height if piece.owned.stop == piece.height else piece.owned.stop // 2**j
        tiles += _cut(level_pixels, top - j, range(lo, hi), offset, width, height)
        if j == piece.levels - 1:
            owned = level_pixels[lo - offset : hi - offset]
            return tiles, shrink(owned)
        level_pixels, offset = shrink(level_pixels), offset // 2
    raise AssertionError("levels must be at least 1")


def _cut(
    level: np.ndarray, number: int, owned: range, offset: int, width: int, height: int
) -> Iterator[tuple[int, int, int, np.ndarray]]:
    """The tiles of the tile rows that start in ``owned`` (whole rows: ``owned`` starts on one)."""
    size, overlap = DZI_TILE_SIZE, DZI_OVERLAP
    for row in range(owned.start // size, math.ceil(owned.stop / size)):
        y0, y1 = max(0, row * size - overlap), min(height, (row + 1) * size + overlap)
        for column in range(math.ceil(width / size)):
            x0, x1 = max(0, column * size - overlap), min(width, (column + 1) * size + overlap)
            yield number, column, row, level[y0 - offset : y1 - offset, x0:x1]
