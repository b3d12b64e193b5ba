"""Nearest tiles in big libraries: an inverted file over integer k-means lists of tiles.

A full scan costs cells × candidates distance products: a 12 MP photo at tile 16 (46,000
cells) against a 10,000-tile library with mirror images (20,000 candidates) is 0.9·10⁹ of
them, fifteen times the 640-tile library's scan. No exact index helps in 19 dimensions (a
k-d tree took longer than the scan), so big libraries get an inverted file: the
candidates are grouped into about √N lists around centroids (k-means on the same features),
a cell is compared with the centroids and then with the tiles of its ``PROBES`` nearest
lists only — a few per cent of the library at 20,000 candidates.

The search is approximate; the ranking is not. Every distance computed is exact, a cell's
answer is the best tile among the lists it probed, and ``Candidates`` then ranks that
tile's neighbours in the tile graph by exact distance, which recovers most of the misses:
measured on the benchmark's 12 MP target at tile 16 with the 10,000-tile library, the
index finds the exact nearest tile for 97.9 % of the cells, 99.2 % after the graph ranking,
at 0.22 % more total distance than exact search (README, "Benchmarks").

Deterministic everywhere: centroids are rounded to integers every iteration (their means
are integer divisions), assignments use ``matching``'s exact integer scores with ties to
the lowest index, so the same library builds the same index on every machine; and a cell's
answer depends only on its own features, so any banding or chunking gives the same pixels.
Libraries of at most ``DENSE_MAX`` candidates are scanned in full (exact): there a scan
costs little more than the probes would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .matching import CHUNK_ELEMENTS, augment, nearest

DENSE_MAX = 4096  # candidates up to which every cell scans the whole library (exact)
PROBES = 6  # lists each cell scans
ITERATIONS = 8  # k-means rounds when the index is built (once per library and tile size)
_GATHER_ELEMENTS = 1 << 18  # gathered tile features per step: stays in cache
_NONE = np.int64(1) << 40  # a score above any real one: a probe of an empty list


@dataclass(frozen=True, eq=False)
class TileIndex:
    """Candidates grouped into lists: ``order[starts[k]:starts[k + 1]]`` is list ``k``, ascending."""

    centroids: np.ndarray  # (lists, features) float32, integer-valued like the features
    order: np.ndarray  # (candidates,) int64
    starts: np.ndarray  # (lists + 1,) int64


def build_index(tiles: np.ndarray) -> TileIndex | None:
    """The index of ``tiles`` (integer features), or None when a full scan is the better deal."""
    n = tiles.shape[0]
    if n <= DENSE_MAX:
        return None
    count = round(math.sqrt(n))
    centroids = tiles[np.linspace(0, n, count, endpoint=False).astype(np.int64)].copy()
    exact = tiles.astype(np.int64)
    for _ in range(ITERATIONS):
        lists = nearest(tiles, centroids)
        sizes = np.bincount(lists, minlength=count)
        order = np.argsort(lists, kind="stable")
        filled = np.flatnonzero(sizes)
        sums = np.add.reduceat(exact[order], np.concatenate([[0], np.cumsum(sizes)[:-1]])[filled], axis=0)
        # Integer mean, rounded half up: the same centroid on every machine.
        centroids[filled] = np.floor_divide(2 * sums + sizes[filled, None], 2 * sizes[filled, None])
    lists = nearest(tiles, centroids)
    order = np.argsort(lists, kind="stable").astype(np.int64)
    starts = np.searchsorted(lists[order], np.arange(count + 1)).astype(np.int64)
    return TileIndex(centroids=centroids, order=order, starts=starts)


def nearest_tiles(cells: np.ndarray, tiles: np.ndarray, index: TileIndex | None) -> np.ndarray:
    """``(n,) int32``: the nearest tile per cell (exact without an index, see the module doc with one)."""
    if index is None:
        return nearest(cells, tiles)
    probes = _probes(cells, index.centroids)
    q = probes.shape[1]
    c, t = augment(cells, tiles)
    rows = np.ascontiguousarray(t.T[index.order])  # list k: rows starts[k]:starts[k+1]
    score = np.full(probes.size, _NONE, np.int64)
    found = np.zeros(probes.size, np.int64)
    flat = probes.ravel()
    by_list = np.argsort(flat, kind="stable")  # the (cell, probe) pairs of each list together
    bounds = np.searchsorted(flat[by_list], np.arange(index.starts.size))
    for k in range(index.starts.size - 1):
        lo, hi = index.starts[k], index.starts[k + 1]
        pairs = by_list[bounds[k] : bounds[k + 1]]
        if hi == lo or not pairs.size:
            continue
        step = max(1, CHUNK_ELEMENTS // int(hi - lo))
        for start in range(0, pairs.size, step):
            part = pairs[start : start + step]
            d = c[part // q] @ rows[lo:hi].T
            j = np.argmin(d, axis=1)  # the first of equal scores: the lowest tile index
            score[part] = d[np.arange(part.size), j]
            found[part] = index.order[lo + j]
    key = (score * tiles.shape[0] + found).reshape(-1, q)  # score, then tile index
    return (np.min(key, axis=1) % tiles.shape[0]).astype(np.int32)


def _probes(cells: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """``(n, PROBES)``: each cell's nearest lists, as a set (score, then list number: unique keys)."""
    count = centroids.shape[0]
    q = min(PROBES, count)
    c, t = augment(cells, centroids)
    out = np.empty((cells.shape[0], q), np.int64)
    step = max(1, CHUNK_ELEMENTS // count)
    for start in range(0, cells.shape[0], step):
        key = (c[start : start + step] @ t).astype(np.int64) * count + np.arange(count)
        if q < count:
            key = np.partition(key, q - 1, axis=1)[:, :q]
        out[start : start + step] = key % count
    return out


def ranked_around(cells: np.ndarray, tiles: np.ndarray, first: np.ndarray, graph: np.ndarray) -> np.ndarray:
    """``[first, graph[first]...]`` per cell ranked by exact distance, ties by tile index.

    ``(n, 1 + graph.shape[1]) int32``, the same order ``matching.ranked_neighbours`` gives
    for the same first tile, from the same exact scores (|t|² − 2c·t, integers below 2^24).
    """
    count = tiles.shape[0]
    width = 1 + graph.shape[1]
    c, t = augment(cells, tiles)
    rows = np.ascontiguousarray(t.T)  # [−2t, |t|²] per tile
    out = np.empty((cells.shape[0], width), np.int32)
    step = max(1, _GATHER_ELEMENTS // (width * rows.shape[1]))
    for start in range(0, cells.shape[0], step):
        head = first[start : start + step]
        cand = np.concatenate([head[:, None], graph[head]], axis=1).astype(np.int64)
        score = np.einsum("nkf,nf->nk", np.take(rows, cand, axis=0), c[start : start + step])
        out[start : start + step] = np.sort(score.astype(np.int64) * count + cand, axis=1) % count
    return out
