"""Anti-repetition: no tile used twice within ``distance`` cells, deterministic and part-safe.

A *tile* here is a library photo with its mirror image and its near-duplicates (a group,
``TileLibrary.group_of``): a burst of ten shots is one photo to every rule below.

Inside a part (``mosaic.parts``) every cell gets its ``m`` best tiles, best first. Conflicts
(two cells within ``distance`` — Chebyshev, so a (2d+1)² square — holding the same tile) are
settled in parallel rounds: a cell whose tile is also held by a neighbour of higher priority,
where that neighbour is not itself losing a conflict, moves on to its next candidate.
Priorities come from (seed, global row, column) (``priorities``), so the outcome depends only
on the job's seed and the cells, never on the machine; cells choose in phase order, so a flat
area takes its (d+1)(d+2) best tiles, no deeper. A cell that runs out of candidates (rare) is
settled last, one by one, with the best tile its neighbours leave free.

Across a part border a cell cannot see its neighbours' choices (the next part chooses on its
own, perhaps in another worker), so the rows within ``distance`` of a border use disjoint
shares of the library: the tiles are dealt into ``distance + 1`` classes by a seeded hash,
and a border row may only use the class ``global_row mod (distance + 1)``. Two rows closer
than ``distance + 1`` never share a class, so two cells on either side of a border never
share a tile. The cost: those rows choose from a (d+1)-th of the library, so they choose
first and the rows inside, which have all of it, give way. The grid's top and bottom edges
have no neighbour and are unrestricted.

``distance`` is lowered to what the library can honour: each class must hold at least
(2d+1)² tiles, or a square of cells could not all differ.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

from .candidates import Candidates
from .matching import best
from .rounds import resolve
from .tile_index import TileIndex, nearest_tiles

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def seed_number(seed: str) -> int:
    return int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "little")


def mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array: a fixed, well-spread hash."""
    z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def feasible_distance(distance: int, tiles: int) -> int:
    """The largest d ≤ ``distance`` whose border classes hold (2d+1)² tiles each."""
    d = max(0, distance)
    while d > 0 and tiles // (d + 1) < (2 * d + 1) ** 2:
        d -= 1
    return d


def tiles_needed(distance: int) -> int:
    """The fewest tiles that keep ``distance`` (``feasible_distance``'s inverse): 196 for 3."""
    d = max(0, distance)
    return (d + 1) * (2 * d + 1) ** 2


def tile_classes(tiles: int, distance: int, seed: int) -> np.ndarray:
    """Deal tiles into ``distance + 1`` classes of equal size (±1) by a seeded hash."""
    keys = mix(np.arange(tiles, dtype=np.uint64) ^ np.uint64(seed))
    rank = np.empty(tiles, np.int64)
    rank[np.argsort(keys, kind="stable")] = np.arange(tiles)
    return rank % (distance + 1)


def graph_size(distance: int) -> int:
    """Neighbours per tile in the tile graph: enough for a full window of distinct tiles."""
    return (2 * distance + 1) ** 2 + 8


def tile_graph(tiles: np.ndarray, size: int) -> np.ndarray:
    """``(M, size) int32``: each candidate's nearest other candidates, nearest first."""
    size = min(size, tiles.shape[0] - 1)
    if size < 1:
        return np.zeros((tiles.shape[0], 0), np.int32)
    index, _ = best(tiles, tiles, size + 1)
    return index[:, 1:]


WALK_SHIFTS = 4096  # each row reads the walk from its own one of this many starting places


