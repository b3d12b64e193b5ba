"""Parts: the runs of cell rows whose tiles are chosen and corrected on their own, from the grid alone.

The tile choice cannot be made for a whole grid in one place and handed out: variety is settled
among neighbours, so the cells of one *part* choose together (``render.choose_tiles``), and a
part's rows next to another part use disjoint shares of the library (``variety``). The colour
correction evens flat patches within a part too (``levelling``). Where the parts lie is
therefore part of what the mosaic *is*, and it is planned here from the grid alone (its size
and tile size), never from the slice count, the workers or a giant job's band plan:

- **Every slicing is a union of whole parts.** A job's plain bands group whole parts
  (``Parts.bands``); a giant job's bands (``mosaic.pieces``) lie on Deep Zoom units, and the
  grid's parts are cut at every unit boundary with a *seam part* that holds exactly the rows
  both neighbouring bands render there (their margins and JPEG rows), so each band renders
  whole parts. One slice or sixty-four, in the pipeline or offline: the same parts, the same
  choices, the same bytes.
- **Parts are tall.** Each border between parts costs the rows beside it a share of the
  library, so a part is ``PART_ROWS`` cell rows or more where the grid allows: the few seams a
  grid has cost it little, and a grid under ``2 * PART_ROWS`` rows is one part (one slice).
  Within ``MAX_SLICE_PIXELS`` per part, so any part fits one processor.

Pure arithmetic on the grid: the controller, every processor and the offline render compute
the same parts without telling each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .deepzoom import DZI_OVERLAP, DZI_TILE_SIZE, top_level
from .grid import Grid
from .limits import JPEG_MAX_SIDE, MAX_SLICE_PIXELS

__all__ = ["JPEG_ROWS", "MAX_BAND_LEVELS", "PART_ROWS", "Parts", "UnitLattice", "plan_parts", "unit_lattice"]

PART_ROWS = 48  # the fewest cell rows of a part where the grid has room for two (64 at tile sizes 8 to 64)
JPEG_ROWS = 128  # 8 MCU rows of 16 px: restart markers RST0..RST7 come round whole at each band start
MAX_BAND_LEVELS = 4  # the most pyramid levels a band makes (a unit of 4,080 rows)


@dataclass(frozen=True)
class UnitLattice:
    """A grid's Deep Zoom units: the output rows a giant job's bands are cut on.

    ``levels``: the pyramid levels each band makes; a unit is ``DZI_TILE_SIZE * 2 ** (levels
    - 1)`` output rows; ``units``: how many (the last may be longer: a sliver joins it)."""

    levels: int
    unit: int
    units: int

    @property
    def margin(self) -> int:
        """Output rows a band renders past its own, for its pyramid tiles' overlap."""
        return 2 ** (self.levels - 1) * DZI_OVERLAP

    def boundaries(self) -> list[int]:
        """The output rows where two units meet."""
        return [j * self.unit for j in range(1, self.units)]


def unit_lattice(grid: Grid) -> UnitLattice | None:
    """The units a giant job of this grid is cut on, or None when it has no two (a small or too wide
    mosaic: plain bands). The finest unit of at least ``PART_ROWS`` cell rows, within
    ``MAX_BAND_LEVELS`` levels and ``MAX_SLICE_PIXELS`` per unit."""
    width, height = grid.output_width, grid.output_height
    if max(width, height) > JPEG_MAX_SIDE or top_level(width, height) <= MAX_BAND_LEVELS:
        return None
    fitting = [lv for lv in range(1, MAX_BAND_LEVELS + 1) if DZI_TILE_SIZE * 2 ** (lv - 1) * width <= MAX_SLICE_PIXELS]
    if not fitting:
        return None
    tall = [lv for lv in fitting if DZI_TILE_SIZE * 2 ** (lv - 1) >= PART_ROWS * grid.tile_size]
    levels = tall[0] if tall else fitting[-1]
    unit = DZI_TILE_SIZE * 2 ** (levels - 1)
    units = math.ceil(height / unit)
    last = height - (units - 1) * unit
    if units > 1 and (
        round((units - 1) * unit / JPEG_ROWS) * JPEG_ROWS >= height or last < min(unit, PART_ROWS * grid.tile_size) // 2
    ):
        # a sliver of a last unit joins the unit above: every band keeps JPEG rows of its own, and
        # the last part is no thin strip of restricted rows (``variety``)
        units -= 1
    return UnitLattice(levels, unit, units) if units > 1 else None


