"""Choosing and painting a part whose cells have several sizes (``cells`` plans which).

Each size is a grid of its own (the part's cell image box-reduced by the size, ``SUB`` pixels
per cell), matched on the same features as a single-size mosaic, against the library at that
size (``library_features``: tiles of ``size × tile_size`` pixels), largest size first. Variety
is counted over photos (a group of near-duplicates is one photo, ``TileLibrary.group_of``),
whatever their size:

- cells of one size: the variety rule on their own grid (``variety.choose_varied`` with only
  the planned cells present): no photo within ``distance`` cells of that size;
- cells of two sizes: no photo within ``distance`` base cells of a larger cell holding it,
  rectangle to rectangle. A smaller cell that breaks it takes its next-best photo that is free
  (``_apart``), one by one in row order;
- across a part border the sizes' border rows draw on disjoint shares of the library
  (``choose_varied(share=)``), as the rows of one size already do.

A large photo's layout is seen from afar (at the base grid a 4× photo is 4 × 4 pixels, its
sub-cells), so its matching weighs the layout more against the colour the larger the cell
(``at_size``). The plan from the target alone (``cells.plan_cells``) is where a block may
be large; the library decides where it is: a large cell whose chosen photo, seen from afar (one
pixel per base cell, corrected as it will be painted), lies more than ``FIT_DELTA_E`` (RMS ΔE76)
from its block's base-cell colours splits into cells of the size below, chosen at that size
(``far_view.far_error``; split by fit); a block whose nearest photo already misfits splits
before the varied choice at its size. Each block is decided alone, so any slicing of the parts
gives the same plan; painting and the tile map read it back from the choice (``cells.plan_of``: a
block is one cell where all its base cells hold one candidate). Each placed photo is
corrected as a whole (``correction.reach``: its offset and, where its range stops it, its
gain), as in a single-size mosaic; the levelling of flat patches is left out (a calm area is
now one large photo, not twenty small ones).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np
from PIL import Image

from .cells import (
    base_lab,
    keep_plan,
    kept_plan,
    level_image,
    origins,
    plan_cells,
    plan_of,
    plan_with_colours,
)
from .compose import compose
from .correction import add_shift, cell_means, contract, luma_spread, reach, tile_colours
from .far_view import far_error
from .grid import Grid, cell_image
from .library import TileLibrary
from .library_features import (
    _mirror,
    _sub_cells,
    _weights,
    candidate_tiles,
    tile_features,
    tile_index,
)
from .matching import best
from .options import RenderOptions
from .parts import Parts
from .signatures import SUB, features
from .tile_index import nearest_tiles
from .variety import _border_rows, choose_varied, feasible_distance, graph_size, seed_number, tile_classes, tile_graph

PAINT_BYTES = 1 << 24  # tile pixels gathered per step
LAYOUT_GROWTH = 2.0  # measured: horse at tile 8, far SSIM 0.49 at 1, 0.60 at 2, 0.68 at 4 (far ΔE00 3.8, 4.4, 5.1)
FIRST_CHOICES = 64  # next-best photos looked at first for a cell that must give way
FIT_DELTA_E: float | None = 4.0  # a large cell whose photo seen from afar lies farther (RMS ΔE76) from its block splits


def choose_part(
    cells: np.ndarray,
    library: TileLibrary,
    tile_size: int,
    seed: str,
    row_offset: int,
    options: RenderOptions,
    *,
    border_below: bool,
) -> np.ndarray:
    """``(rows, cols) int32``: for every base cell, the candidate of the cell that covers it
    (at that cell's size). ``row_offset``: the part's first row, a multiple of the largest size."""
    rows, cols = cells.shape[0] // SUB, cells.shape[1] // SUB
    sizes = options.cell_sizes
    lab = base_lab(cells)  # the far check reads the base cells' colours too
    upper = plan_with_colours(cells, sizes, options.split, lab)
    keep_plan(cells, sizes, options.split, upper)  # for painting
    plan = upper.copy()  # split further below where a chosen photo fits its block badly
    levels: dict[int, np.ndarray] = {}
    count = len(library)
    group = library.group_of()  # near-duplicates are one photo (``TileLibrary.group_of``)
    choice = np.full((rows, cols), -1, np.int32)
    placed = np.full((rows, cols), -1, np.int64)  # the photo (group) of every larger cell placed so far
    for order, size in enumerate(reversed(sizes)):
        present = origins(plan, size)
        if not present.any():
            continue
        big = size * tile_size
        matching = at_size(options, size)
        structure, colour = _weights(matching, big)
        candidates = tile_features(library, big, matching)
        image = level_image(cells, size)
        level_sub = _sub_cells(image)
        level_rows, level_cols = present.shape
        d = feasible_distance(options.variety, library.group_count // len(sizes)) if options.variety else 0
        fits = None  # split by fit: the check reads the cells' mean colours, once per level
        guess = None  # each present cell's nearest photo, where the early split read it
        if size > 1 and FIT_DELTA_E is not None:
            fits = functools.partial(_fitting, plan, lab, cell_means(image), library, size, tile_size, options)
        if d:
            flat = np.flatnonzero(present)  # only the present cells' features are read (each cell's are its own)
            wanted = np.zeros((present.size, candidates.shape[1]), np.float32)
            wanted[flat] = features(level_sub[flat], structure=structure, colour=colour)
            if fits is not None:
                # A block whose nearest photo already misfits splits before the varied choice,
                # which would give it that photo or one farther in matching: that choice's cost
                # was mostly spent on blocks that split anyway (docs/engine.md, the render CPU).
                guess = np.full(present.shape, -1, np.int32)
                guess.flat[flat] = nearest_tiles(wanted[flat], candidates, tile_index(library, big, matching))
                present = fits(present, guess)
                if not present.any():
                    continue
            width = graph_size(d)
            key = ("graph", big, structure, colour, _mirror(matching, big), width)
            graph = library.cached(key, functools.partial(tile_graph, candidates, width))
            level = choose_varied(
                wanted,
                candidates,
                rows=level_rows,
                cols=level_cols,
                row_offset=row_offset // size,
                distance=options.variety,
                seed=seed,
                distinct=count,
                graph=graph,
                index=tile_index(library, big, matching),
                border_below=border_below,
                present=present,
                share=(order, len(sizes)),
                groups=group,
                nearest_known=None if guess is None else guess.ravel(),
            )
            key_of = group[np.arange(candidates.shape[0]) % count]
            allowed = functools.partial(_allowed, key_of, library.group_count, d, seed, (order, len(sizes)))
            border = _border_rows(level_rows, row_offset // size, d, border_below)
            _apart(level, present, size, placed, wanted, candidates, d, key_of, allowed, border, row_offset // size)
        else:
            wanted = features(level_sub, structure=structure, colour=colour)
            level = nearest_tiles(wanted, candidates, tile_index(library, big, matching)).reshape(present.shape)
        levels[size] = level
        if fits is not None:
            # A cell that kept its guess was checked with that photo already.
            checked = present if guess is None else present & (level != guess)
            present = fits(checked, level) | (present & ~checked)
        whole = np.repeat(np.repeat(np.where(present, level, -1), size, axis=0), size, axis=1)
        area = (slice(0, level_rows * size), slice(0, level_cols * size))
        mine = whole >= 0
        choice[area][mine] = whole[mine]
        placed[area][mine] = group[whole[mine] % count]
    _keep_recoverable(choice, plan, upper, levels, sizes)
    return choice


def _fitting(
    plan: np.ndarray,
    lab: np.ndarray,
    means: np.ndarray,
    library: TileLibrary,
    size: int,
    tile_size: int,
    options: RenderOptions,
    present: np.ndarray,
    level: np.ndarray,
) -> np.ndarray:
    """``present`` without the cells of ``size`` whose photo in ``level`` lies farther than
    ``FIT_DELTA_E`` from its block seen from afar (``far_view.far_error``); ``plan`` splits those blocks
    into cells of the size below, in place. ``means``: the level's cells' mean colours."""
    assert FIT_DELTA_E is not None
    misfit = present & (far_error(means, lab, level, present, library, size, tile_size, options) > FIT_DELTA_E)
    if misfit.any():
        sizes = options.cell_sizes
        rows, cols = present.shape
        split = np.repeat(np.repeat(misfit, size, axis=0), size, axis=1)
        plan[: rows * size, : cols * size][split] = sizes[sizes.index(size) - 1]
    return present & ~misfit


def _keep_recoverable(
    choice: np.ndarray, plan: np.ndarray, upper: np.ndarray, levels: dict[int, np.ndarray], sizes: tuple[int, ...]
) -> None:
    """Painting reads the plan back from the choice (``cells.plan_of``): a split block whose
    cells all took one photo (only without variety) takes back, in place, its large cell."""
    read = plan_of(upper, choice, sizes)
    if (read == plan).all():
        return
    for size in sizes[1:]:
        back = origins(read, size) & ~origins(plan, size)
        if not back.any() or size not in levels:
            continue
        whole = np.repeat(np.repeat(np.where(back, levels[size], -1), size, axis=0), size, axis=1)
        area = choice[: whole.shape[0], : whole.shape[1]]
        area[whole >= 0] = whole[whole >= 0]


def cell_sizes(image: Image.Image, grid: Grid, options: RenderOptions, choice: np.ndarray) -> np.ndarray:
    """``(tiles_down, tiles_across) uint8``: the size of the cell covering each base cell, as
    the render planned it for ``choice`` (its placement; the tile map's rectangles)."""
    return band_cell_sizes(cell_image(image, grid), options, choice)


def band_cell_sizes(
    cells: np.ndarray, options: RenderOptions, choice: np.ndarray, *, parts: Parts | None = None, row_offset: int = 0
) -> np.ndarray:
    """``cell_sizes`` of a band of whole parts: ``cells``, its cell image, starts on a multiple
    of the largest size, so its blocks are planned as in the whole grid. With the grid's
    ``parts`` (the band's first row ``row_offset``), each part's plan is the one its choice and
    painting kept (``kept_plan``), not planned a third time."""
    sizes, split = options.cell_sizes, options.split
    if parts is None:
        return plan_of(plan_cells(cells, sizes, split), choice, sizes)
    band = range(row_offset, row_offset + choice.shape[0])
    upper = [
        kept_plan(cells[(part.start - row_offset) * SUB : (part.stop - row_offset) * SUB], sizes, split)
        for part in parts.within(band)
    ]
    return plan_of(np.concatenate(upper), choice, sizes)


def at_size(options: RenderOptions, size: int) -> RenderOptions:
    """The matching options of cells of ``size``: a large photo's layout is seen from afar (a
    cell of size 4 has one sub-cell per base cell), so it weighs ``LAYOUT_GROWTH ** (size - 1)``
    times more against the colour than a base cell's (2 at size 2, 8 at size 4)."""
    if size == 1:
        return options
    return dataclasses.replace(options, colour_weight=options.colour_weight / LAYOUT_GROWTH ** (size - 1))


def _allowed(key_of: np.ndarray, count: int, d: int, seed: str, share: tuple[int, int]) -> list[np.ndarray]:
    """The candidates each border class may use, as ``choose_varied`` deals them (``key_of``:
    each candidate's group, ``count`` groups)."""
    classes = tile_classes(count, (d + 1) * share[1] - 1, seed_number(seed))[key_of]
    return [np.flatnonzero(classes == share[0] * (d + 1) + q) for q in range(d + 1)]


def _apart(
    level: np.ndarray,
    present: np.ndarray,
    size: int,
    placed: np.ndarray,
    wanted: np.ndarray,
    candidates: np.ndarray,
    d: int,
    key_of: np.ndarray,
    allowed: Callable[[], list[np.ndarray]],
    border: np.ndarray,
    level_offset: int,
) -> None:
    """Move, in place, every cell of ``level`` whose photo a larger cell holds within ``d``
    base cells to its best photo free of both sizes (row order: the result is fixed). A photo
    is its group (``key_of[candidate]``): near-duplicates count as one."""
    if (placed < 0).all():  # no larger cell holds a photo: none to keep apart from
        return
    keys = np.where(present, key_of[level], -1)  # each cell's photo, -1 where absent (no photo is -1)
    hit = _near_larger(keys, size, placed, d) & present
    level_cols = level.shape[1]
    cells = np.argwhere(hit)
    if not cells.size:
        return
    shares = allowed()  # what each border class may use: only when some cell must give way
    pools = [None if border_row is None else shares[border_row] for border_row in (None, *range(d + 1))]
    group = np.where(border[cells[:, 0]], 1 + (cells[:, 0] + level_offset) % (d + 1), 0)
    ranked = np.empty((len(cells), FIRST_CHOICES), np.int64)
    for g in np.unique(group):  # the next-best photos of every cell that must give way, one search per share
        members = pools[g]
        pool = candidates if members is None else candidates[members]
        mine = np.flatnonzero(group == g)
        found, _ = best(wanted[cells[mine, 0] * level_cols + cells[mine, 1]], pool, FIRST_CHOICES)
        found = found if members is None else members[found]
        ranked[mine] = -1
        ranked[mine, : found.shape[1]] = found
    first_keys = np.where(ranked >= 0, key_of[ranked], -1).tolist()
    for (i, j), first, first_key, g in zip(cells.tolist(), ranked.tolist(), first_keys, group.tolist()):
        r0, c0 = i * size, j * size
        near = placed[max(0, r0 - d) : r0 + size + d, max(0, c0 - d) : c0 + size + d]
        same = keys[max(0, i - d) : i + d + 1, max(0, j - d) : j + d + 1]
        taken = {*near.ravel().tolist(), *same.ravel().tolist()}
        free = next((t for t, k in zip(first, first_key) if t >= 0 and k not in taken), None)
        if free is None:  # rare: every photo of the short list is taken nearby; rank the whole share
            members = pools[g]
            pool = candidates if members is None else candidates[members]
            order, _ = best(wanted[i * level_cols + j][None], pool, pool.shape[0])
            order = order[0] if members is None else members[order[0]]
            free = next(t for t in order.tolist() if int(key_of[t]) not in taken)  # feasible_distance leaves one
        level[i, j] = free
        keys[i, j] = key_of[free]


def _near_larger(photo: np.ndarray, size: int, placed: np.ndarray, d: int) -> np.ndarray:
    """``photo``'s cells (a grid of cells of ``size``) whose photo ``placed`` holds within ``d``
    base cells of the cell's rectangle."""
    rows, cols = photo.shape
    pad = d + size
    around = np.pad(placed, pad, constant_values=-1)
    hit = np.zeros(photo.shape, bool)
    for dy in range(-d, size + d):
        for dx in range(-d, size + d):
            view = around[pad + dy : pad + dy + rows * size : size, pad + dx : pad + dx + cols * size : size]
            hit |= view == photo
    return hit & (photo >= 0)


def paint_part(
    cells: np.ndarray,
    choice: np.ndarray,
    library: TileLibrary,
    *,
    tile_size: int,
    options: RenderOptions,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The pixels of a part whose cells are chosen (``choose_part``): every cell's photo at its
    size, moved as a whole toward its cell's colour."""
    rows, cols = choice.shape
    if out is None:
        out = np.empty((rows * tile_size, cols * tile_size, 3), np.uint8)
    plan = plan_of(kept_plan(cells, options.cell_sizes, options.split), choice, options.cell_sizes)
    for size in options.cell_sizes:  # smallest first: size 1 places every cell, larger ones paint over theirs
        present = origins(plan, size)
        if present.any():
            _paint_size(cells, choice, library, size, tile_size, options, present, out)
    return out


def _paint_size(
    cells: np.ndarray,
    choice: np.ndarray,
    library: TileLibrary,
    size: int,
    tile_size: int,
    options: RenderOptions,
    present: np.ndarray,
    out: np.ndarray,
) -> None:
    big = size * tile_size
    level_rows, level_cols = present.shape
    ri, ci = np.nonzero(present)
    chosen = choice[ri * size, ci * size]
    tiles = candidate_tiles(library, big, options)
    if options.correction:
        means, low, high = library.cached(("tile-colours", big), lambda: tile_colours(library.tiles(big)))
        spread = library.cached(("tile-spread", big), lambda: luma_spread(library.tiles(big)))
        which = chosen % len(library)  # a mirror image has its tile's colours
        targets = cell_means(level_image(cells, size))[ri * level_cols + ci]
        shift, gain = reach(targets, means[which], low[which], high[which], spread[which], options.correction)
    if size == 1:  # most cells: placed whole as at one size, the larger cells painted over them after
        compose(np.where(present, choice, 0), tiles, out)
        if options.correction:
            whole_gain = np.ones(present.shape, np.float32)
            whole_means = np.zeros((*present.shape, 3), means.dtype)
            whole_shift = np.zeros((*present.shape, 3), shift.dtype)
            whole_gain[ri, ci], whole_means[ri, ci], whole_shift[ri, ci] = gain, means[which], shift
            contract(out, whole_gain, whole_means)
            add_shift(out, whole_shift)
        return
    view = out[: level_rows * big, : level_cols * big].reshape(level_rows, big, level_cols, big, 3)
    step = max(1, PAINT_BYTES // (big * big * 3))
    for start in range(0, chosen.size, step):
        part = slice(start, start + step)
        n = chosen[part].size
        strip = np.ascontiguousarray(tiles[chosen[part]].transpose(1, 0, 2, 3)).reshape(big, n * big, 3)
        if options.correction:
            contract(strip, gain[part][None], means[which[part]][None])
            add_shift(strip, shift[part][None])
        view[ri[part], :, ci[part]] = strip.reshape(big, n, big, 3).transpose(1, 0, 2, 3)
