"""The cells benchmark's measures of a mosaic of several cell sizes: each cell against its photo at its own size."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from PIL import Image

from benchmarks.cells import sized_scores
from mosaic import RenderOptions, TileLibrary, render_with_placement
from tests.engine.conftest import random_library


def test_large_cells_placed_untouched_are_their_photos_and_a_large_cell_counts_once() -> None:
    sloped = random_library(120, seed=5)  # a sloped photo seen from afar does not fit a calm block: it splits
    rng = np.random.default_rng(1)
    sky = np.array([200, 210, 230]) + rng.uniform(-8, 8, (120, 1, 1, 3))  # calm photos near the calm colour
    calm = np.clip(sky + rng.normal(0, 6, (120, 64, 64, 3)), 0, 255)
    atlas = np.concatenate([sloped.tiles(64), calm.astype(np.uint8)])
    library = TileLibrary.from_tiles(atlas, [f"photo-{i}.png" for i in range(240)])
    pixels = np.full((160, 240, 3), (200, 210, 230), np.uint8)  # calm above, noise below
    pixels[80:] = np.random.default_rng(2).integers(0, 256, (80, 240, 3), dtype=np.uint8)
    target = Image.fromarray(pixels)
    options = RenderOptions(correction=0, cell_sizes=(1, 2, 4))
    mosaic, choice = render_with_placement(target, library, tile_size=8, tiles_across=30, seed="b", options=options)
    job = SimpleNamespace(tile=8, target=target)
    scores = sized_scores(mosaic, job, library, options, choice, target)
    assert 0.2 < scores["large"] < 0.8
    assert scores["recognisable"] == 1.0 and scores["contrast"] == 1.0 and scores["colour_moved"] < 1e-6
    assert scores["window_share"] <= 9 / 64  # variety 2 (240 tiles in three shares); by area one 4x4 cell is 25 %
    wrong = choice.copy()
    wrong[:4, :4] = (wrong[:4, :4] + 1) % len(library)  # a large cell scored against another photo
    assert sized_scores(mosaic, job, library, options, wrong, target)["recognisable"] < 1.0
