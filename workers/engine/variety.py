"""Anti-repetition: no tile used twice within ``distance`` cells, deterministic and band-safe.

Inside a band every cell gets its ``m`` best tiles, best first. Conflicts (two cells within
``distance`` — Chebyshev, so a (2d+1)² square — holding the same tile) are settled in
parallel rounds: a cell whose tile is also held by a neighbour of higher priority, where
that neighbour is not itself losing a conflict, moves on to its next candidate. Priorities
are a hash of (seed, global row, column), so the outcome depends only on the job's seed and
the cells, never on the machine. A cell that runs out of candidates (rare) is settled last,
one by one, with the best tile its neighbours leave free.

Across a band border a cell cannot see its neighbours' choices (they are made by another
worker), so the rows within ``distance`` of a border use disjoint shares of the library:
the tiles are dealt into ``distance + 1`` classes by a seeded hash, and a border row may
only use the class ``global_row mod (distance + 1)``. Two rows closer than ``distance + 1``
never share a class, so two cells on either side of a border never share a tile. The cost:
those rows choose from a (d+1)-th of the library. The first band's top edge has no
neighbour and is unrestricted; a band does not know whether it is the last, so its bottom
rows are always restricted.

``distance`` is lowered to what the library can honour: each class must hold at least
(2d+1)² tiles, or a square of cells could not all differ.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .matching import best, nearest, ranked_neighbours

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
_SPARSE_BELOW = 32  # switch to pair lists once fewer than 1/32 of the cells move in a round


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


def _border_rows(rows: int, row_offset: int, distance: int) -> np.ndarray:
    local = np.arange(rows)
    bottom = (rows - 1 - local) < distance
    top = (local < distance) & (row_offset > 0)
    return bottom | top


class _Candidates:
    """Each cell's ranked tiles, best first; longer lists only for cells that need them.

    A cell's first list is its nearest tile plus that tile's nearest neighbours among the
    tiles (a graph computed once per library and tile size), ranked by exact distance to the
    cell: near tiles of the best tile are near the cell, and this costs a few dozen
    look-ups per cell instead of a search of the whole library. A cell that exhausts its
    list gets the exact next-best tiles (widths 4x, up to all the tiles it may use).
    """

    def __init__(
        self,
        cells: np.ndarray,
        tiles: np.ndarray,
        groups: list[tuple[np.ndarray, np.ndarray]],
        graph: np.ndarray | None,
    ) -> None:
        self.cells, self.tiles = cells, tiles
        n = cells.shape[0]
        self.allowed = np.empty(n, np.int64)  # how many tiles each cell may use
        self.group_of = np.empty(n, np.int64)
        self.groups = groups  # (cell indices, allowed tile indices)
        width = 1 if graph is None else graph.shape[1] + 1
        self.ranked = np.full((n, width), -1, np.int32)
        self.width = np.ones(n, np.int64)
        for g, (idx, members) in enumerate(groups):
            self.allowed[idx] = members.size
            self.group_of[idx] = g
            if graph is not None and members.size == tiles.shape[0]:
                self.ranked[idx] = ranked_neighbours(cells[idx], tiles, graph)
                self.width[idx] = width
            else:
                self.ranked[idx, 0] = members[nearest(cells[idx], tiles[members])]

    def refill(self, wanted: np.ndarray) -> None:
        """Lengthen the lists of cells ``wanted`` (flat indices) whose width allows it."""
        wanted = wanted[self.width[wanted] < self.allowed[wanted]]
        if not wanted.size:
            return
        new_width = np.minimum(self.allowed[wanted], np.maximum(8, 4 * self.width[wanted]))
        if new_width.max() > self.ranked.shape[1]:
            grown = np.full((self.ranked.shape[0], int(new_width.max())), -1, np.int32)
            grown[:, : self.ranked.shape[1]] = self.ranked
            self.ranked = grown
        for g, (_, members) in enumerate(self.groups):
            mine = wanted[self.group_of[wanted] == g]
            if mine.size:
                m = int(new_width[self.group_of[wanted] == g].max())
                index, _ = best(self.cells[mine], self.tiles[members], m)
                self.ranked[mine, :m] = members[index]
                self.width[mine] = m


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
) -> np.ndarray:
    """``(rows, cols) int32`` tile choices with no repeat within ``distance`` cells.

    ``distinct``: candidates ``i`` and ``i + distinct`` are the same tile (e.g. a tile and
    its mirror image) and count as a repeat; default: every candidate is its own tile.
    ``graph``: ``tile_graph(tiles, ...)``, each tile's nearest tiles (see ``_Candidates``).
    """
    n_tiles = tiles.shape[0]
    base = distinct or n_tiles
    d = feasible_distance(distance, base)
    if d == 0:
        return nearest(cells, tiles).reshape(rows, cols)
    seed_int = seed_number(seed)
    border = _border_rows(rows, row_offset, d)
    classes = tile_classes(base, d, seed_int)[np.arange(n_tiles) % base]

    def cells_of(row_list: np.ndarray) -> np.ndarray:
        return (row_list[:, None] * cols + np.arange(cols)[None, :]).ravel()

    groups = []
    inner_rows = np.flatnonzero(~border)
    if inner_rows.size:
        groups.append((cells_of(inner_rows), np.arange(n_tiles)))
    for q in range(d + 1):
        rows_q = np.flatnonzero(border & ((np.arange(rows) + row_offset) % (d + 1) == q))
        if rows_q.size:
            groups.append((cells_of(rows_q), np.flatnonzero(classes == q)))
    candidates = _Candidates(cells, tiles, groups, graph)

    g_rows = (np.arange(rows, dtype=np.uint64) + np.uint64(row_offset))[:, None]
    position = (g_rows << np.uint64(32)) | np.arange(cols, dtype=np.uint64)[None, :]
    keys = mix(position ^ np.uint64(seed_int)).ravel()
    priority = np.empty(rows * cols, np.int64)
    priority[np.lexsort((position.ravel(), keys))] = np.arange(rows * cols)
    priority = priority.reshape(rows, cols)

    choice = _resolve(candidates, priority, d, rows, cols, base)
    stuck = np.argwhere(choice < 0)
    if stuck.size:
        _settle_one_by_one(choice, stuck, priority, cells, tiles, classes, border, row_offset, d, cols, base)
    return choice


def _pairs(rows: int, cols: int, d: int):
    """Slices (A, B) of every cell pair at offset (dy, dx) in the half window."""
    for dy in range(0, d + 1):
        for dx in range(-d, d + 1):
            if dy == 0 and dx <= 0:
                continue
            if dy >= rows or abs(dx) >= cols:
                continue
            a = (slice(0, rows - dy), slice(max(0, -dx), cols - max(0, dx)))
            b = (slice(dy, rows), slice(max(0, dx), cols - max(0, -dx)))
            yield a, b


def _window(d: int) -> np.ndarray:
    """``(k, 2)`` offsets (dy, dx) of every other cell within Chebyshev distance ``d``."""
    dy, dx = np.mgrid[-d : d + 1, -d : d + 1]
    keep = (dy != 0) | (dx != 0)
    return np.stack([dy[keep], dx[keep]], axis=1)


def _resolve(candidates: _Candidates, priority: np.ndarray, d: int, rows: int, cols: int, base: int) -> np.ndarray:
    """Parallel conflict rounds; returns choices, −1 where a cell ran out of candidates.

    A round: every cell whose tile is also held, within ``d``, by a neighbour of higher
    priority that is not itself beaten moves on to its next candidate. While many cells
    move, rounds scan the whole band with shifted views (``_dense_round``); once few do,
    only the conflicting pairs are kept and only moved cells are compared with their
    windows (``_sparse_rounds``). Both compute the same rounds.
    """
    n = rows * cols
    state = _State(candidates, priority, base)
    board = _Board(priority, d)
    key2d = state.key.reshape(rows, cols)
    while True:
        losers = board.round(key2d)
        if losers is None:
            return state.choices().reshape(rows, cols)
        state.advance(losers)
        if losers.size * _SPARSE_BELOW < n:
            break
    _sparse_rounds(state, rows, cols, d)
    return state.choices().reshape(rows, cols)



class _State:
    """Each cell's position in its candidate list, its tile and its conflict key."""

    def __init__(self, candidates: _Candidates, priority: np.ndarray, base: int) -> None:
        self.candidates, self.base = candidates, base
        self.prio = priority.ravel()
        n = self.prio.size
        self.ptr = np.zeros(n, np.intp)
        self.cur = candidates.ranked[:, 0].copy()
        self.key = (self.cur % base).astype(np.int32)  # a unique negative once out of candidates

    def advance(self, losers: np.ndarray) -> None:
        """Move ``losers`` (sorted flat indices) to their next candidate, refilling lists."""
        cand = self.candidates
        ptr = self.ptr[losers] + 1
        self.ptr[losers] = ptr
        width = cand.width[losers]
        short = ptr >= width
        if short.any():
            cand.refill(losers[short])
            width = cand.width[losers]
            short = ptr >= width
        cur = cand.ranked.ravel()[losers * cand.ranked.shape[1] + np.minimum(ptr, width - 1)]
        self.cur[losers] = cur
        key = cur % self.base
        if short.any():  # out of candidates: a key no other cell has
            key = np.where(short, -1 - losers, key)
        self.key[losers] = key

    def choices(self) -> np.ndarray:
        return np.where(self.ptr >= self.candidates.width, -1, self.cur).astype(np.int32)


