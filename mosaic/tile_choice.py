"""Which tile every cell gets: part by part with the variety rule, fairly (each tile at most
``max_uses`` times), or with every photo at least once (the whole grid chosen at once).

``choose_tiles`` is what a band's render runs (``mosaic.render.render_band``); ``choose_whole`` is
what the controller runs once for a job that is chosen whole, each band then carrying its rows
of that choice. The choice is made part by part (``mosaic.parts``), so any band of the same
rows chooses the same tiles. No Python loop over cells: matching by chunked matrix products.
"""

from __future__ import annotations

import numpy as np

from . import sized
from .cells import check_tile_size
from .cover import check_cover, pin_groups
from .fair import assign
from .library import ATLAS_SIZE, TileLibrary
from .library_features import (
    _box_means,
    _mirror,
    _sub_cells,
    _weights,
    tile_features,
    tile_index,
)
from .matching import nearest
from .options import DEFAULT_OPTIONS, RenderOptions
from .parts import Parts
from .signatures import SUB, cell_pixels, colour_features, features
from .tile_index import nearest_tiles
from .variety import choose_varied, feasible_distance, graph_size, seed_number, tile_graph

STRIP_CELLS = 1 << 17  # cells matched per step (see ``strips``)


def choose_tiles(
    cells: np.ndarray,
    library: TileLibrary,
    *,
    tile_size: int,
    seed: str,
    row_offset: int = 0,
    options: RenderOptions = DEFAULT_OPTIONS,
    parts: Parts | None = None,
    pins: np.ndarray | None = None,
) -> np.ndarray:
    """``(rows, cols) int32``: the candidate chosen for every cell of the band.

    ``parts``: the grid's parts (``mosaic.parts.plan_parts``); the band's rows are whole parts,
    each chosen on its own, so any band of the same rows chooses the same tiles. None: the
    band is one part, with other cells below it. Indices ``>= len(library)`` are mirror
    images (``candidate_tiles``). ``pins``: the band's rows of ``cover``'s pins ("use every
    photo": a candidate per cell, −1 where free), which the choice keeps.
    """
    rows, cols = check_cells(cells, tile_size, options)
    if options.max_uses is not None:
        return assign_fair(cells, library, tile_size=tile_size, options=options, pins=pins)
    if cell_pixels(tile_size) == 1:
        choice = _nearest_colour(cells.reshape(-1, 3), library, tile_size).reshape(rows, cols)
        return choice if pins is None else np.where(pins >= 0, pins, choice).astype(np.int32)
    k = cell_pixels(tile_size)
    choice = np.empty((rows, cols), np.int32)
    for part, below in parts_of(parts, row_offset, rows):
        first, last = part.start - row_offset, part.stop - row_offset
        if options.sized:  # cells of several sizes: ``sized`` (no pins: ``RenderOptions`` refuses them)
            choice[first:last] = sized.choose_part(
                cells[first * k : last * k], library, tile_size, seed, part.start, options, border_below=below
            )
            continue
        choice[first:last] = _choose_part(
            cells[first * k : last * k],
            library,
            tile_size,
            seed,
            part.start,
            options,
            border_below=below,
            pins=None if pins is None else pins[first:last],
        )
    return choice


def parts_of(parts: Parts | None, row_offset: int, rows: int) -> list[tuple[range, bool]]:
    """The band's parts, each with whether other cells lie below it."""
    band = range(row_offset, row_offset + rows)
    if parts is None:
        return [(band, True)]
    return [(part, part.stop < parts.rows) for part in parts.within(band)]


