"""Fair use of tiles: every tile at most ``max_uses`` times, at the least total distance.

A tile here is a library photo with its mirror image and its near-duplicates (a group,
``TileLibrary.group_of``): a burst of ten shots shares one budget of ``max_uses``.

This is a minimum-cost flow: one unit from each cell to a tile, at most ``max_uses`` units
through each tile, the cost of a cell on a tile its exact squared feature distance
(``signatures``, integers). A dense cells × tiles matrix does not fit (200 k cells × 10 k
tiles is 2·10⁹ entries), so each cell offers only its ``K`` nearest tiles (``matching.best``;
a tile and its mirror image are one tile, the better orientation kept) and the flow is
solved exactly on that sparse graph by OR-Tools' ``SimpleMinCostFlow`` (a cost-scaling
push-relabel solver in C++). The capacities are arcs, not copies of tiles: the graph has
``cells × K + tiles`` arcs, which is why this is fast where an assignment solver on tile
*slots* (SciPy's LAPJVsp, the first version here: 248 s for 3,888 cells at ``max_uses`` 8)
was not.

Each cell also has an arc to an overflow node at a cost above any real one, so the flow
always exists; if some cells end there (their ``K`` nearest tiles are taken by cells that
need them more), ``K`` is multiplied by 4 and the flow solved again, up to every tile, where
``check_budget`` guarantees a solution. The answer is therefore optimal among the
assignments that give each cell one of its ``K`` nearest tiles, for the first ``K`` that
admits one; ``Assignment.lower_bound`` is the unconstrained optimum (each cell its nearest
tile), so a caller can see how much fairness cost.

Deterministic: integer costs, a fixed arc order and a deterministic solver give the same
choice on every machine. The assignment is global (it spans every cell it is given), so it
is made once per job on the whole grid, never per band: see ``render`` and the pipeline's
controller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import TileBudgetError
from .limits import MAX_FAIR_CELLS
from .matching import best

FIRST_K = 16  # candidate tiles per cell on the first try (×4 while cells overflow)


@dataclass(frozen=True)
class Assignment:
    """The candidate per cell, its total cost, the unconstrained optimum and the K used."""

    choice: np.ndarray
    cost: int
    lower_bound: int
    k: int


def check_grid(cells: int) -> None:
    """Raise ``TileBudgetError`` if the grid is too big to assign fairly in one process."""
    if cells > MAX_FAIR_CELLS:
        raise TileBudgetError(
            f"max_uses works on grids of at most {MAX_FAIR_CELLS:,} cells and this one has {cells:,}: "
            "choose fewer tiles across or bigger tiles, or leave max_uses out"
        )


def check_budget(cells: int, tiles: int, max_uses: int) -> None:
    """Raise ``TileBudgetError`` if the grid is too big (``check_grid``) or ``cells`` cannot be
    covered with ``tiles`` × ``max_uses`` uses."""
    check_grid(cells)
    if max_uses * tiles < cells:
        need = -(-cells // tiles)
        raise TileBudgetError(
            f"{cells} cells need more than {tiles} tiles x {max_uses} uses: raise max_uses to at least "
            f"{need}, use a bigger library or fewer tiles across"
        )


def assign(
    cells: np.ndarray,
    candidates: np.ndarray,
    *,
    distinct: int,
    max_uses: int,
    groups: np.ndarray | None = None,
    taken: np.ndarray | None = None,
) -> np.ndarray:
    """``(n,) int32`` candidate per cell, each tile (``index % distinct``) used ≤ ``max_uses`` times."""
    return solve(cells, candidates, distinct=distinct, max_uses=max_uses, groups=groups, taken=taken).choice


def solve(
    cells: np.ndarray,
    candidates: np.ndarray,
    *,
    distinct: int,
    max_uses: int,
    groups: np.ndarray | None = None,
    taken: np.ndarray | None = None,
) -> Assignment:
    """The minimum-cost flow of the module docstring.

    ``groups``: ``(distinct,)`` each tile's group (``TileLibrary.group_of``): ``max_uses`` counts
    a group of near-duplicates as one photo, and each cell may take the group's member that fits
    it best. ``taken``: uses per group already spent elsewhere (the cells "use every photo"
    pinned, ``mosaic.cover``)."""
    n = cells.shape[0]
    group = np.arange(distinct, dtype=np.int64) if groups is None else np.asarray(groups, np.int64)
    count = int(group.max()) + 1
    spent = np.zeros(count, np.int64) if taken is None else np.asarray(taken, np.int64)
    check_budget(n + int(spent.sum()), count, max_uses)
    capacity = max_uses - spent
    orientations = -(-candidates.shape[0] // distinct)  # 1, or 2 with mirror images
    norms = np.einsum("ij,ij->i", cells.astype(np.float64), cells.astype(np.float64))
    k = min(FIRST_K, distinct)
    while True:
        index, score = best(cells, candidates, k * orientations)
        cost = np.rint(score + norms[:, None]).astype(np.int64)  # exact squared distances
        tile = group[index.astype(np.int64) % distinct]
        keep = _first_of_each_tile(tile)
        rows = np.broadcast_to(np.arange(n)[:, None], tile.shape)[keep]
        picked = _min_cost_flow(rows, tile[keep], cost[keep], n, count, capacity)
        if picked is not None or k >= distinct:
            break
        k = min(4 * k, distinct)
    if picked is None:  # cannot happen after check_budget: every tile is listed
        raise TileBudgetError("no assignment of the cells to tiles within max_uses exists")
    choice = index[keep][picked]  # arcs are in row order, one chosen per cell
    chosen_cost = int(cost[keep][picked].sum())
    return Assignment(choice.astype(np.int32), chosen_cost, int(cost[:, 0].sum()), k)


def _first_of_each_tile(tile: np.ndarray) -> np.ndarray:
    """Mask of each row's first occurrence of every tile (the nearer orientation; rows are ranked)."""
    order = np.argsort(tile, axis=1, kind="stable")
    sorted_tile = np.take_along_axis(tile, order, axis=1)
    first = np.ones(tile.shape, bool)
    first[:, 1:] = sorted_tile[:, 1:] != sorted_tile[:, :-1]
    keep = np.empty_like(first)
    np.put_along_axis(keep, order, first, axis=1)
    return keep


