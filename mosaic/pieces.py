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
there. The grid's parts (``mosaic.parts``) are cut at every unit boundary with a seam part of
exactly those shared rows, so a band renders whole parts, each chosen and corrected on its own
(``render_band(parts=...)``): the shared rows come out the same in both bands, and the same
as in a one-slice job or the offline render.

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
from .limits import JPEG_MAX_SIDE, MAX_SLICE_PIXELS
from .parts import JPEG_ROWS, Parts, plan_parts, unit_lattice

__all__ = ["Piece", "PiecePlan", "band_tiles", "job_bands", "job_plan", "plan_pieces", "shrink"]


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
    def parts(self) -> Parts:
        """The grid's parts (``mosaic.parts``): every band's cells are whole ones."""
        down = math.ceil(self.height / self.tile_size)
        return plan_parts(Grid(self.width // self.tile_size, down, self.width, self.height, self.tile_size))

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


def job_plan(grid: Grid, slices: int, *, align: int = 1) -> PiecePlan | None:
    """The plan a job of ``slices`` asked for gets: pieces when it has several bands (asked for,
    or forced by ``MAX_SLICE_PIXELS``), fits a JPEG and is tall enough; None: plain bands.
    ``align``: the largest cell size (``mosaic.cells``). Cells of several sizes take plain bands
    of whole parts (``plan_parts(align=)``): a piece's rows start on a Deep Zoom unit, where a
    large cell may straddle the cut, so the controller's stitch makes the pyramid instead."""
    if align > 1 or max(slices, min_slices(grid)) < 2 or max(grid.output_width, grid.output_height) > JPEG_MAX_SIDE:
        return None
    return plan_pieces(grid, slices)


def job_bands(grid: Grid, slices: int, *, align: int = 1) -> tuple[PiecePlan | None, list[range]]:
    """A job's bands of cell rows, as the controller cuts them and the web app shows them: a
    giant job's pieces (``job_plan``: the cell rows each renders), else plain bands of whole
    parts (``mosaic.parts``, aligned to ``align``). A giant mosaic gets more slices than asked
    for, so that no band holds more than ``MAX_SLICE_PIXELS``; never more than the grid's parts."""
    if (plan := job_plan(grid, slices, align=align)) is not None:
        return plan, [piece.cells for piece in plan.pieces()]
    rows_per_slice = max(1, MAX_SLICE_PIXELS // max(1, grid.output_width * grid.tile_size))
    return None, plan_parts(grid, align=align).bands(max(slices, min_slices(grid)), max_rows=rows_per_slice)


def plan_pieces(grid: Grid, slices: int, *, max_slice_pixels: int = MAX_SLICE_PIXELS) -> PiecePlan | None:
    """Bands on the grid's Deep Zoom units (``mosaic.parts.unit_lattice``): ``slices`` bands, or as
    many as the grid has units when fewer, or more when a band would pass ``max_slice_pixels``
    of owned rows; None when the grid has no two units (a small mosaic: the ordinary bands and
    stitch). The units are the grid's own, whatever ``slices`` is: its parts are cut on them."""
    lattice = unit_lattice(grid)
    if lattice is None:
        return None
    width, height, unit, units = grid.output_width, grid.output_height, lattice.unit, lattice.units
    per_band = max(1, max_slice_pixels // (unit * width))
    bands = min(units, max(slices, 2, math.ceil(units / per_band)))
    base, extra = divmod(units, bands)
    splits, at = [0], 0
    for index in range(bands):
        at += (base + (1 if index < extra else 0)) * unit
        splits.append(min(at, height))
    splits[-1] = height  # the last band ends at the bottom (with a sliver of a unit, if any)
    return PiecePlan(width, height, grid.tile_size, lattice.levels, tuple(splits))


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
    top = top_level(piece.width, piece.height)
    tiles: list[tuple[int, int, int, np.ndarray]] = []
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
