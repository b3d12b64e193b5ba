"""Even patches come out even: the tiles of a flat area stop at one lightness, not each at its own."""

from __future__ import annotations

import numpy as np
from PIL import Image

from mosaic import RenderOptions, render_with_placement
from mosaic.correction import luma_spread, reach, tile_colours
from mosaic.levelling import FLAT, GATE, RADIUS, lightness_goals
from mosaic.library_features import candidate_tiles
from mosaic.signatures import srgb_to_lab

from .conftest import random_library
from .test_engine_correction import _cells, _luma_r


def _field(rows: int, cols: int, lab: tuple[float, float, float]) -> np.ndarray:
    return np.broadcast_to(np.array(lab, np.float64), (rows, cols, 3)).copy()


def test_a_flat_patch_takes_the_mean_shortfall_of_its_flat_neighbours() -> None:
    target = _field(9, 9, (90.0, 2.0, 5.0))
    shortfall = -np.linspace(1.0, 8.0, 81).reshape(9, 9)  # every tile short on the bright side
    goals = lightness_goals(target, shortfall)
    r, c = 4, 4
    patch = shortfall[r - RADIUS : r + RADIUS + 1, c - RADIUS : c + RADIUS + 1]
    assert np.isclose(goals[r, c], 90.0 + patch.mean())
    assert np.isclose(goals[0, 0], 90.0 + shortfall[: RADIUS + 1, : RADIUS + 1].mean())  # the patch cut at the edge
    assert not np.isnan(goals).any()


def test_edges_other_sides_and_small_shortfalls_keep_their_own_moves() -> None:
    target = _field(9, 12, (90.0, 2.0, 5.0))
    target[:, 6:, 0] = 90.0 + FLAT + 1  # a step: the cells near it are not in a flat patch
    shortfall = np.full((9, 12), -4.0)
    shortfall[4, 1] = 0.5  # this tile lands past its cell's colour, on the other side
    goals = lightness_goals(target, shortfall)
    assert np.isnan(goals[:, 6 - RADIUS : 6 + RADIUS]).all()
    left = np.isnan(goals[:, : 6 - RADIUS])
    assert left[4, 1] and left.sum() == 1
    assert not np.isnan(goals[:, 6 + RADIUS :]).any()
    small = lightness_goals(target, np.full((9, 12), -GATE / 2))  # nothing worth evening
    assert np.isnan(small).all()


def test_a_flat_target_s_tiles_stop_together_and_the_ones_held_back_keep_their_contrast() -> None:
    """A pale flat target from mid-tone tiles: on their own the tiles stop at many lightnesses
    (each where the correction or its range ends); evened, the cells spread far less, and no
    tile held back gives up contrast or layout."""
    library = random_library(60, seed=4)
    colour = (236, 232, 226)
    target = Image.new("RGB", (160, 96), colour)
    out, choice = render_with_placement(target, library, tile_size=16, tiles_across=20, seed="even")
    placed = candidate_tiles(library, 16, RenderOptions())[choice.ravel()]
    means, low, high = tile_colours(placed)
    targets = np.tile(np.array([colour], np.uint8), (len(placed), 1))
    spread = luma_spread(placed)
    own, _ = reach(targets, means, low, high, spread, RenderOptions().correction)
    own_l = srgb_to_lab(np.clip(means + own, 0, 255).astype(np.uint8))[:, 0]
    cells = _cells(out, 16)
    out_l = srgb_to_lab(np.round(cells.reshape(len(cells), -1, 3).mean(axis=1)).astype(np.uint8))[:, 0]
    start = srgb_to_lab(means.astype(np.uint8))[:, 0]
    assert own_l.std() > 1.5  # on its own the area is speckled
    assert out_l.std() < 0.75 * own_l.std()  # the tiles its range stops stay where they stop
    held = np.abs(out_l - start) < np.abs(own_l - start) - 0.5
    assert held.mean() > 0.2  # the tiles that could go further were held back, whole:
    weights = np.array([0.299, 0.587, 0.114])
    ratio = (cells[held].astype(np.float64) @ weights).std(axis=(1, 2)) / (
        placed[held].astype(np.float64) @ weights
    ).std(axis=(1, 2))
    assert ratio.min() > 0.95  # never narrowed (0.91 at most); only the tail its range allows may clip
    assert _luma_r(cells[held], placed[held]).min() > 0.99
