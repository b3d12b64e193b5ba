"""Conflict rounds of the variety rule: which candidate each cell ends up with.

``resolve`` settles, in parallel rounds, cells that hold the same tile within ``d`` cells:
the one of lower priority moves on to its next candidate (see ``variety`` for where the
candidates and priorities come from). Everything here is integer bookkeeping, so the
outcome depends only on the candidates and priorities.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .candidates import Candidates

_SPARSE_BELOW = 32  # switch to pair lists once fewer than 1/32 of the cells move in a round


def _pairs(rows: int, cols: int, d: int) -> Iterator[tuple[tuple[slice, slice], tuple[slice, slice]]]:
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


def resolve(
    candidates: Candidates,
    priority: np.ndarray,
    d: int,
    rows: int,
    cols: int,
    key_of: np.ndarray,
    *,
    absent: np.ndarray | None = None,
) -> np.ndarray:
    """Parallel conflict rounds; returns choices, −1 where a cell ran out of candidates.

    ``key_of[candidate]``: what counts as a repeat (its tile's group: a tile, its mirror image
    and its near-duplicates hold the same key). ``absent``: flat bool, cells that hold no tile
    (they never conflict; their choice is −1).

    A round: every cell whose tile is also held, within ``d``, by a neighbour of higher
    priority that is not itself beaten moves on to its next candidate. While many cells
    move, rounds scan the whole band with shifted views (``_Board``); once few do,
    only the conflicting pairs are kept and only moved cells are compared with their
    windows (``_sparse_rounds``). Both compute the same rounds.
    """
    n = rows * cols
    state = _State(candidates, priority, key_of)
    if absent is not None:
        state.key[absent] = -1 - np.flatnonzero(absent)  # a key no other cell has, as out of candidates
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

    def __init__(self, candidates: Candidates, priority: np.ndarray, key_of: np.ndarray) -> None:
        self.candidates, self.key_of = candidates, key_of
        self.prio = priority.ravel()
        n = self.prio.size
        self.ptr = np.zeros(n, np.intp)
        self.cur = candidates.ranked[:, 0].copy()
        self.key = key_of[self.cur].astype(np.int32)  # a unique negative once out of candidates

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
        cur = cand.at(losers, np.minimum(ptr, width - 1))
        self.cur[losers] = cur
        key = self.key_of[cur]
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
