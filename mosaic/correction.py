"""Whole-tile colour correction: each placed tile moved as one piece toward its cell's colour.

A photomosaic promises two things: from afar the target, up close every cell a real
photograph. Painting the target over the tiles (``blend``, the overlay) keeps only the
first. This correction keeps both: every pixel of a placed tile gets the same offset, so
its layout and its contrast are the photo's own, and only its mean colour moves.

The move is made in CIELAB, where distance follows perceived colour difference: the
tile's mean chroma (a*, b*) goes ``percent`` % of the way to its cell's mean, its mean
lightness (L*) ``LIGHTNESS`` times as far (capped at all the way), and the sRGB offset
between the tile's mean and that colour is added to every pixel (gamma-encoded sRGB,
where a uniform offset keeps the tile's luma layout exactly). Lightness counts more
because from afar the eye reads the photo's structure from it (measured at 50 %: moving
lightness 75 % instead of 50 % raised SSIM at the cell grid from below a repeating
program's to above it on the photos tried, 87.5 % also on coffee's pale cup and table, for
about 1 ΔE00 more colour moved), while a tile's hue is what up close says "recoloured". The offset is bounded
per channel by the tile's own range (its ``TAIL``-th darkest and brightest pixels), so
at most a sliver of highlights or shadows clips: a bright tile in a black cell stops
where it would lose its highlights, and the matcher prefers tiles that fit
(``signatures``: the cost of a candidate counts what the correction cannot fix).

Everything reads only the cell's own pixels and its tile, and the Lab round trip is
lookup tables and elementwise IEEE arithmetic: a band corrected alone equals the band
within the whole render, on every machine.
"""

from __future__ import annotations

import numpy as np

from .blend import _saturating_add
from .signatures import SUB, lab_to_srgb, srgb_to_lab

LIGHTNESS = 1.75  # lightness moves this many times ``percent`` (at most all the way), chroma ``percent``
TAIL = 0.03  # share of a tile's pixels per side that may clip under the offset
CORRECT_BYTES = 1 << 20  # output bytes corrected per step: the strip stays in cache


def tile_colours(tiles: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tile: its mean colour ``(N, 3) int32`` (rounded half up), and the lowest and
    highest offset ``(N, 3) int32`` each channel takes before more than ``TAIL`` of its
    pixels clip."""
    n = tiles.shape[0]
    flat = tiles.reshape(n, -1, 3)
    count = flat.shape[1]
    means = (2 * flat.astype(np.int64).sum(axis=1) + count) // (2 * count)
    k = int(TAIL * count)
    ordered = np.partition(flat, (k, count - 1 - k), axis=1)
    low = -ordered[:, k].astype(np.int32)
    high = 255 - ordered[:, count - 1 - k].astype(np.int32)
    return means.astype(np.int32), low, high


def cell_means(cell_sub: np.ndarray) -> np.ndarray:
    """``(n, SUB, SUB, 3) uint8`` -> each cell's mean colour, ``(n, 3) uint8`` rounded half up."""
    total = cell_sub.reshape(cell_sub.shape[0], -1, 3).astype(np.int32).sum(axis=1)
    count = SUB * SUB
    return ((2 * total + count) // (2 * count)).astype(np.uint8)


def offsets(targets: np.ndarray, means: np.ndarray, low: np.ndarray, high: np.ndarray, percent: int) -> np.ndarray:
    """``(n, 3) int16``: the offset of each placed tile.

    ``targets``: each cell's mean colour ``(n, 3) uint8``; ``means``, ``low``, ``high``:
    its tile's (``tile_colours``, gathered by the choice).
    """
    if percent <= 0:
        return np.zeros(targets.shape, np.int16)
    start = srgb_to_lab(means.astype(np.uint8))
    share = np.array([min(1.0, LIGHTNESS * percent / 100.0), percent / 100.0, percent / 100.0])
    goal = start + share * (srgb_to_lab(targets) - start)
    shift = lab_to_srgb(goal).astype(np.int32) - means
    return np.clip(shift, low, high).astype(np.int16)


def offsets_rgb(targets: np.ndarray, means: np.ndarray, low: np.ndarray, high: np.ndarray, percent: int) -> np.ndarray:
    """``offsets`` interpolated in sRGB, in exact integers: for tiles of 1–3 pixels (up to
    40 M cells, no layout to keep), where a Lab round trip per cell would cost seconds."""
    diff = targets.astype(np.int32) - means
    shift = (2 * percent * diff + 100) // 200
    return np.clip(shift, low, high).astype(np.int16)


def add_shift(out: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """Move each cell of a composed mosaic ``out`` by its ``shift`` (``(rows, cols, 3)``), in place.

    Saturating uint8 adds of one row of offsets per cell row, repeated to the tile width
    and broadcast over the tile's rows (``blend._saturating_add``): no int16 copy of the
    mosaic. Offsets beyond ±127 (only at high corrections) take more passes.
    """
    rows, cols = shift.shape[:2]
    s = out.shape[0] // rows
    step = max(1, CORRECT_BYTES // max(1, cols * s * s * 3))
    for r in range(0, rows, step):
        rest = shift[r : r + step].astype(np.int16)
        view = out[r * s : (r + rest.shape[0]) * s].reshape(rest.shape[0], s, cols * s, 3)
        while rest.any():  # one pass at the default; each adds at most ±127
            amount = np.clip(rest, -127, 127)
            _saturating_add(view, np.repeat(amount.astype(np.int8), s, axis=1), 1)
            rest = rest - amount
    return out


def shift_sub_cells(sub: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """The placed tiles' sub-cells ``(n, SUB, SUB, 3) uint8`` moved by their offsets ``(n, 3)``."""
    moved = sub.astype(np.int16) + shift[:, None, None, :]
    return np.clip(moved, 0, 255).astype(np.uint8)
