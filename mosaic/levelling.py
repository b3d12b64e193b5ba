"""Even patches come out even: the tiles of a flat area stop at one lightness, not each at its own.

From afar each cell reads as its tile's mean colour. The correction moves every tile part of
the way to its cell, as far as the tile's own range allows (``correction.reach``), so in an
even patch of the photo (a sky, a white wall, a dark room) twenty different tiles stop at
twenty different distances from its colour: the patch comes out speckled where the photo is
smooth, and the eye reads the speckle as noise from across the room.

Where the tiles of such a patch fall short on the same side (bright tiles that would clip
before a white sky, the part of the lightness move the correction leaves), each cell's
lightness goal becomes the patch's common shortfall, the mean of its flat neighbours': a tile
that could get closer stops there with the others, whole (a tile gives up contrast only to
reach further, never to go less far), and one that stops short of it only because the
correction's own move ends there goes on to it. A tile its range stops keeps its move; so
does a cell whose tile lands on the other side of the colour, and a patch whose tiles land
close on both sides (nothing to even out). Only lightness is evened: the chroma keeps the
move it had, within the budget (``correction.within_budget``).

The patch is read within the rows painted together (a band, or a giant job's choice segment):
its edge is the band's, so a band painted alone equals the band within the whole render.
Pure NumPy, separable box filters: a few milliseconds per million cells.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .correction import offsets, reach, wanted
from .signatures import srgb_to_lab

RADIUS = 2  # a cell's patch: the cells within 2 rows and columns (5 × 5)
FLAT = 6.0  # a patch is flat where its cells' L*, a* and b* each span at most this much
GATE = 1.0  # L*: a patch's common shortfall under which its cells keep their own moves


def even_out(
    targets: np.ndarray,
    means: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    spread: np.ndarray,
    percent: int,
    shift: np.ndarray,
    gain: np.ndarray,
    shape: tuple[int, int],
) -> None:
    """``correction.reach``'s ``shift`` and ``gain`` (same arguments) evened over flat patches,
    in place. ``shape``: the band's ``(rows, cols)`` of cells, flattened in the arguments.

    A tile that would stop closer to its cell than its patch's level is held back to it, whole:
    it keeps all of its contrast (it gives some up only to reach further than its range
    allows). A tile that stops short of the level because the correction's own move ends there
    goes on to it (``reach``); one its range already stops keeps its move."""
    target_lab = srgb_to_lab(targets)
    start = srgb_to_lab(means.astype(np.uint8))[:, 0]
    stops = srgb_to_lab(np.clip(means + shift, 0, 255).astype(np.uint8))[:, 0]
    goals = lightness_goals(target_lab.reshape(*shape, 3), (stops - target_lab[:, 0]).reshape(shape)).ravel()
    evened = ~np.isnan(goals)
    held = evened & (np.abs(goals - start) < np.abs(stops - start))
    cells = np.flatnonzero(held)
    if cells.size:
        shift[cells] = offsets(targets[cells], means[cells], low[cells], high[cells], percent, goals[cells])
        gain[cells] = 1
    cells = np.flatnonzero(evened & ~held)
    if cells.size:  # of the rest, the ones whose own move ends short of the level, not their range
        own = wanted(targets[cells], means[cells], percent)
        own_stop = srgb_to_lab(np.clip(means[cells] + own, 0, 255).astype(np.uint8))[:, 0]
        cells = cells[np.abs(goals[cells] - start[cells]) > np.abs(own_stop - start[cells])]
    if cells.size:
        shift[cells], gain[cells] = reach(
            targets[cells], means[cells], low[cells], high[cells], spread[cells], percent, goals[cells]
        )


def lightness_goals(target_lab: np.ndarray, shortfall: np.ndarray) -> np.ndarray:
    """``(rows, cols)`` L* goal of each cell, NaN where the cell keeps its own move.

    ``target_lab``: each cell's mean colour in CIELAB ``(rows, cols, 3)``; ``shortfall``: the
    L* at which its tile stops on its own, less the cell's ``(rows, cols)``.
    """
    flat = np.ones(shortfall.shape, bool)
    for k in range(3):
        channel = target_lab[..., k]
        flat &= _extreme(channel, np.maximum) - _extreme(channel, np.minimum) <= FLAT
    weight = flat.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        common = _box(shortfall * weight) / _box(weight)
    evened = flat & (np.abs(common) >= GATE) & (shortfall * common > 0)
    return np.where(evened, target_lab[..., 0] + common, np.nan)


def _extreme(values: np.ndarray, pick: Callable[..., np.ndarray]) -> np.ndarray:
    """``pick`` (``np.maximum`` or ``np.minimum``) over each cell's patch, the patch cut at the
    edges: one shifted comparison per row and per column of the patch."""
    size, (rows, cols) = 2 * RADIUS + 1, values.shape
    padded = np.pad(values, ((RADIUS, RADIUS), (0, 0)), mode="edge")
    down = padded[:rows].copy()
    for k in range(1, size):
        pick(down, padded[k : k + rows], out=down)
    padded = np.pad(down, ((0, 0), (RADIUS, RADIUS)), mode="edge")
    across = padded[:, :cols].copy()
    for k in range(1, size):
        pick(across, padded[:, k : k + cols], out=across)
    return across


def _box(values: np.ndarray) -> np.ndarray:
    """The sum over each cell's patch, the patch cut at the edges (running sums)."""
    size = 2 * RADIUS + 1
    rows = np.pad(values, ((RADIUS + 1, RADIUS), (0, 0))).cumsum(axis=0)
    values = rows[size:] - rows[:-size]
    cols = np.pad(values, ((0, 0), (RADIUS + 1, RADIUS))).cumsum(axis=1)
    return cols[:, size:] - cols[:, :-size]
