"""Nearest tiles for many cells at once: chunked BLAS distances on exact integer features.

Squared distance |c − t|² = |c|² − 2 c·t + |t|²; the |c|² term does not change which tile
is nearest, so the matcher computes ``[c, 1] · [−2t, |t|²]`` — one float32 matrix product
per chunk of cells — and takes the argmin (or the ``m`` best). Features are integers with
|f| ≤ BOUND (see ``signatures``), so every product is exact and ties break by the lowest
tile index: the answer is the same on every machine and for every chunking.
"""

from __future__ import annotations

import numpy as np

CHUNK_ELEMENTS = 1 << 21  # distance-matrix entries per chunk: 8 MiB of float32
_SCORE_OFFSET = 1 << 24  # above any |score|: keys of (score, index) are positive


def augment(cells: np.ndarray, tiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[c, 1]`` rows and the ``[−2t, |t|²]`` columns: ``c_aug @ t_aug`` is |c − t|² − |c|²."""
    ones = np.ones((cells.shape[0], 1), np.float32)
    return np.hstack([cells, ones]), tile_columns(tiles)


def tile_columns(tiles: np.ndarray) -> np.ndarray:
    """The ``[−2t, |t|²]`` columns of ``augment``, for callers that search the same tiles often."""
    norms = np.einsum("ij,ij->i", tiles.astype(np.float64), tiles.astype(np.float64))
    t = np.hstack([-2.0 * tiles, norms[:, None]]).astype(np.float32)
    return np.ascontiguousarray(t.T)


def _chunk(rows: int, tiles: int) -> int:
    return max(1, min(rows, CHUNK_ELEMENTS // max(1, tiles)))


def nearest(cells: np.ndarray, tiles: np.ndarray) -> np.ndarray:
    """Index of the nearest tile for every cell: ``(n,) int32``; ties go to the lowest index."""
    c, t = augment(cells, tiles)
    out = np.empty(c.shape[0], np.int32)
    step = _chunk(c.shape[0], t.shape[1])
    for start in range(0, c.shape[0], step):
        out[start : start + step] = np.argmin(c[start : start + step] @ t, axis=1)
    return out


def best(
    cells: np.ndarray, tiles: np.ndarray, m: int, *, columns: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ``m`` nearest tiles per cell, best first: ``(n, m) int32`` indices and float64 scores.

    Order is by score then tile index, fully defined: the ``m`` are chosen on integer keys
    (score, then index), all distinct. ``np.argpartition`` on the scores alone would keep
    whichever tiles tied at the ``m``-th score its sort kernel meets first, and that kernel
    depends on the CPU (AVX-512, AVX2 or neither): measured, two machines then chose different
    tiles for the same cells. ``m`` is capped at the number of tiles.
    ``columns``: ``tile_columns(tiles)`` if the caller has it (``tiles`` is then not read).
    """
    t = tile_columns(tiles) if columns is None else columns
    count = t.shape[1]
    m = min(m, count)
    c = np.hstack([cells, np.ones((cells.shape[0], 1), np.float32)])
    n = c.shape[0]
    index = np.empty((n, m), np.int32)
    score = np.empty((n, m), np.float64)
    step = _chunk(n, count)
    # Scores are exact integers, |score| < 2^24 (module doc): (score + 2^24) * count + index.
    tail = np.arange(count, dtype=np.int64) + _SCORE_OFFSET * count
    for start in range(0, n, step):
        key = (c[start : start + step] @ t).astype(np.int64)
        key *= count
        key += tail
        if m < count:
            key = np.partition(key, m - 1, axis=1)[:, :m]
        key.sort(axis=1)
        index[start : start + step] = key % count
        score[start : start + step] = key // count - _SCORE_OFFSET
    return index, score


def ranked_neighbours(cells: np.ndarray, tiles: np.ndarray, graph: np.ndarray) -> np.ndarray:
    """Each cell's nearest tile and that tile's ``graph`` row, ranked by distance to the cell.

    ``(n, 1 + graph.shape[1]) int32``, best first, ties by tile index (the first column is
    ``nearest``). The distances are read from the chunk of scores ``nearest`` computes anyway
    (exact integers, |c|² left out, so the order is that of the exact distances): no tile
    features are gathered per cell.
    """
    c, t = augment(cells, tiles)
    n, count = c.shape[0], t.shape[1]
    out = np.empty((n, 1 + graph.shape[1]), np.int32)
    step = _chunk(n, count)
    for start in range(0, n, step):
        d = c[start : start + step] @ t
        first = np.argmin(d, axis=1)
        cand = np.concatenate([first[:, None], graph[first]], axis=1).astype(np.int64)
        rows = np.arange(cand.shape[0])[:, None] * count
        score = d.ravel()[rows + cand].astype(np.int64)  # exact integers, |score| < 2^24
        key = np.sort((score + (1 << 24)) * count + cand, axis=1)  # score, then tile index
        out[start : start + step] = key % count
    return out
