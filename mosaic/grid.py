"""The mosaic grid: how many cells, how big the output, how the rows are cut into slices.

The output-size rule (README, "Rendering offline"): one cell per source pixel when the output
(cells × tile_size²) stays under ``auto_output_pixels`` (40 MP: fast, a 35 x 25 cm print),
otherwise the largest grid that fits. An explicit ``tiles_across`` is honoured up to
``max_output_pixels`` (400 MP: giant prints), clamped the same way. ``min_slices``: a big
mosaic is cut into enough slices that none holds more than ``MAX_SLICE_PIXELS``. Everything here is
cheap and pure so the web page can show the final size before the job is submitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image

from .limits import DEFAULT_AUTO_OUTPUT_PIXELS, DEFAULT_MAX_OUTPUT_PIXELS, MAX_SLICE_PIXELS, MAX_TILE_SIZE
from .signatures import SUB, cell_pixels


@dataclass(frozen=True)
class Grid:
    """A mosaic layout: ``tiles_across`` × ``tiles_down`` cells of ``tile_size`` pixels."""

    tiles_across: int
    tiles_down: int
    output_width: int
    output_height: int
    tile_size: int = 1

    @property
    def cells(self) -> int:
        return self.tiles_across * self.tiles_down

    @property
    def output_pixels(self) -> int:
        return self.output_width * self.output_height


def _rows(width: int, height: int, across: int) -> int:
    return max(1, round(height * across / width))


def plan_grid(
    width: int,
    height: int,
    *,
    tile_size: int,
    tiles_across: int | None = None,
    max_output_pixels: int = DEFAULT_MAX_OUTPUT_PIXELS,
    auto_output_pixels: int = DEFAULT_AUTO_OUTPUT_PIXELS,
) -> Grid:
    """The grid for a ``width`` × ``height`` target; ValueError when no grid can fit."""
    if tiles_across is None:  # no size asked for: the fast default, never above the hard cap
        max_output_pixels = min(max_output_pixels, auto_output_pixels)
    if width < 1 or height < 1:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if not 1 <= tile_size <= MAX_TILE_SIZE:
        raise ValueError(f"tile size must be 1..{MAX_TILE_SIZE}, got {tile_size}")
    if tiles_across is not None and tiles_across < 1:
        raise ValueError(f"tiles across must be at least 1, got {tiles_across}")
    max_cells = max_output_pixels // (tile_size * tile_size)
    if max_cells < 1:
        raise ValueError(
            f"a single {tile_size}x{tile_size} tile is larger than the maximum output of {max_output_pixels:,} pixels"
        )
    across = width if tiles_across is None else tiles_across
    if across * _rows(width, height, across) > max_cells:
        # Largest n with n * rows(n) <= max_cells; rows(n) grows with n, so search down from
        # the estimate (and up, in case rounding left room).
        n = max(1, min(across, math.isqrt(max(1, int(max_cells * width / height)))))
        while n > 1 and n * _rows(width, height, n) > max_cells:
            n -= 1
        while n < across and (n + 1) * _rows(width, height, n + 1) <= max_cells:
            n += 1
        if n * _rows(width, height, n) > max_cells:
            raise ValueError(
                f"a {width}x{height} image cannot be made into a mosaic of {tile_size}-pixel "
                f"tiles under {max_output_pixels:,} pixels"
            )
        across = n
    down = _rows(width, height, across)
    return Grid(across, down, across * tile_size, down * tile_size, tile_size)


def min_slices(grid: Grid, *, max_slice_pixels: int = MAX_SLICE_PIXELS) -> int:
    """The fewest slices that keep every slice under ``max_slice_pixels`` (at most one per row)."""
    rows_per_slice = max(1, max_slice_pixels // max(1, grid.output_width * grid.tile_size))
    return min(grid.tiles_down, math.ceil(grid.tiles_down / rows_per_slice))


def plan_bands(tiles_down: int, slices: int) -> list[range]:
    """Cut ``tiles_down`` rows of cells into ``slices`` bands of whole rows, sizes differing by ≤ 1."""
    if slices < 1:
        raise ValueError(f"slices must be at least 1, got {slices}")
    if tiles_down < 1:
        raise ValueError(f"the grid must have at least one row, got {tiles_down}")
    if slices > tiles_down:
        raise ValueError(
            f"cannot cut {tiles_down} rows of tiles into {slices} slices: use at most "
            f"{tiles_down} slices or more tiles across"
        )
    base, extra = divmod(tiles_down, slices)
    bands, start = [], 0
    for index in range(slices):
        stop = start + base + (1 if index < extra else 0)
        bands.append(range(start, stop))
        start = stop
    return bands


def cell_image(image: Image.Image, grid: Grid) -> np.ndarray:
    """The target resampled for matching: ``k`` × ``k`` pixels per cell, ``(down*k, across*k, 3) uint8``.

    ``k`` is ``SUB`` (4), or 1 for tiles smaller than that (``cell_pixels``). Box (area)
    averaging, so every cell pixel is the mean of the photo pixels it covers.
    """
    if image.mode != "RGB":
        image = image.convert("RGB")
    k = cell_pixels(grid.tile_size)
    size = (grid.tiles_across * k, grid.tiles_down * k)
    if image.size != size:
        image = image.resize(size, Image.Resampling.BOX)
    return np.asarray(image, dtype=np.uint8).copy()


def band_cells(cells: np.ndarray, band: range, *, tile_size: int = SUB) -> np.ndarray:
    """The rows of a cell image that belong to ``band`` (a range of cell rows)."""
    k = cell_pixels(tile_size)
    return cells[band.start * k : band.stop * k]


def block_sums(values: np.ndarray, size: int) -> np.ndarray:
    """The sums of ``values`` over blocks of ``size`` × ``size`` (its first two axes multiples of
    ``size``), in its dtype, as strided slices added elementwise: a tenth of the time of a
    reduction over non-adjacent axes (2 ms for a part's cell image), and the same sums on every CPU."""
    rows = values[0::size].copy()
    for i in range(1, size):
        rows += values[i::size]
    total = rows[:, 0::size].copy()
    for j in range(1, size):
        total += rows[:, j::size]
    return total