def priorities(rows: int, cols: int, row_offset: int, d: int, seed: int) -> np.ndarray:
    """``(rows, cols) int64``: who wins a conflict (the higher number), from global positions.

    Cells win in *phase* order. A cell's phase is its global row mod ``d + 1`` and, within
    that row, a symbol of ``walk``: d + 2 symbols, none twice within ``d`` places, read from
    a starting place and under a relabelling of the row's own (seeded by the row). Two
    cells of one phase are ``d + 1`` or more apart, so they never compete, and the phase
    alone settles every conflict. Where the cells' candidate lists are alike (a flat area)
    each phase takes the next tile down the list: the area draws on (d+1)(d+2)
    of its best tiles, 20 at the default, where a random order reaches 34 deep (horse's
    white ground at tile 8), each tile further down further from the colour. With only d + 1
    symbols per row (16 tiles) every row would be forced to repeat one period of d + 1 tiles,
    a lattice a person sees up close; the walk's extra symbol leaves each row irregular.

    The phases are numbered symbol first: a symbol's d + 1 row phases take consecutive places
    of the list, in rising row order for even symbols and falling for odd ones, so every row
    mixes early and late places. Numbered row first, the first row of every d + 1 would take
    the best d + 2 tiles of a flat area and the last row the worst: a sky seen from afar
    striped every fourth row (china's, 640 tiles, tile 8: row means of 220 and 233 luma).
    """
    p, q = d + 1, d + 2
    g_rows = np.arange(rows, dtype=np.uint64) + np.uint64(row_offset)
    row_keys = mix(g_rows ^ np.uint64(seed))
    start = (row_keys % np.uint64(WALK_SHIFTS)).astype(np.intp)
    labels = np.argsort(mix(row_keys[:, None] + np.arange(q, dtype=np.uint64)[None, :]), axis=1, kind="stable")
    symbol = np.take_along_axis(labels, walk(d, cols + WALK_SHIFTS)[start[:, None] + np.arange(cols)], axis=1)
    row_class = (g_rows % np.uint64(p)).astype(np.int64)[:, None]
    phase = symbol * p + np.where(symbol % 2 == 0, row_class, p - 1 - row_class)
    return p * q - 1 - phase


@functools.lru_cache(maxsize=8)
def _walk(d: int, length: int) -> np.ndarray:
    bits = (mix(np.arange(length, dtype=np.uint64)) & np.uint64(1)).tolist()
    recent: list[int] = []
    out = np.empty(length, np.intp)
    for i, bit in enumerate(bits):  # two symbols are free at each step: a fixed hash picks one
        free = [s for s in range(d + 2) if s not in recent]
        out[i] = free[bit]
        recent = [*recent, free[bit]][-d:] if d else []
    out.setflags(write=False)
    return out


def walk(d: int, length: int) -> np.ndarray:
    """A fixed sequence of ``length`` (at least) over d + 2 symbols in which no symbol
    repeats within ``d`` places, irregular (each step picks one of the two symbols free by a
    fixed hash): the same on every machine, computed once per size class."""
    return _walk(d, 1 << max(12, (length - 1).bit_length()))


def _border_rows(rows: int, row_offset: int, distance: int, below: bool) -> np.ndarray:
    local = np.arange(rows)
    bottom = ((rows - 1 - local) < distance) & below
    top = (local < distance) & (row_offset > 0)
    return bottom | top


