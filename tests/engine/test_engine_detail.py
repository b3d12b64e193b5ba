"""Contrast matching (``mosaic.detail``): flat target cells get quiet tiles, deterministically."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mosaic import SUB, RenderOptions, TileLibrary, render
from mosaic.detail import FLOOR, STEPS, attenuate, gain_levels, local_overlay, tile_variance

from .conftest import random_library
from .test_engine_render import _stitch

OVERLAY = RenderOptions(overlay=90)  # contrast matching is part of the overlay option
MATCHED = RenderOptions(overlay=90, match_contrast=True)


def _cell_std(out: np.ndarray, tile_size: int) -> np.ndarray:
    """The luma standard deviation inside each cell of a mosaic."""
    rows, cols = out.shape[0] // tile_size, out.shape[1] // tile_size
    y = out.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    return y.reshape(rows, tile_size, cols, tile_size).std(axis=(1, 3))


def test_a_flat_cell_gets_the_floor_and_a_cell_as_busy_as_its_tile_full_contrast() -> None:
    rng = np.random.default_rng(3)
    tile = rng.integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)
    variance = tile_variance(tile)
    flat = np.full((1, SUB, SUB, 3), 90, np.uint8)
    busy = rng.integers(0, 256, (1, SUB, SUB, 3), dtype=np.uint8)
    assert gain_levels(flat, variance)[0] == FLOOR
    assert gain_levels(busy, variance)[0] == STEPS
    calmer = (busy.astype(np.int64) - 128) // 4 + 128  # a quarter of the contrast
    level = gain_levels(calmer.astype(np.uint8), variance)[0]
    assert FLOOR <= level < STEPS


def test_attenuation_keeps_the_mean_and_scales_the_rest_exactly() -> None:
    pixels = np.array([[[10, 100, 250], [30, 120, 230]]], np.uint8)  # (1, 2, 3): one tile, two pixels
    means = np.array([[20, 110, 240]])
    half = attenuate(pixels, means, np.array([STEPS // 2]))
    assert half.tolist() == [[[15, 105, 245], [25, 115, 235]]]
    assert np.array_equal(attenuate(pixels, means, np.array([STEPS])), pixels)


def test_the_overlay_rises_from_its_setting_at_full_contrast_to_100_at_the_floor() -> None:
    levels = np.arange(FLOOR, STEPS + 1)
    percents = local_overlay(levels, 90)
    assert percents[0] == 100 and percents[-1] == 90
    assert np.all(np.diff(percents) <= 0)


def _half_flat_target() -> Image.Image:
    """Left half one flat colour, right half a busy photo-like texture."""
    rng = np.random.default_rng(11)
    array = np.full((64, 96, 3), (60, 90, 140), np.uint8)
    array[:, 48:] = np.clip(rng.normal(128, 60, (64, 48, 3)), 0, 255).astype(np.uint8)
    return Image.fromarray(array)


def test_flat_target_cells_get_quieter_tiles_than_busy_ones_and_than_without_the_rule() -> None:
    library = random_library(220, seed=4)
    target = _half_flat_target()
    on = render(target, library, tile_size=16, tiles_across=12, seed="s", options=MATCHED)
    off = render(target, library, tile_size=16, tiles_across=12, seed="s", options=OVERLAY)
    std_on, std_off = _cell_std(on, 16), _cell_std(off, 16)
    flat_on, flat_off = std_on[:, :5].mean(), std_off[:, :5].mean()  # cells wholly in the flat half
    assert flat_on < flat_off / 3  # quieter where the photo is flat (no rims at the tile borders either)...
    assert flat_on > 0.5  # ...but the tiles are still there
    assert std_on[:, 7:].mean() > 3 * flat_on  # busy cells keep their tiles' contrast
    colour = on[:, : 5 * 16].reshape(-1, 3).mean(axis=0)
    assert np.abs(colour - (60, 90, 140)).max() < 2.0  # the flat half gets its colour in full


@pytest.mark.parametrize(("slices", "tile_size"), [(1, 8), (3, 8), (8, 8), (3, 12)])
def test_contrast_matching_is_deterministic_and_band_consistent(slices: int, tile_size: int) -> None:
    library: TileLibrary = random_library(220, seed=4)
    target = _half_flat_target()
    kwargs = {"tile_size": tile_size, "tiles_across": 24, "seed": "req", "slices": slices}
    whole = render(target, library, options=MATCHED, **kwargs)
    assert np.array_equal(whole, render(target, library, options=MATCHED, **kwargs))  # the same pixels again
    assert np.array_equal(whole, _stitch(target, library, options=MATCHED, **kwargs))  # bands alone
    off = render(target, library, options=OVERLAY, **kwargs)
    assert not np.array_equal(whole, off)  # the rule was at work
