"""Fair use of tiles: every tile at most ``max_uses`` times, at the least total distance.

This is a minimum-cost assignment of cells to tile *uses*: tile ``t`` offers ``max_uses``
identical slots, each cell takes one slot, and the sum of the exact squared feature distances
(``signatures``) is minimal. A dense cells × tiles matrix does not fit (200 k cells × 10 k
tiles is 2·10⁹ entries), so each cell offers only its ``k`` nearest tiles (``matching.best``)
and the assignment is solved exactly on that sparse graph by SciPy's LAPJVsp
(``scipy.sparse.csgraph.min_weight_full_bipartite_matching``, a shortest-augmenting-path
solver for sparse bipartite graphs). If the sparse graph has no full matching (too many cells
want the same few tiles), ``k`` doubles until it has one; with ``k`` = every tile it is the
exact dense problem. The answer is therefore optimal among the assignments that give each
cell one of its ``k`` nearest tiles, for the first ``k`` that admits one.

A tile offers ``min(max_uses, cells that list it)`` slots: more could never be used, and it
keeps the graph at most ``k × min(max_uses, …)`` edges per cell. A tile and its mirror image
(``distinct``) are one tile: a cell's edge to it costs the better of the two orientations.

Deterministic: integer costs, a fixed edge order and a deterministic solver, so the same cells
give the same choice on every machine. The assignment is global (it spans every cell it is
given), so it is made once per job on the whole grid, never per band: see ``render``.
"""

from __future__ import annotations

import numpy as np

from .errors import TileBudgetError
from .matching import best

FIRST_K = 24  # candidates per cell on the first try (doubles on infeasibility)


def check_budget(cells: int, tiles: int, max_uses: int) -> None:
    """Raise ``TileBudgetError`` if ``cells`` cannot be covered with ``tiles`` × ``max_uses`` uses."""
    if max_uses * tiles < cells:
        need = -(-cells // tiles)
        raise TileBudgetError(
            f"{cells} cells need more than {tiles} tiles x {max_uses} uses: raise max_uses to at least "
            f"{need}, use a bigger library or fewer tiles across"
        )


def assign(cells: np.ndarray, candidates: np.ndarray, *, distinct: int, max_uses: int) -> np.ndarray:
    """``(n,) int32`` candidate per cell, each tile (``index % distinct``) used ≤ ``max_uses`` times."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import min_weight_full_bipartite_matching

    n = cells.shape[0]
    check_budget(n, distinct, max_uses)
    norms = np.einsum("ij,ij->i", cells.astype(np.float64), cells.astype(np.float64))
    k = min(FIRST_K, candidates.shape[0])
    while True:
        index, score = best(cells, candidates, k)
        cost = score + norms[:, None] + 1.0  # exact squared distance + 1: never a zero weight
        tile = index % distinct
        # A tile listed twice (itself and its mirror): keep the better (first) orientation.
        order = np.argsort(tile, axis=1, kind="stable")
        sorted_tile = np.take_along_axis(tile, order, axis=1)
        dup = np.zeros_like(sorted_tile, bool)
        dup[:, 1:] = sorted_tile[:, 1:] == sorted_tile[:, :-1]
        keep = np.empty_like(dup)
        np.put_along_axis(keep, order, ~dup, axis=1)
        rows = np.broadcast_to(np.arange(n)[:, None], tile.shape)[keep]
        tiles, costs, picks = tile[keep], cost[keep], index[keep]
        listed = np.bincount(tiles, minlength=distinct)
        slots = np.minimum(listed, max_uses)
        first_slot = np.concatenate([[0], np.cumsum(slots)])
        if first_slot[-1] >= n:
            copies = slots[tiles]
            edge = np.repeat(np.arange(tiles.size), copies)
            within = np.arange(edge.size) - np.repeat(np.cumsum(copies) - copies, copies)
            column = first_slot[tiles[edge]] + within
            graph = csr_array((costs[edge], (rows[edge], column)), shape=(n, int(first_slot[-1])))
            try:
                _, matched = min_weight_full_bipartite_matching(graph)
            except ValueError:
                matched = None
            if matched is not None:
                slot_tile = np.repeat(np.arange(distinct), slots)
                chosen = slot_tile[matched]
                # The orientation: the cell's listed candidate of that tile.
                hit = tile == chosen[:, None]
                return index[np.arange(n), np.argmax(hit, axis=1)].astype(np.int32)
        if k >= candidates.shape[0]:  # cannot happen after check_budget: the dense problem is feasible
            raise TileBudgetError("no assignment of the cells to tiles within max_uses exists")
        k = min(2 * k, candidates.shape[0])