def _choose_part(
    cells: np.ndarray,
    library: TileLibrary,
    tile_size: int,
    seed: str,
    row_offset: int,
    options: RenderOptions,
    *,
    border_below: bool,
    pins: np.ndarray | None = None,
) -> np.ndarray:
    rows, cols = check_cells(cells, tile_size)
    structure, colour = _weights(options, tile_size)
    candidates = tile_features(library, tile_size, options)
    index = tile_index(library, tile_size, options)
    graph = None
    if options.variety:
        size = graph_size(feasible_distance(options.variety, library.group_count))
        # Keyed by what the graph depends on (not the whole options: a new correction reuses it).
        key = ("graph", tile_size, structure, colour, _mirror(options, tile_size), size)
        graph = library.cached(key, lambda: tile_graph(candidates, size))
    choice = np.empty((rows, cols), np.int32)
    for start, stop in strips(rows, cols, row_offset):
        wanted = features(_sub_cells(cells[start * SUB : stop * SUB]), structure=structure, colour=colour)
        if graph is not None:
            choice[start:stop] = choose_varied(
                wanted,
                candidates,
                rows=stop - start,
                cols=cols,
                row_offset=row_offset + start,
                distance=options.variety,
                seed=seed,
                distinct=len(library),
                graph=graph,
                index=index,
                border_below=border_below or stop < rows,
                groups=library.group_of(),
                pins=None if pins is None else pins[start:stop],
            )
        else:
            choice[start:stop] = nearest_tiles(wanted, candidates, index).reshape(stop - start, cols)
            if pins is not None:
                choice[start:stop] = np.where(pins[start:stop] >= 0, pins[start:stop], choice[start:stop])
    return choice


def assign_fair(
    cells: np.ndarray,
    library: TileLibrary,
    *,
    tile_size: int,
    options: RenderOptions,
    pins: np.ndarray | None = None,
) -> np.ndarray:
    """``(rows, cols) int32``: the fair-use choice (``options.max_uses``) for a whole cell image.

    Global by nature, so ``render`` calls it once on the whole grid and gives each band its
    rows; the controller assigns a fair-use job once and hands each band its rows for the
    same reason. ``pins``: cells already given a tile ("use every photo", ``cover``), each
    spending one use of its group.
    """
    assert options.max_uses is not None
    rows, cols = check_cells(cells, tile_size)
    wanted, candidates = matching_features(cells, library, tile_size=tile_size, options=options)
    group = library.group_of()
    if pins is None:
        return assign(wanted, candidates, distinct=len(library), max_uses=options.max_uses, groups=group).reshape(
            rows, cols
        )
    flat = pins.ravel()
    free = np.flatnonzero(flat < 0)
    taken = np.bincount(group[flat[flat >= 0] % len(library)], minlength=int(group.max()) + 1)
    choice = flat.astype(np.int32).copy()
    if free.size:
        choice[free] = assign(
            wanted[free], candidates, distinct=len(library), max_uses=options.max_uses, groups=group, taken=taken
        )
    return choice.reshape(rows, cols)


def matching_features(
    cells: np.ndarray, library: TileLibrary, *, tile_size: int, options: RenderOptions
) -> tuple[np.ndarray, np.ndarray]:
    """The whole cell image's features and the candidates' (the colour alone at 1 px per cell)."""
    if cell_pixels(tile_size) == 1:
        tile_means = library.cached(("means", tile_size), lambda: _box_means(library.tiles(tile_size)))
        candidates = library.cached(("colour-features", tile_size), lambda: colour_features(tile_means))
        return colour_features(cells.reshape(-1, 3)), candidates
    structure, colour = _weights(options, tile_size)
    return features(_sub_cells(cells), structure=structure, colour=colour), tile_features(library, tile_size, options)


def choose_whole(
    cells: np.ndarray,
    library: TileLibrary,
    *,
    tile_size: int,
    seed: str,
    options: RenderOptions,
    parts: Parts,
    photo: tuple[int, int] | None = None,
) -> np.ndarray:
    """``(rows, cols) int32``: the whole grid's choice of a fair-use or use-every-photo job.

    Both are global (a min-cost flow over every cell), so ``render`` and the pipeline's
    controller make them once, from the grid's cell image, the library and the seed, and every
    band renders its rows: one slice or many, the same bytes. ``photo``: the photo's size, for
    the smallest tiles across a ``CoverError`` names (default: the grid's own shape)."""
    pins = None
    if options.use_every_photo:
        pins = cover_pins(cells, library, tile_size=tile_size, seed=seed, options=options, parts=parts, photo=photo)
    if options.max_uses is not None:
        return assign_fair(cells, library, tile_size=tile_size, options=options, pins=pins)
    return choose_tiles(cells, library, tile_size=tile_size, seed=seed, options=options, parts=parts, pins=pins)


