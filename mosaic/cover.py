"""Use every photo: one cell for every group of the library, decided once for the whole grid.

"Use every photo" asks that every library photo (every group of near-duplicates,
``TileLibrary.group_of``) appears at least once. It is a lower bound of one cell per group on
the usual choice, built in two steps on the min-cost flow of ``mosaic.fair``:

1. **Pins.** A minimum-cost assignment of one distinct cell to every group: each group (its
   members and their mirror images) offers its ``k`` nearest cells, at the exact squared
   feature distance, and OR-Tools' ``SimpleMinCostFlow`` places every group at the least total
   distance (``k`` ×4 while a group is left over). A pin in a row next to a part border
   (``variety``'s restricted rows) may only hold a group of that row's class, so no part ever
   needs to see another part's pins.
2. **The usual fill.** The other cells choose as always, around the pins: with the variety
   rule a pinned cell holds its tile and outranks every neighbour (no neighbour repeats it);
   with ``max_uses`` the flow fills the rest with one use per group spent.

The pins are a function of the whole grid's cells, the library and the seed only, so every
slicing, the pipeline and the offline render place the same ones. Offering every cell to
every group would be a library × cells distance matrix (4,200 candidates × 620,000 cells of a
12 MP photo at tile 8: seconds of BLAS), so groups choose among a fixed sample of the cells
(``sample_cells``: at least ``SAMPLE_PER_GROUP`` per group, all of them on small grids).
"""

from __future__ import annotations

import numpy as np

from .errors import TileBudgetError
from .grid import plan_grid
from .limits import MAX_COVER_CELLS
from .matching import best
from .variety import mix, tile_classes

FIRST_K = 8  # nearest sample cells each candidate offers on the first try (×4 while groups are left over)
SAMPLE_PER_GROUP = 8  # sample cells per group
SAMPLE_LEAST = 4096


class CoverError(TileBudgetError):
    """The grid cannot hold every group once: ``tiles_across`` is the smallest that can (0: none)."""

    def __init__(self, message: str, tiles_across: int) -> None:
        super().__init__(message)
        self.tiles_across = tiles_across


def smallest_tiles_across(
    width: int, height: int, *, tile_size: int, groups: int, max_output_pixels: int | None = None
) -> int:
    """The fewest tiles across whose grid (for a photo of this aspect ratio) has a cell for every
    group, within ``MAX_COVER_CELLS``; 0 when none has."""
    extra = {} if max_output_pixels is None else {"max_output_pixels": max_output_pixels}

    def cells(across: int) -> int:
        try:
            return plan_grid(width, height, tile_size=tile_size, tiles_across=across, **extra).cells
        except ValueError:
            return -1

    low, high = 1, max(1, groups)  # a row of ``groups`` cells always has room for every group
    if cells(high) < groups:
        return 0
    while low < high:  # cells grow with tiles across
        middle = (low + high) // 2
        if cells(middle) >= groups:
            high = middle
        else:
            low = middle + 1
    return low if cells(low) <= MAX_COVER_CELLS else 0


def check_cover(cells: int, groups: int, *, width: int, height: int, tile_size: int, tiles_across: int) -> None:
    """``CoverError`` naming the smallest tiles across when ``cells`` cannot hold ``groups``."""
    if cells > MAX_COVER_CELLS:
        raise CoverError(
            f"use every photo works on grids of at most {MAX_COVER_CELLS:,} cells and this one has {cells:,}: "
            "choose fewer tiles across or bigger tiles",
            0,
        )
    if cells < groups:
        need = smallest_tiles_across(width, height, tile_size=tile_size, groups=groups)
        raise CoverError(
            f"the library has {groups:,} photos (near-duplicates counted once) and the grid only {cells:,} cells "
            f"({tiles_across} tiles across): choose at least {need} tiles across to use every photo",
            need,
        )


def sample_cells(n: int, groups: int) -> np.ndarray:
    """A fixed, well-spread sample of ``n`` cells, about ``SAMPLE_PER_GROUP`` per group (all when few)."""
    size = max(SAMPLE_LEAST, SAMPLE_PER_GROUP * groups)
    if n <= size:
        return np.arange(n)
    keys = mix(np.arange(n, dtype=np.uint64))
    return np.sort(np.argsort(keys, kind="stable")[:size])


def restricted_rows(rows: int, edges: list[tuple[int, int]], d: int) -> np.ndarray:
    """``(rows,) bool``: the grid rows ``variety`` restricts to a border class: within ``d`` rows
    of an edge of the runs ``edges`` (the parts' strips, ``render.strips``) that is not the grid's."""
    restricted = np.zeros(rows, bool)
    for top, bottom in edges:
        if top > 0:
            restricted[top : min(bottom, top + d)] = True
        if bottom < rows:
            restricted[max(top, bottom - d) : bottom] = True
    return restricted