class _Board:
    """Whole-band rounds on flat arrays: rows padded with ``d`` columns each side.

    With the padding every offset of the window is one shift of a contiguous array (a
    neighbour past the row's end lands in the padding, whose keys are all distinct and
    never a tile), so each comparison is one long vector operation.
    """

    def __init__(self, priority: np.ndarray, d: int) -> None:
        self.rows, self.cols = priority.shape
        self.d, self.width = d, self.cols + 2 * d
        size = self.rows * self.width
        prio = np.full((self.rows, self.width), -1, np.int64)
        prio[:, d : d + self.cols] = priority
        self.key = (-1 - self.rows * self.cols - np.arange(size, dtype=np.int64)).astype(np.int32)
        self.key = self.key.reshape(self.rows, self.width)
        flat = prio.ravel()
        self.shifts = []
        for dy in range(d + 1):
            for dx in range(-d, d + 1):
                shift = dy * self.width + dx
                if (dy > 0 or dx > 0) and shift < size:
                    self.shifts.append((shift, flat[: size - shift] < flat[shift:]))

    def round(self, key: np.ndarray) -> np.ndarray | None:
        """The cells that lose this round (flat, sorted), None if there is no conflict."""
        d, cols = self.d, self.cols
        self.key[:, d : d + cols] = key
        flat = self.key.ravel()
        size = flat.size
        beaten = np.zeros(size, bool)
        found = []
        for shift, a_low in self.shifts:
            same = flat[: size - shift] == flat[shift:]
            if not same.any():
                continue
            a_lost = same & a_low
            b_lost = same ^ a_lost
            beaten[: size - shift] |= a_lost
            beaten[shift:] |= b_lost
            found.append((shift, a_lost, b_lost))
        if not found:
            return None
        lose = np.zeros(size, bool)
        for shift, a_lost, b_lost in found:
            lose[: size - shift] |= a_lost > beaten[shift:]  # bools: lost to a cell that is not beaten
            lose[shift:] |= b_lost > beaten[: size - shift]
        padded = np.flatnonzero(lose)
        return padded // self.width * cols + padded % self.width - d


