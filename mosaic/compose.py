"""Placing tiles on the grid: the chosen tile of every cell, copied into the mosaic's pixels.

In bounded steps of rows, so a 400 MP band never needs a second full-size temporary.
"""

from __future__ import annotations

import numpy as np

COMPOSE_BYTES = 1 << 24  # output bytes composed per step: bounds the temporaries


def compose(choice: np.ndarray, tiles: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Place ``tiles[choice]`` on the grid: ``(rows*s, cols*s, 3) uint8``, in bounded steps,
    into ``out`` where given (a view of a larger image: no second copy of the band)."""
    rows, cols = choice.shape
    s = tiles.shape[1]
    if out is None:
        out = np.empty((rows * s, cols * s, 3), np.uint8)
    elif out.shape != (rows * s, cols * s, 3) or out.dtype != np.uint8:
        raise ValueError(f"out is {out.shape} {out.dtype}, the grid needs {(rows * s, cols * s, 3)} uint8")
    view = out.reshape(rows, s, cols, s, 3)
    step = max(1, COMPOSE_BYTES // max(1, cols * s * s * 3))
    for r in range(0, rows, step):
        view[r : r + step] = tiles[choice[r : r + step]].transpose(0, 2, 1, 3, 4)
    return out
