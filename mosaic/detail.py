"""Contrast matching for the overlay (``match_contrast``, off by default): each tile's detail held
to its cell's, and the overlay rising where the target is flat. It flattens tiles into texture:
a tile held at a quarter of its contrast is no longer a photograph up close.

The overlay moves a tile's colours toward the target but keeps its detail, and a tile's detail
is what makes a mosaic. Where the target cell itself is flat (a sky, a wall, a black
background) that detail is all error: the eye sees busy tiles where the photo is calm, and
SSIM's contrast term punishes exactly that. The variety rule makes it worse there: a flat
area must use dozens of different tiles, and a library has few truly flat ones. A program
that repeats its one flattest tile scores better there; we do not want to repeat.

So every placed tile's deviations from its own mean colour are scaled by a gain

    gain = clamp(CONTRAST · σ_cell / σ_tile, FLOOR / STEPS, 1)

σ_cell is the target cell's luma contrast (the standard deviation over its SUB × SUB
sub-cells, from the cell image), σ_tile the tile's (over its pixels at the placed size).
A tile never shows much more contrast than the cell it stands for (CONTRAST allows for
the detail a cell image cannot see inside its sub-cells), and never less than
FLOOR / STEPS of its own: in a flat area the tiles stay visible, only quieter. The gain is
quantised to STEPS levels; the tile's mean colour is kept.

The overlay then rises with the flatness: ``overlay`` % for a cell whose tile keeps its full
contrast, up to 100 % for one held at the floor (``local_overlay``). What is left of a tile's
layout in a flat cell is what the overlay leaves uncorrected, so a flat cell gets its
colour in full and a structured cell keeps its tile's own layout. And the overlay's
correction is interpolated within each tile only (``overlay_toward(cell=SUB)``): smoothed
across tile borders, it drew a ramp at every border where neighbouring tiles differ,
contrast the photo does not have (a bevelled rim on every tile in flat areas).

Both rules read only the cell's own pixels and its tile, and use exact integers (luma
sums; the level by comparing integer-valued floats, exact below 2^53): the same pixels on
every machine and for any banding. Measured (README, "The mosaic engine"): these rules
turned the last misses against ``metapixel -d 0`` (a retina photo's black background and
smooth fundus, a clock's flat wall) into wins, and raised both scores on every job of the
generalisation sweep.
"""

from __future__ import annotations

import numpy as np

from .signatures import SUB

STEPS = 8  # gain levels: FLOOR/8 .. 8/8 (``attenuate`` divides by 2·STEPS = 16 with a shift)
CONTRAST = (3, 2)  # gain = 3/2 · σ_cell / σ_tile before clamping (a ratio of integers: exact)
FLOOR = 2  # the lowest gain, in steps: a tile keeps at least 2/8 of its contrast
_LUMA = np.array([299, 587, 114], np.int64)  # Rec. 601 weights ×1000: integer luma


def _scaled_variance(pixels: np.ndarray) -> tuple[np.ndarray, int]:
    """``(n, k, 3) uint8`` -> ``k² · var(luma ×1000)`` per row (exact int64), and k."""
    y = pixels.astype(np.int64) @ _LUMA
    k = y.shape[1]
    total = y.sum(axis=1)
    squares = np.einsum("ij,ij->i", y, y)
    return k * squares - total * total, k


def tile_variance(tiles: np.ndarray) -> np.ndarray:
    """``(N,) float64``: the variance of each tile's luma (×1000)², over its pixels."""
    n, pixels = tiles.shape[0], tiles.shape[1] * tiles.shape[2]
    out = np.empty(n, np.float64)
    step = max(1, (1 << 18) // pixels)  # bounded temporaries
    for start in range(0, n, step):
        scaled, k = _scaled_variance(tiles[start : start + step].reshape(-1, pixels, 3))
        out[start : start + step] = scaled / float(k * k)
    return out


def tile_means(sub_cells: np.ndarray) -> np.ndarray:
    """``(N, 3) int32``: each tile's mean colour (of its sub-cells), rounded half up."""
    total = sub_cells.reshape(sub_cells.shape[0], -1, 3).astype(np.int32).sum(axis=1)
    count = SUB * SUB
    return (2 * total + count) // (2 * count)


def gain_levels(cell_sub: np.ndarray, tile_variance: np.ndarray) -> np.ndarray:
    """``(n,) int64``: each cell's gain in steps, FLOOR..STEPS.

    ``cell_sub``: ``(n, SUB, SUB, 3) uint8`` the cells' sub-cells; ``tile_variance``: ``(n,)``
    the variance of each cell's tile. The level is the number of j in 1..STEPS with
    (j / STEPS)² σ_tile² ≤ (CONTRAST · σ_cell)², at least FLOOR.
    """
    scaled, k = _scaled_variance(cell_sub.reshape(cell_sub.shape[0], -1, 3))
    cell_variance = scaled / float(k * k)  # k² = 256: an exact division
    num, den = CONTRAST
    right = cell_variance * float((STEPS * num) ** 2)
    level = np.zeros(cell_variance.shape, np.int64)
    for j in range(1, STEPS + 1):
        level += float((j * den) ** 2) * tile_variance <= right
    return np.clip(level, FLOOR, STEPS)


def attenuate(pixels: np.ndarray, means: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """``mean + level / STEPS · (pixel − mean)`` for each row's pixels, rounded half up, uint8.

    ``pixels``: ``(n, ..., 3) uint8``; ``means``: ``(n, 3)``; ``levels``: ``(n,)``.
    """
    shape = (pixels.shape[0],) + (1,) * (pixels.ndim - 2) + (3,)
    mean = means.astype(np.int16).reshape(shape)
    level = (2 * levels).astype(np.int16).reshape((-1,) + (1,) * (pixels.ndim - 1))
    out = pixels.astype(np.int16)  # |2·level·(pixel − mean)| ≤ 16 · 255: int16 is enough
    out -= mean
    out *= level
    out += STEPS
    out >>= 4  # ÷ 2·STEPS, rounded down (an arithmetic shift is a floor division)
    out += mean
    return np.clip(out, 0, 255).astype(np.uint8)


def local_overlay(levels: np.ndarray, overlay: int) -> np.ndarray:
    """Each cell's overlay percent: ``overlay`` at full gain, rising linearly to 100 at FLOOR."""
    span = STEPS - FLOOR
    return (overlay + ((100 - overlay) * (STEPS - np.maximum(levels, FLOOR)) + span // 2) // span).astype(np.int32)
