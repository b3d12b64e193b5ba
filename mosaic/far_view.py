"""A large cell's photo seen from afar, against its block: how ``sized`` splits by fit.

From afar a base cell is one pixel, so a photo in a cell of ``size`` base cells is
``size`` × ``size`` pixels there: the mean of its sub-cells over each base cell, corrected as
painting will correct it (``correction.reach``). ``far_error`` is the RMS ΔE76 between those
pixels and the block's own base-cell colours; ``sized`` splits a block whose photo lies farther
than its limit into cells of the size below.
"""

from __future__ import annotations

import numpy as np

from .correction import luma_spread, reach, tile_colours
from .library import TileLibrary
from .library_features import _mirror, candidate_sub_cells
from .options import RenderOptions
from .signatures import SUB, srgb_to_lab


def far_error(
    means_of_cells: np.ndarray,
    lab: np.ndarray,
    level: np.ndarray,
    present: np.ndarray,
    library: TileLibrary,
    size: int,
    tile_size: int,
    options: RenderOptions,
) -> np.ndarray:
    """``level``'s shape: the RMS ΔE76, over its base cells, between each present cell's photo
    seen from afar (one pixel per base cell, corrected as painting corrects it) and its block's
    base-cell mean colours (0 where absent). ``means_of_cells``: the cells' mean colours at ``size``;
    ``lab``: the base cells' colours (``cells.base_lab``)."""
    big = size * tile_size
    level_rows, level_cols = present.shape
    ri, ci = np.nonzero(present)
    out = np.zeros(present.shape)
    if not ri.size:
        return out
    chosen = level[ri, ci]
    far = far_views(library, size, tile_size, options)[chosen]  # one pixel per base cell
    if options.correction:
        means, low, high = library.cached(("tile-colours", big), lambda: tile_colours(library.tiles(big)))
        spread = library.cached(("tile-spread", big), lambda: luma_spread(library.tiles(big)))
        which = chosen % len(library)
        targets = means_of_cells[ri * level_cols + ci]
        shift, gain = reach(targets, means[which], low[which], high[which], spread[which], options.correction)
        mean = means[which].astype(np.float64)[:, None, None]
        far = mean + gain[:, None, None, None] * (far - mean) + shift[:, None, None]
    far = np.clip(np.rint(far), 0, 255).astype(np.uint8)
    block = lab[: level_rows * size, : level_cols * size].reshape(level_rows, size, level_cols, size, 3)
    difference = ((srgb_to_lab(far) - block[ri, :, ci]) ** 2).sum(axis=-1)  # block: (n, size, size, 3)
    out[ri, ci] = np.sqrt(difference.mean(axis=(1, 2)))
    return out


def far_views(library: TileLibrary, size: int, tile_size: int, options: RenderOptions) -> np.ndarray:
    """``(candidates, size, size, 3) float64``: every candidate at ``size`` seen from afar, one
    pixel per base cell (the mean of its sub-cells there), once per library."""
    big = size * tile_size

    def make() -> np.ndarray:
        step = SUB // size
        sub = candidate_sub_cells(library, big, options).astype(np.float64)
        return sub.reshape(-1, size, step, size, step, 3).mean(axis=(2, 4))

    return library.cached(("far-views", big, size, _mirror(options, big)), make)