def cover_pins(
    cells: np.ndarray,
    library: TileLibrary,
    *,
    tile_size: int,
    seed: str,
    options: RenderOptions,
    parts: Parts,
    photo: tuple[int, int] | None = None,
) -> np.ndarray:
    """``(rows, cols) int32``: one cell pinned to a tile of every group (``cover``), −1 elsewhere.
    With the variety rule, a pin in a restricted row (next to a part's or a strip's edge) holds
    only a group of that row's border class."""
    rows, cols = check_cells(cells, tile_size)
    count = library.group_count
    width, height = photo or (cols * tile_size, rows * tile_size)
    check_cover(rows * cols, count, width=width, height=height, tile_size=tile_size, tiles_across=cols)
    wanted, candidates = matching_features(cells, library, tile_size=tile_size, options=options)
    d = feasible_distance(options.variety, count)
    if options.max_uses is not None or cell_pixels(tile_size) == 1:
        d = 0  # no variety rule: no border classes
    edges = [
        (part.start + start, part.start + stop)
        for part in parts.within(range(0, parts.rows))
        for start, stop in strips(len(part), cols, part.start)
    ]
    pins = pin_groups(
        wanted,
        candidates,
        distinct=len(library),
        groups=library.group_of(),
        cols=cols,
        edges=edges,
        d=d,
        seed=seed_number(seed),
    )
    return pins.reshape(rows, cols)


def strips(rows: int, cols: int, row_offset: int) -> list[tuple[int, int]]:
    """Local row ranges of a band, cut at global multiples of a strip height.

    Bounds memory for huge parts (a wide giant grid). The cuts depend on global rows and the
    grid width only, so any slicing cuts the same places; for variety a strip border is
    treated like a part border.
    """
    height = max(8, STRIP_CELLS // max(1, cols))
    cuts = [r for r in range(1, rows) if (row_offset + r) % height == 0]
    edges = [0, *cuts, rows]
    return list(zip(edges[:-1], edges[1:]))


def _nearest_colour(colours: np.ndarray, library: TileLibrary, tile_size: int) -> np.ndarray:
    """Nearest tile by mean colour for many one-pixel cells, each distinct colour matched once.

    A photo has far fewer distinct colours than pixels, so at tile sizes 1–3 (up to 40 M
    cells) the colours are matched through a 2^24-entry table instead of cell by cell.
    """
    tile_means = library.cached(("means", tile_size), lambda: _box_means(library.tiles(tile_size)))
    targets = library.cached(("colour-features", tile_size), lambda: colour_features(tile_means))
    packed = (colours[:, 0].astype(np.uint32) << 16) | (colours[:, 1].astype(np.uint32) << 8) | colours[:, 2]
    if packed.size < 1 << 16:
        distinct, inverse = np.unique(packed, return_inverse=True)
    else:
        distinct = np.flatnonzero(np.bincount(packed, minlength=1 << 24)).astype(np.uint32)
        inverse = None
    rgb = np.stack([(distinct >> 16) & 255, (distinct >> 8) & 255, distinct & 255], axis=1).astype(np.uint8)
    choice = nearest(colour_features(rgb), targets)
    if inverse is not None:
        return choice[inverse.ravel()]
    table = np.zeros(1 << 24, np.int32)
    table[distinct] = choice
    return table[packed]


def check_cells(cells: np.ndarray, tile_size: int, options: RenderOptions = DEFAULT_OPTIONS) -> tuple[int, int]:
    check_tile_size(options.cell_sizes, tile_size, ATLAS_SIZE)
    if cells.ndim != 3 or cells.shape[2] != 3 or cells.dtype != np.uint8:
        raise ValueError(f"cells must be (H, W, 3) uint8, got {cells.shape} {cells.dtype}")
    k = cell_pixels(tile_size)
    if cells.shape[0] % k or cells.shape[1] % k or cells.shape[0] == 0 or cells.shape[1] == 0:
        raise ValueError(f"cell image size {cells.shape[1]}x{cells.shape[0]} is not a multiple of {k}")
    return cells.shape[0] // k, cells.shape[1] // k
