"""Use every photo: one cell for every group of the library, decided once for the whole grid.

"Use every photo" asks that every library photo (every group of near-duplicates,
``TileLibrary.group_of``) appears at least once. It is a lower bound of one cell per group on
the usual choice, built in two steps on the min-cost flow of ``mosaic.fair``:

1. **Pins.** A minimum-cost assignment of one distinct cell to every group: each group (its
   members and their mirror images) offers its ``NEAREST`` cells, at the exact squared
   feature distance, and OR-Tools' ``SimpleMinCostFlow`` places as many groups as those arcs
   allow at the least total distance. A group left over (its nearest cells all went to groups
   that fit them better: photos of colours the target hardly has, all wanting the same few
   cells) then takes, in group order, the nearest cell still free: widening every group's
   arcs until the flow places them all took 16 times the arcs and four solves on the 12 MP
   benchmark job. A pin in a row next to a part border
   (``variety``'s restricted rows) may only hold a group of that row's class, so no part ever
   needs to see another part's pins.
2. **The usual fill.** The other cells choose as always, around the pins: with the variety
   rule a pinned cell holds its tile and outranks every neighbour (no neighbour repeats it);
   with ``max_uses`` the flow fills the rest with one use per group spent.

The pins are a function of the whole grid's cells, the library and the seed only, so every
slicing, the pipeline and the offline render place the same ones. Offering every cell to
every group would be a library × cells distance matrix (4,200 candidates × 620,000 cells of a
12 MP photo at tile 8: seconds of BLAS), so groups choose among a fixed sample of the cells
(``sample_cells``: ``SAMPLE_PER_GROUP`` per group, at least 4,096, all of them on small grids).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import TileBudgetError
from .grid import plan_grid
from .limits import MAX_COVER_CELLS
from .matching import best
from .variety import mix, tile_classes

NEAREST = 16  # nearest sample cells each candidate offers
SAMPLE_PER_GROUP = 4  # sample cells per group
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
    if n < count:
        raise CoverError(f"{n} cells cannot hold {count} photos", 0)
    sample = sample_cells(n, count)
    key = groups[np.arange(candidates.shape[0]) % distinct]
    cell_class = np.full(sample.size, -1)  # the border class a sample cell is restricted to, -1: none
    group_class = np.zeros(count, np.int64)
    if d:
        rows = n // cols
        row_class = np.where(restricted_rows(rows, edges, d), np.arange(rows) % (d + 1), -1)
        cell_class = row_class[sample // cols]
        group_class = tile_classes(count, d, seed)

    def allowed(group: np.ndarray | int, cell: np.ndarray) -> np.ndarray:
        return (cell_class[cell] < 0) | (cell_class[cell] == group_class[group])

    cells = wanted[sample]
    arcs = _nearest_arcs(cells, candidates, key, allowed)
    placed = _assign_once(*arcs[:3], count, sample.size)
    pins = np.full(n, -1, np.int32)
    taken = np.zeros(sample.size, bool)
    group, cell, _, chosen = (a[placed] for a in arcs)
    pins[sample[cell]] = chosen
    taken[cell] = True
    left = np.setdiff1d(np.arange(count), group)
    for g in left:  # their nearest cells went to groups that fit them better: the nearest one free
        members = np.flatnonzero(key == g)
        score = np.einsum("ij,ij->i", candidates[members].astype(np.float64), candidates[members].astype(np.float64))
        distance = score[:, None] - 2.0 * candidates[members].astype(np.float64) @ cells.T.astype(np.float64)
        free = ~taken & allowed(int(g), np.arange(sample.size))
        if not free.any():
            raise CoverError(f"no cell of the grid is free for every one of the {count} photos", 0)
        best_member = distance.argmin(axis=0)
        per_cell = distance[best_member, np.arange(sample.size)]
        where = int(np.flatnonzero(free)[np.argmin(per_cell[free])])
        pins[sample[where]] = members[best_member[where]]
        taken[where] = True
    return pins


def _nearest_arcs(
    cells: np.ndarray, candidates: np.ndarray, key: np.ndarray, allowed: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(group, cell, cost, candidate)``: every group's arcs to the ``NEAREST`` cells of each of
    its candidates (those its class allows), one per (group, cell), through its nearest member."""
    norms = np.einsum("ij,ij->i", candidates.astype(np.float64), candidates.astype(np.float64))
    k = min(NEAREST, cells.shape[0])
    index, score = best(candidates, cells, k)  # each candidate's nearest sample cells
    cost = np.rint(score + norms[:, None]).astype(np.int64).ravel()
    group = np.repeat(key, k)
    cell, chosen = index.ravel().astype(np.int64), np.repeat(np.arange(key.size), k)
    ok = allowed(group, cell)
    group, cell, cost, chosen = group[ok], cell[ok], cost[ok], chosen[ok]
    order = np.lexsort((chosen, cost, cell, group))
    group, cell, cost, chosen = group[order], cell[order], cost[order], chosen[order]
    first = np.ones(group.size, bool)
    first[1:] = (group[1:] != group[:-1]) | (cell[1:] != cell[:-1])
    return group[first], cell[first], cost[first], chosen[first]


def _assign_once(group: np.ndarray, cell: np.ndarray, cost: np.ndarray, count: int, cells: int) -> np.ndarray:
    """Indices of the arcs that give as many groups as the arcs allow their own cell, at the least
    total cost for that many (a group's arc to the overflow costs more than any path of real arcs)."""
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
    return np.flatnonzero(flow.flows(arcs) > 0)