def pin_groups(
    wanted: np.ndarray,
    candidates: np.ndarray,
    *,
    distinct: int,
    groups: np.ndarray,
    cols: int,
    edges: list[tuple[int, int]],
    d: int,
    seed: int,
) -> np.ndarray:
    """``(n,) int32``: for each cell the candidate pinned there, −1 for the cells left free.

    ``wanted``: the grid's cell features, ``cols`` to a row; ``candidates``: the tiles' (and
    mirror images') features; ``groups``: ``(distinct,)`` each tile's group. ``edges``: the
    runs of rows the variety rule chooses on their own, ``d`` its distance (0: no variety rule)
    and ``seed`` its seed number: the border classes a pin must respect (``variety``).
    """
    n = wanted.shape[0]
    count = int(groups.max()) + 1
    cell_class = group_class = None
    if d:
        rows = n // cols
        cell_class = np.repeat(np.where(restricted_rows(rows, edges, d), np.arange(rows) % (d + 1), -1), cols)
        group_class = tile_classes(count, d, seed)
    if n < count:
        raise CoverError(f"{n} cells cannot hold {count} photos", 0)
    sample = sample_cells(n, count)
    while True:
        pins = _pin_within(wanted, sample, candidates, distinct, groups, count, cell_class, group_class)
        if pins is not None:
            return pins
        if sample.size == n:
            raise CoverError(f"no cell of the grid is free for every one of the {count} photos", 0)
        sample = np.arange(n)


def _pin_within(
    wanted: np.ndarray,
    sample: np.ndarray,
    candidates: np.ndarray,
    distinct: int,
    groups: np.ndarray,
    count: int,
    cell_class: np.ndarray | None,
    group_class: np.ndarray | None,
) -> np.ndarray | None:
    """The pins with cells from ``sample`` only; None when no assignment exists there."""
    cells = wanted[sample]
    norms = np.einsum("ij,ij->i", candidates.astype(np.float64), candidates.astype(np.float64))
    key = groups[np.arange(candidates.shape[0]) % distinct]
    k = min(FIRST_K, sample.size)
    while True:
        index, score = best(candidates, cells, k)  # each candidate's nearest sample cells
        cost = np.rint(score + norms[:, None]).astype(np.int64)
        group = np.broadcast_to(key[:, None], index.shape).ravel()
        cell, cost, chosen = index.ravel().astype(np.int64), cost.ravel(), np.repeat(np.arange(key.size), k)
        if cell_class is not None and group_class is not None:
            allowed = cell_class[sample][cell]
            ok = (allowed < 0) | (allowed == group_class[group])
            group, cell, cost, chosen = group[ok], cell[ok], cost[ok], chosen[ok]
        # one arc per (group, cell): the member and orientation nearest that cell
        order = np.lexsort((chosen, cost, cell, group))
        group, cell, cost, chosen = group[order], cell[order], cost[order], chosen[order]
        first = np.ones(group.size, bool)
        first[1:] = (group[1:] != group[:-1]) | (cell[1:] != cell[:-1])
        group, cell, cost, chosen = group[first], cell[first], cost[first], chosen[first]
        picked = _assign_once(group, cell, cost, count, sample.size)
        if picked is not None:
            pins = np.full(wanted.shape[0], -1, np.int32)
            pins[sample[cell[picked]]] = chosen[picked]
            return pins
        if k >= sample.size:
            return None
        k = min(4 * k, sample.size)


def _assign_once(group: np.ndarray, cell: np.ndarray, cost: np.ndarray, count: int, cells: int) -> np.ndarray | None:
    """Indices of the arcs that give every group its own cell at the least total cost; None when
    some group is left over."""
    from ortools.graph.python import min_cost_flow

    flow = min_cost_flow.SimpleMinCostFlow()
    sink, overflow = count + cells, count + cells + 1
    too_much = int(cost.max()) + 1 if cost.size else 1
    arcs = flow.add_arcs_with_capacity_and_unit_cost(
        group.astype(np.int32), (count + cell).astype(np.int32), np.ones(group.size, np.int64), cost
    )
    flow.add_arcs_with_capacity_and_unit_cost(
        np.arange(count, dtype=np.int32),
        np.full(count, overflow, np.int32),
        np.ones(count, np.int64),
        np.full(count, too_much * max(1, count), np.int64),
    )
    flow.add_arcs_with_capacity_and_unit_cost(
        np.arange(count, count + cells, dtype=np.int32),
        np.full(cells, sink, np.int32),
        np.ones(cells, np.int64),
        np.zeros(cells, np.int64),
    )
    flow.add_arc_with_capacity_and_unit_cost(overflow, sink, count, 0)
    supplies = np.zeros(count + cells + 2, np.int64)
    supplies[:count] = 1
    supplies[sink] = -count
    flow.set_nodes_supplies(np.arange(supplies.size, dtype=np.int32), supplies)
    status = flow.solve()
    if status != flow.OPTIMAL:
        raise RuntimeError(f"min-cost flow failed: status {status}")
    used = flow.flows(arcs) > 0
    if int(used.sum()) < count:
        return None
    return np.flatnonzero(used)