def _min_cost_flow(
    rows: np.ndarray, tiles: np.ndarray, costs: np.ndarray, n: int, distinct: int, capacity: np.ndarray
) -> np.ndarray | None:
    """Indices (into the arc arrays) of the arc chosen for each cell, None if a cell overflows."""
    from ortools.graph.python import min_cost_flow

    flow = min_cost_flow.SimpleMinCostFlow()
    sink, overflow = n + distinct, n + distinct + 1
    too_much = int(costs.max()) + 1 if costs.size else 1  # above any real arc: used only when needed
    cell_arcs = flow.add_arcs_with_capacity_and_unit_cost(
        rows.astype(np.int32), (n + tiles).astype(np.int32), np.ones(rows.size, np.int64), costs
    )
    flow.add_arcs_with_capacity_and_unit_cost(
        np.arange(n, dtype=np.int32),
        np.full(n, overflow, np.int32),
        np.ones(n, np.int64),
        np.full(n, too_much, np.int64),
    )
    flow.add_arcs_with_capacity_and_unit_cost(
        np.arange(n, n + distinct, dtype=np.int32),
        np.full(distinct, sink, np.int32),
        np.asarray(capacity, np.int64),
        np.zeros(distinct, np.int64),
    )
    flow.add_arc_with_capacity_and_unit_cost(overflow, sink, n, 0)
    supplies = np.zeros(n + distinct + 2, np.int64)
    supplies[:n] = 1
    supplies[sink] = -n
    flow.set_nodes_supplies(np.arange(supplies.size, dtype=np.int32), supplies)
    status = flow.solve()
    if status != flow.OPTIMAL:
        raise RuntimeError(f"min-cost flow failed: status {status}")
    used = flow.flows(cell_arcs) > 0
    if int(used.sum()) < n:
        return None
    return np.flatnonzero(used)
