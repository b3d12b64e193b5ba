"""Colour signatures against known CIELAB values, and the integer features the matcher uses."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mosaic.signatures import BOUND, COLOUR, FEATURES, SUB, features, srgb_to_lab


@pytest.mark.parametrize(
    ("rgb", "lab"),
    [
        ((255, 255, 255), (100.0, 0.0, 0.0)),
        ((0, 0, 0), (0.0, 0.0, 0.0)),
        ((255, 0, 0), (53.24, 80.09, 67.20)),
        ((0, 255, 0), (87.73, -86.18, 83.18)),
        ((0, 0, 255), (32.30, 79.19, -107.86)),
        ((128, 128, 128), (53.59, 0.0, 0.0)),
    ],
)
def test_lab_of_known_colours(rgb: tuple[int, int, int], lab: tuple[float, float, float]) -> None:
    got = srgb_to_lab(np.array([rgb], np.uint8))[0]
    assert got == pytest.approx(lab, abs=0.1)


def test_lab_agrees_with_scikit_image() -> None:
    from skimage.color import rgb2lab

    rgb = np.random.default_rng(3).integers(0, 256, (500, 3), dtype=np.uint8)
    assert np.abs(srgb_to_lab(rgb) - rgb2lab(rgb[None] / 255.0)[0]).max() < 0.15


def test_flat_cells_have_no_structure_and_integer_bounded_features() -> None:
    flat = np.full((2, SUB, SUB, 3), 90, np.uint8)
    flat[1] = 200
    f = features(flat, structure=1.0, colour=16.0)
    assert f.shape == (2, FEATURES) and f.dtype == np.float32
    assert np.all(f[:, :-COLOUR] == 0)
    assert f[1, -COLOUR] > f[0, -COLOUR]  # lighter
    noisy = np.random.default_rng(0).integers(0, 256, (100, SUB, SUB, 3), dtype=np.uint8)
    g = features(noisy, structure=1.0, colour=16.0)
    assert np.all(g == np.rint(g)) and np.abs(g).max() <= BOUND


def test_a_left_right_edge_is_seen_by_the_structure_features() -> None:
    left_dark = np.full((1, SUB, SUB, 3), 200, np.uint8)
    left_dark[0, :, : SUB // 2] = 20
    right_dark = left_dark[:, :, ::-1].copy()
    a, b = features(np.concatenate([left_dark, right_dark]), structure=1.0, colour=16.0)
    assert np.allclose(a[-COLOUR:], b[-COLOUR:], atol=1)  # same mean colour
    assert not np.array_equal(a, b)  # different layout
    c, d = features(np.concatenate([left_dark, right_dark]), structure=0.0, colour=1.0)
    assert np.array_equal(c, d)  # colour-first cannot tell them apart


def test_texture_inside_sub_cells_is_a_tile_feature_and_a_smooth_cell_prefers_a_smooth_tile() -> None:
    from mosaic.matching import nearest
    from mosaic.signatures import TEXTURE, with_texture

    size = 16
    smooth = np.full((size, size, 3), 128, np.uint8)
    checker = smooth.copy()
    checker[(np.add.outer(np.arange(size), np.arange(size)) % 2) == 1] = 168
    checker[(np.add.outer(np.arange(size), np.arange(size)) % 2) == 0] = 88  # same sub-cell means
    tiles = np.stack([checker, smooth])  # the textured tile first: it would win a tie on index
    sub = np.stack([np.asarray(Image.fromarray(t).reduce(size // SUB)) for t in tiles])
    assert np.array_equal(sub[0], sub[1])  # layout and colour cannot tell them apart
    base = features(sub, structure=1.0, colour=6.5)
    assert np.all(base[:, TEXTURE] == 0)  # cells (and tiles before ``with_texture``): 0
    tiled = with_texture(base, tiles, sub, structure=1.0, colour=6.5)
    assert tiled[0, TEXTURE] > 0 and tiled[1, TEXTURE] == 0
    assert np.all(tiled == np.rint(tiled)) and np.abs(tiled).max() <= BOUND
    cell = features(sub[:1], structure=1.0, colour=6.5)
    assert nearest(cell, base)[0] == 0 and nearest(cell, tiled)[0] == 1  # the smooth tile now wins


def _colour_distance(first: tuple[int, int, int], second: tuple[int, int, int]) -> tuple[float, float]:
    """Feature distance of two flat colours, and their plain CIELAB distance."""
    pair = np.array([first, second], np.uint8)
    f = features(np.broadcast_to(pair[:, None, None, :], (2, SUB, SUB, 3)).copy(), structure=0.0, colour=1.0)
    lab = srgb_to_lab(pair)
    unit = BOUND / 128.0  # features(structure=0, colour=1) are in units of a* times this
    return float(np.linalg.norm(f[0] - f[1])) / unit, float(np.linalg.norm(lab[0] - lab[1]))


def test_a_tint_counts_far_more_on_a_grey_cell_than_the_same_step_on_a_saturated_one() -> None:
    """The grey measure: a grey cell given a slightly tinted tile is a large miss (the colour
    budget cannot take the tint away), a saturated cell given a slightly different saturation
    is a small one (and the pipeline's blue sky keeps its calm tiles)."""
    on_grey, step_grey = _colour_distance((118, 118, 118), (128, 114, 104))
    on_blue, step_blue = _colour_distance((40, 60, 170), (36, 56, 182))
    assert 4 < step_grey < 12 and 4 < step_blue < 12  # steps of similar size in CIELAB
    assert on_grey > 2 * step_grey
    assert on_blue < 1.2 * step_blue


def test_lightness_weighs_more_than_the_same_step_of_hue() -> None:
    darker, step_l = _colour_distance((120, 120, 120), (100, 100, 100))
    other_hue, step_h = _colour_distance((150, 60, 60), (150, 70, 45))
    assert darker / step_l > 2.0 > other_hue / step_h
