"""The matcher's ranking (mosaic.matching.best) is fully defined, so every CPU ranks alike.

Tiles tie often: a flat tile and its mirror image have the same features, and so do the
repeated crops of one photo. Which tied tiles make the ``m`` best must not depend on the sort
kernel NumPy dispatches to (AVX-512, AVX2 or none), or two processors on different machines
would choose different photos for the same cells.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mosaic.matching import best
from mosaic.signatures import BOUND, FEATURES

ROOT = Path(__file__).resolve().parents[2]


def _tied(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer features with many exact ties: every tile twice, and few distinct values."""
    rng = np.random.default_rng(seed)
    tiles = rng.integers(-3, 4, (600, FEATURES)).astype(np.float32) * 40
    tiles = np.concatenate([tiles, tiles[::-1]])
    cells = rng.integers(-3, 4, (300, FEATURES)).astype(np.float32) * 40
    assert np.abs(tiles).max() <= BOUND
    return cells, tiles


@pytest.mark.parametrize("m", [1, 7, 64, 1200])
def test_the_m_best_are_the_first_m_by_score_then_tile_index(m: int) -> None:
    cells, tiles = _tied(seed=m)
    index, score = best(cells, tiles, m)
    exact = ((cells[:, None, :].astype(np.int64) - tiles[None].astype(np.int64)) ** 2).sum(axis=2)
    norms = (cells.astype(np.int64) ** 2).sum(axis=1)
    for row in range(cells.shape[0]):
        order = np.lexsort((np.arange(len(tiles)), exact[row]))[: min(m, len(tiles))]
        assert index[row].tolist() == order.tolist(), row
        assert (score[row] == exact[row, order] - norms[row]).all()  # |c - t|² - |c|², exactly


_CHILD = """
import json, sys
import numpy as np
from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
from mosaic.matching import best
sys.path.insert(0, sys.argv[1])
from tests.engine.test_engine_matching import _tied
cells, tiles = _tied(seed=3)
index, _ = best(cells, tiles, 64)
print(json.dumps({"dispatch": [k for k in __cpu_dispatch__ if __cpu_features__.get(k)], "index": index.tolist()}))
"""


def _child(script: str, disabled: list[str]) -> dict[str, Any]:
    """The JSON a child process prints last, run with NumPy's CPU targets ``disabled``."""
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(disabled), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", script, str(ROOT)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout.splitlines()[-1]))


def test_every_cpu_kernel_ranks_ties_alike() -> None:
    """The same ranking with every SIMD target NumPy found here, and with none of them."""
    from numpy._core._multiarray_umath import __cpu_dispatch__

    full = _child(_CHILD, [])
    plain = _child(_CHILD, list(__cpu_dispatch__))
    assert plain["dispatch"] == []  # the child really ran NumPy's baseline kernels only
    assert full["index"] == plain["index"], f"targets {full['dispatch']} rank ties unlike the baseline"


_RENDERS = """
import hashlib, json, sys
import numpy as np
from PIL import Image
sys.path.insert(0, sys.argv[1])
from mosaic import RenderOptions, plan_grid, render
from mosaic.library import TileLibrary
from tests.engine.conftest import random_library

# Flat tiles tie with their mirror images and with each other's features: the ties a real
# library has (plain skies, walls), among smooth random ones.
rng = np.random.default_rng(8)
flat = np.broadcast_to(rng.integers(0, 256, (60, 1, 1, 3)).astype(np.uint8), (60, 64, 64, 3))
mixed = random_library(240, seed=9)
library = TileLibrary.from_tiles(np.concatenate([mixed.atlas, flat, flat]), [f"t{i}.png" for i in range(360)])
y, x = np.mgrid[0:240, 0:320]
photo = Image.fromarray(np.stack([x * 255 // 320, y * 255 // 240, (x + y) % 256], axis=2).astype(np.uint8))
grid = plan_grid(320, 240, tile_size=8, tiles_across=40)
out = {}
for name, options in [("default", RenderOptions()), ("max_uses", RenderOptions(max_uses=4)), ("cells", RenderOptions(cell_sizes=(1, 2, 4)))]:
    pixels = render(photo, library, tile_size=8, grid=grid, seed="cpu", options=options)
    out[name] = hashlib.sha256(np.asarray(pixels).tobytes()).hexdigest()
print(json.dumps(out))
"""


def test_a_render_is_the_same_bytes_on_every_cpu_kernel() -> None:
    """ "The same pixels on every worker": a worker whose CPU lacks AVX2 and AVX-512 (NumPy's
    baseline kernels) renders the default, fair-use and several-size mosaics this one does."""
    from numpy._core._multiarray_umath import __cpu_dispatch__

    assert _child(_RENDERS, []) == _child(_RENDERS, list(__cpu_dispatch__))