def _window(d: int) -> np.ndarray:
    """``(k, 2)`` offsets (dy, dx) of every other cell within Chebyshev distance ``d``."""
    dy, dx = np.mgrid[-d : d + 1, -d : d + 1]
    keep = (dy != 0) | (dx != 0)
    return np.stack([dy[keep], dx[keep]], axis=1)


def _resolve(candidates: _Candidates, priority: np.ndarray, d: int, rows: int, cols: int, base: int) -> np.ndarray:
    """Parallel conflict rounds; returns choices, −1 where a cell ran out of candidates.

    A round: every cell whose tile is also held, within ``d``, by a neighbour of higher
    priority that is not itself beaten moves on to its next candidate. While many cells
    move, rounds scan the whole band with shifted views (``_dense_round``); once few do,
    only the conflicting pairs are kept and only moved cells are compared with their
    windows (``_sparse_rounds``). Both compute the same rounds.
    """
    n = rows * cols
    state = _State(candidates, priority, base)
    board = _Board(priority, d)
    key2d = state.key.reshape(rows, cols)
    while True:
        losers = board.round(key2d)
        if losers is None:
            return state.choices().reshape(rows, cols)
        state.advance(losers)
        if losers.size * _SPARSE_BELOW < n:
            break
    _sparse_rounds(state, rows, cols, d)
    return state.choices().reshape(rows, cols)



class _State:
    """Each cell's position in its candidate list, its tile and its conflict key."""

    def __init__(self, candidates: _Candidates, priority: np.ndarray, base: int) -> None:
        self.candidates, self.base = candidates, base
        self.prio = priority.ravel()
        n = self.prio.size
        self.ptr = np.zeros(n, np.intp)
        self.cur = candidates.ranked[:, 0].copy()
        self.key = (self.cur % base).astype(np.int32)  # a unique negative once out of candidates

    def advance(self, losers: np.ndarray) -> None:
        """Move ``losers`` (sorted flat indices) to their next candidate, refilling lists."""
        cand = self.candidates
        ptr = self.ptr[losers] + 1
        self.ptr[losers] = ptr
        width = cand.width[losers]
        short = ptr >= width
        if short.any():
            cand.refill(losers[short])
            width = cand.width[losers]
            short = ptr >= width
        cur = cand.ranked.ravel()[losers * cand.ranked.shape[1] + np.minimum(ptr, width - 1)]
        self.cur[losers] = cur
        key = cur % self.base
        if short.any():  # out of candidates: a key no other cell has
            key = np.where(short, -1 - losers, key)
        self.key[losers] = key

    def choices(self) -> np.ndarray:
        return np.where(self.ptr >= self.candidates.width, -1, self.cur).astype(np.int32)


