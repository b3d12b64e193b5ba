"""Painting a band whose tiles are chosen: placed, corrected as whole tiles, and (optionally)
overlaid with the target — ``render_band`` calls ``paint`` for each part."""

from __future__ import annotations

import numpy as np

from . import detail
from .compose import compose
from .correction import (
    add_shift,
    cell_means,
    contract,
    luma_spread,
    offsets,
    offsets_rgb,
    reach,
    shift_sub_cells,
    tile_colours,
)
from .levelling import even_out
from .library import TileLibrary
from .library_features import _box_means, _mirror, _sub_cells, candidate_sub_cells, candidate_tiles
from .options import RenderOptions
from .overlay import overlay_toward
from .signatures import SUB, cell_pixels


def _arrange_sub(sub: np.ndarray, rows: int, cols: int) -> np.ndarray:
    return sub.reshape(rows, cols, SUB, SUB, 3).transpose(0, 2, 1, 3, 4).reshape(rows * SUB, cols * SUB, 3)


def paint(
    cells: np.ndarray,
    choice: np.ndarray,
    library: TileLibrary,
    *,
    tile_size: int,
    options: RenderOptions,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The pixels of a band whose tiles are chosen: placed, corrected and (optionally) overlaid.
    ``out``: an array (a view of a larger image) to paint into, by default a new one."""
    if not options.overlay:
        out = compose(choice, candidate_tiles(library, tile_size, options), out)
        return _correct_whole(out, cells, choice, library, tile_size, options) if options.correction else out
    return _overlaid(cells, choice, library, tile_size, options, out)


def _overlaid(
    cells: np.ndarray,
    choice: np.ndarray,
    library: TileLibrary,
    tile_size: int,
    options: RenderOptions,
    out: np.ndarray | None,
) -> np.ndarray:
    """``paint`` with an overlay: the tiles placed (into ``out``), shifted, then the target
    painted over them in place (``overlay_toward``)."""
    rows, cols = choice.shape
    tiles = candidate_tiles(library, tile_size, options)
    shift = _shifts(cells, choice, library, tile_size, options) if options.correction else None
    if cell_pixels(tile_size) == 1:
        means = library.cached(("means", tile_size), lambda: _box_means(library.tiles(tile_size)))[
            choice % len(library)
        ]
        out = compose(choice, tiles, out)
        if shift is not None:
            add_shift(out, shift)
            means = shift_sub_cells(means.reshape(-1, 1, 1, 3), shift.reshape(-1, 3)).reshape(means.shape)
        return overlay_toward(out, cells, means, options.overlay)
    if not options.match_contrast:
        out = compose(choice, tiles, out)
        sub = candidate_sub_cells(library, tile_size, options)[choice.ravel()]
        if shift is not None:
            add_shift(out, shift)
            sub = shift_sub_cells(sub, shift.reshape(-1, 3))
        return overlay_toward(out, cells, _arrange_sub(sub, rows, cols), options.overlay)
    out, placed, levels = _compose_matched(cells, choice, library, tile_size, options, out)
    if shift is not None:
        add_shift(out, shift)
        placed = _arrange_sub(shift_sub_cells(_sub_cells(placed), shift.reshape(-1, 3)), rows, cols)
    local = detail.local_overlay(levels, options.overlay).reshape(rows, cols)
    local = np.repeat(np.repeat(local, SUB, axis=0), SUB, axis=1)  # per sub-cell, as the overlay reads it
    return overlay_toward(out, cells, placed, options.overlay, local, cell=SUB)


def _correct_whole(
    out: np.ndarray, cells: np.ndarray, choice: np.ndarray, library: TileLibrary, tile_size: int, options: RenderOptions
) -> np.ndarray:
    """The default correction of a composed band, in place: each placed tile's offset and,
    where its range stops it short, the gain that makes room (``correction.reach``). With
    an overlay the target painted over does that reaching: ``_shifts`` alone."""
    if cell_pixels(tile_size) == 1:
        return add_shift(out, _shifts(cells, choice, library, tile_size, options))
    which, means, low, high = _placed_colours(choice, library, tile_size)
    spread = library.cached(("tile-spread", tile_size), lambda: luma_spread(library.tiles(tile_size)))[which]
    targets = cell_means(cells)
    shift, gain = reach(targets, means, low, high, spread, options.correction)
    even_out(targets, means, low, high, spread, options.correction, shift, gain, choice.shape)
    contract(out, gain.reshape(choice.shape), means.reshape((*choice.shape, 3)))
    return add_shift(out, shift.reshape((*choice.shape, 3)))


def _shifts(
    cells: np.ndarray, choice: np.ndarray, library: TileLibrary, tile_size: int, options: RenderOptions
) -> np.ndarray:
    """``(rows, cols, 3) int16``: the whole-tile offset of every placed tile (``correction``)."""
    _, means, low, high = _placed_colours(choice, library, tile_size)
    if cell_pixels(tile_size) == 1:
        shift = offsets_rgb(cells.reshape(-1, 3), means, low, high, options.correction)
    else:
        shift = offsets(cell_means(cells), means, low, high, options.correction)
    return shift.reshape((*choice.shape, 3))


def _placed_colours(choice: np.ndarray, library: TileLibrary, tile_size: int) -> tuple[np.ndarray, ...]:
    """For every placed tile, flat: its library index, and its mean colour and offset bounds
    (``tile_colours``, computed once per library and tile size)."""
    means, low, high = library.cached(("tile-colours", tile_size), lambda: tile_colours(library.tiles(tile_size)))
    which = choice.ravel() % len(library)  # a mirror image has its tile's colours
    return which, means[which], low[which], high[which]


def _compose_matched(
    cells: np.ndarray,
    choice: np.ndarray,
    library: TileLibrary,
    tile_size: int,
    options: RenderOptions,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``compose`` with each tile's contrast held to its cell's (``detail``).

    Returns the pixels, the placed tiles' sub-cells (as the overlay needs them) and each
    cell's gain level. Tiles at full gain are placed as they are; each distinct (tile,
    level) pair below it is made once.
    """
    rows, cols = choice.shape
    tiles = candidate_tiles(library, tile_size, options)
    sub = candidate_sub_cells(library, tile_size, options)
    mirror = _mirror(options, tile_size)
    variance = library.cached(("tile-variance", tile_size, mirror), lambda: detail.tile_variance(tiles))
    means = library.cached(("tile-means", tile_size, mirror), lambda: detail.tile_means(sub))
    flat = choice.ravel().astype(np.int64)
    levels = detail.gain_levels(_sub_cells(cells), variance[flat])
    placed = sub[flat]
    quiet = np.flatnonzero(levels < detail.STEPS)
    if not quiet.size:
        return compose(choice, tiles, out), _arrange_sub(placed, rows, cols), levels
    count = tiles.shape[0]
    unique, inverse = np.unique(levels[quiet] * count + flat[quiet], return_inverse=True)
    which, level = unique % count, unique // count
    source = np.concatenate([tiles, detail.attenuate(tiles[which], means[which], level)])  # one gather places both
    index = flat.copy()
    index[quiet] = count + inverse.ravel()
    placed[quiet] = detail.attenuate(sub[which], means[which], level)[inverse.ravel()]
    return compose(index.reshape(rows, cols), source, out), _arrange_sub(placed, rows, cols), levels