def seam_rows(lattice: UnitLattice, boundary: int, height: int) -> tuple[int, int]:
    """Output rows ``[start, stop)`` that both bands meeting at ``boundary`` render: the lower
    band's JPEG rows start on the multiple of ``JPEG_ROWS`` nearest it, and each band's pyramid
    tiles reach ``margin`` rows into the other."""
    jpeg = round(boundary / JPEG_ROWS) * JPEG_ROWS
    return max(0, min(jpeg, boundary - lattice.margin)), min(height, max(jpeg, boundary + lattice.margin))


@dataclass(frozen=True)
class Parts:
    """A grid's parts: ``cuts`` are their first cell rows, and the grid's row count last."""

    cuts: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.cuts) < 2 or self.cuts[0] != 0 or any(a >= b for a, b in zip(self.cuts, self.cuts[1:])):
            raise ValueError(f"parts must rise from 0 to the grid's rows, got {self.cuts}")

    @property
    def rows(self) -> int:
        return self.cuts[-1]

    @property
    def count(self) -> int:
        return len(self.cuts) - 1

    def within(self, rows: range) -> list[range]:
        """The parts that make up ``rows``; ValueError unless it starts and ends on cuts."""
        inside = [c for c in self.cuts if rows.start <= c <= rows.stop]
        if not inside or inside[0] != rows.start or inside[-1] != rows.stop:
            raise ValueError(f"cell rows {rows.start}..{rows.stop} do not start and end where parts do")
        return [range(a, b) for a, b in zip(inside, inside[1:])]

    def bands(self, slices: int, *, max_rows: int | None = None) -> list[range]:
        """Whole parts grouped into bands of nearly equal rows: ``slices`` of them, fewer when
        the grid has fewer parts, more when a band would exceed ``max_rows``."""
        if slices < 1:
            raise ValueError(f"slices must be at least 1, got {slices}")
        count = min(slices, self.count)
        while True:
            bands = self._group(count)
            if max_rows is None or count == self.count or all(len(b) <= max_rows for b in bands):
                return bands
            count += 1

    def _group(self, count: int) -> list[range]:
        """``count`` runs of whole parts, each ending at the cut nearest its share of the rows."""
        chosen = [0]
        for k in range(1, count):
            goal = self.rows * k / count
            free = range(chosen[-1] + 1, self.count - (count - k) + 1)  # leaves a part for each band after
            chosen.append(min(free, key=lambda i: (abs(self.cuts[i] - goal), i)))
        chosen.append(self.count)
        return [range(self.cuts[a], self.cuts[b]) for a, b in zip(chosen, chosen[1:])]


def plan_parts(grid: Grid, *, max_slice_pixels: int = MAX_SLICE_PIXELS, align: int = 1) -> Parts:
    """The grid's parts: seams at its Deep Zoom units when it has them, else even runs of
    ``PART_ROWS`` cell rows or more (fewer where a part would pass ``max_slice_pixels``).
    ``align``: the largest cell size (``cells``); every cut but the grid's end is moved to a
    multiple of it (a seam part widened), so no cell of that size straddles two parts."""
    down, size = grid.tiles_down, grid.tile_size
    lattice = unit_lattice(grid)
    if lattice is not None:
        cuts = {0, down}
        for boundary in lattice.boundaries():
            start, stop = seam_rows(lattice, boundary, grid.output_height)
            last = -(-stop // size)  # the first cell row past the seam
            cuts.update((start // size // align * align, min(down, -(-last // align) * align)))
        return Parts(tuple(sorted(cuts)))
    fits = max(1, max_slice_pixels // max(1, grid.output_width * size))
    height = min(PART_ROWS, fits)
    count = max(1, down // height) if height == PART_ROWS else math.ceil(down / height)
    base, extra = divmod(down, count)
    starts, at = [0], 0
    for index in range(count):
        at += base + (1 if index < extra else 0)
        starts.append(at)
    if align > 1:
        starts = sorted({*(c // align * align for c in starts[:-1]), down})
    return Parts(tuple(starts))