def choose_varied(
    cells: np.ndarray,
    tiles: np.ndarray,
    *,
    rows: int,
    cols: int,
    row_offset: int,
    distance: int,
    seed: str,
    distinct: int | None = None,
    graph: np.ndarray | None = None,
    index: TileIndex | None = None,
    border_below: bool = True,
    present: np.ndarray | None = None,
    share: tuple[int, int] = (0, 1),
    groups: np.ndarray | None = None,
    pins: np.ndarray | None = None,
    nearest_known: np.ndarray | None = None,
) -> np.ndarray:
    """``(rows, cols) int32`` tile choices with no repeat within ``distance`` cells.

    ``border_below``: whether other cells, chosen elsewhere, lie below the last row (False for
    the grid's last rows: they choose from the whole library).
    ``distinct``: candidates ``i`` and ``i + distinct`` are the same tile (e.g. a tile and
    its mirror image) and count as a repeat; default: every candidate is its own tile.
    ``graph``: ``tile_graph(tiles, ...)``, each tile's nearest tiles (see ``Candidates``).
    ``index``: ``tile_index.build_index(tiles)`` for big libraries (None: full scans).
    ``present``: ``(rows, cols) bool``, the cells that exist (cells of several sizes,
    ``sized``); the others choose nothing (−1) and hold no tile. ``share``: ``(i, n)``, the
    border rows use the ``i``-th of ``n`` disjoint shares of the border classes (the sizes of
    a mosaic of several, so cells of two sizes across a part border never share a photo).
    ``groups``: ``(distinct,)`` each tile's group (``TileLibrary.group_of``): near-duplicates
    count as one photo, for the distance and the border classes; None: every tile its own.
    ``pins``: ``(rows, cols)`` a candidate each cell must hold, −1 where it is free ("use every
    photo", ``mosaic.cover``: one cell per group, placed where its group's border class allows).
    ``nearest_known``: ``(rows * cols,)`` each cell's ``nearest_tiles(cells, tiles, index)``, where
    the caller has computed it already (``Candidates``).
    """
    n_tiles = tiles.shape[0]
    base = distinct or n_tiles
    group = np.arange(base, dtype=np.int64) if groups is None else np.asarray(groups, np.int64)
    count = int(group.max()) + 1
    d = feasible_distance(distance, count // share[1])
    pinned = None if pins is None else np.flatnonzero(pins.ravel() >= 0)
    if d == 0:
        choice = nearest_tiles(cells, tiles, index).reshape(rows, cols)
        return choice if pins is None else np.where(pins >= 0, pins, choice).astype(np.int32)
    seed_int = seed_number(seed)
    border = _border_rows(rows, row_offset, d, border_below)
    key_of = group[np.arange(n_tiles) % base]
    classes = tile_classes(count, (d + 1) * share[1] - 1, seed_int)[key_of] - share[0] * (d + 1)
    exists = None if present is None else present.ravel()

    def cells_of(row_list: np.ndarray) -> np.ndarray:
        flat = (row_list[:, None] * cols + np.arange(cols)[None, :]).ravel()
        return flat if exists is None else flat[exists[flat]]

    parts = []
    inner_rows = np.flatnonzero(~border)
    if inner_rows.size:
        parts.append((cells_of(inner_rows), np.arange(n_tiles)))
    for q in range(d + 1):
        rows_q = np.flatnonzero(border & ((np.arange(rows) + row_offset) % (d + 1) == q))
        if rows_q.size:
            parts.append((cells_of(rows_q), np.flatnonzero(classes == q)))
    candidates = Candidates(cells, tiles, parts, graph, index, nearest_known)

    # The border rows choose first: they have a share of the library, the rows inside all of it.
    priority = priorities(rows, cols, row_offset, d, seed_int) + border[:, None] * (d + 1) * (d + 2)
    if pins is not None and pinned is not None and pinned.size:
        candidates.pin(pinned, pins.ravel()[pinned])
        priority = priority.copy()
        priority.ravel()[pinned] = 2 * (d + 1) * (d + 2)  # above every free cell: a pinned cell never moves
    choice = resolve(candidates, priority, d, rows, cols, key_of, absent=None if exists is None else ~exists)
    stuck = np.argwhere((choice < 0) if present is None else (choice < 0) & present)
    if stuck.size:
        _settle_one_by_one(choice, stuck, priority, cells, tiles, classes, border, row_offset, d, cols, key_of)
    return choice


def _settle_one_by_one(
    choice: np.ndarray,
    stuck: np.ndarray,
    priority: np.ndarray,
    cells: np.ndarray,
    tiles: np.ndarray,
    classes: np.ndarray,
    border: np.ndarray,
    row_offset: int,
    d: int,
    cols: int,
    key_of: np.ndarray,
) -> None:
    order = np.argsort(-priority[stuck[:, 0], stuck[:, 1]], kind="stable")
    for r, c in stuck[order]:
        allowed = np.arange(tiles.shape[0])
        if border[r]:
            allowed = np.flatnonzero(classes == (r + row_offset) % (d + 1))
        taken = key_of[choice[max(0, r - d) : r + d + 1, max(0, c - d) : c + d + 1]]
        index, _ = best(cells[r * cols + c][None, :], tiles[allowed], allowed.size)
        for t in allowed[index[0]]:
            if not (taken == key_of[t]).any():
                choice[r, c] = t
                break
        else:  # cannot happen: feasible_distance leaves more tiles than neighbours
            raise RuntimeError("no free tile for a cell; the variety distance is infeasible")