def _dense_round(key: np.ndarray, pairs: list, rows: int, cols: int) -> np.ndarray | None:
    """One round over the whole band: the cells that lose (flat, sorted), None if no conflict."""
    beaten = np.zeros((rows, cols), bool)
    found = []
    for a, b, a_low in pairs:
        same = key[a] == key[b]
        if not same.any():
            continue
        a_lost = same & a_low
        b_lost = same ^ a_lost
        beaten[a] |= a_lost
        beaten[b] |= b_lost
        found.append((a, b, a_lost, b_lost))
    if not found:
        return None
    lose = np.zeros((rows, cols), bool)
    for a, b, a_lost, b_lost in found:
        lose[a] |= a_lost > beaten[b]  # bools: a lost to b, and b is not beaten
        lose[b] |= b_lost > beaten[a]
    return np.flatnonzero(lose)


def _window(d: int) -> np.ndarray:
    """``(k, 2)`` offsets (dy, dx) of every other cell within Chebyshev distance ``d``."""
    dy, dx = np.mgrid[-d : d + 1, -d : d + 1]
    keep = (dy != 0) | (dx != 0)
    return np.stack([dy[keep], dx[keep]], axis=1)


def _sparse_rounds(state: _State, rows: int, cols: int, d: int) -> None:
    """Rounds on the list of conflicting pairs; only moved cells are compared anew."""
    n = rows * cols
    key, prio = state.key, state.prio
    flat = np.arange(n).reshape(rows, cols)
    a_parts, b_parts = [], []
    for a, b in _pairs(rows, cols, d):
        same = key.reshape(rows, cols)[a] == key.reshape(rows, cols)[b]
        a_parts.append(flat[a][same])
        b_parts.append(flat[b][same])
    pair_a = np.concatenate(a_parts) if a_parts else np.empty(0, np.intp)
    pair_b = np.concatenate(b_parts) if b_parts else np.empty(0, np.intp)
    window = _window(d)
    beaten = np.zeros(n, bool)
    moved = np.zeros(n, bool)
    while pair_a.size:
        b_wins = prio[pair_a] < prio[pair_b]
        winner = np.where(b_wins, pair_b, pair_a)
        loser = np.where(b_wins, pair_a, pair_b)
        beaten[loser] = True
        losers = np.unique(loser[~beaten[winner]])
        beaten[loser] = False
        state.advance(losers)
        # Pairs between unmoved cells stand; pairs of a moved cell are found again.
        moved[losers] = True
        keep = ~(moved[pair_a] | moved[pair_b])
        r = losers[:, None] // cols + window[None, :, 0]
        c = losers[:, None] % cols + window[None, :, 1]
        inside = (r >= 0) & (r < rows) & (c >= 0) & (c < cols)
        other = np.where(inside, r * cols + c, 0)
        hit = inside & (key[other] == key[losers][:, None])
        hit &= ~moved[other] | (other > losers[:, None])  # a pair of two moved cells once
        moved[losers] = False
        rows_hit, cols_hit = np.nonzero(hit)
        pair_a = np.concatenate([pair_a[keep], losers[rows_hit]])
        pair_b = np.concatenate([pair_b[keep], other[rows_hit, cols_hit]])


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
    base: int,
) -> None:
    order = np.argsort(-priority[stuck[:, 0], stuck[:, 1]], kind="stable")
    for r, c in stuck[order]:
        allowed = np.arange(tiles.shape[0])
        if border[r]:
            allowed = np.flatnonzero(classes == (r + row_offset) % (d + 1))
        taken = choice[max(0, r - d) : r + d + 1, max(0, c - d) : c + d + 1] % base
        index, _ = best(cells[r * cols + c][None, :], tiles[allowed], allowed.size)
        for t in allowed[index[0]]:
            if not (taken == t % base).any():
                choice[r, c] = t
                break
        else:  # cannot happen: feasible_distance leaves more tiles than neighbours
            raise RuntimeError("no free tile for a cell; the variety distance is infeasible")
