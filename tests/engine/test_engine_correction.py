"""Whole-tile colour correction and the placement: every placed tile stays the photo it is."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mosaic import (
    RenderOptions,
    TileLibrary,
    band_cells,
    cell_image,
    compose,
    placed_tiles,
    plan_grid,
    render,
    render_with_placement,
)
from mosaic.colour_difference import ciede2000
from mosaic.correction import FLAT, GAIN_FLOOR, add_shift, contract, luma_spread, offsets, reach, tile_colours
from mosaic.library_features import candidate_tiles
from mosaic.parts import plan_parts
from mosaic.signatures import srgb_to_lab
from mosaic.tile_choice import choose_tiles

from .conftest import flat_library, random_library
from .test_engine_render import _stitch


def _cells(out: np.ndarray, tile: int) -> np.ndarray:
    rows, cols = out.shape[0] // tile, out.shape[1] // tile
    return out.reshape(rows, tile, cols, tile, 3).swapaxes(1, 2).reshape(rows * cols, tile, tile, 3)


def _luma_r(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-cell correlation of the luma of ``a`` and ``b`` ``(n, s, s, 3)``."""
    weights = np.array([0.299, 0.587, 0.114])
    x = (a.astype(np.float64) @ weights).reshape(len(a), -1)
    y = (b.astype(np.float64) @ weights).reshape(len(b), -1)
    x -= x.mean(axis=1, keepdims=True)
    y -= y.mean(axis=1, keepdims=True)
    return (x * y).sum(axis=1) / np.sqrt((x * x).sum(axis=1) * (y * y).sum(axis=1))


@pytest.mark.parametrize("tile_size", [8, 16, 32])
def test_the_default_correction_keeps_every_tile_the_photo_it_is(
    photo: Image.Image, library200: TileLibrary, tile_size: int
) -> None:
    out, choice = render_with_placement(photo, library200, tile_size=tile_size, tiles_across=24, seed="c")
    placed = candidate_tiles(library200, tile_size, RenderOptions())[choice.ravel()]
    r = _luma_r(_cells(out, tile_size), placed)
    assert r.min() >= 0.99
    moved = np.abs(_cells(out, tile_size).mean(axis=(1, 2)) - placed.mean(axis=(1, 2))).max(axis=1)
    assert (moved > 2).mean() > 0.5  # and the colours did move


def test_the_placement_is_what_the_pixels_show(photo: Image.Image, library200: TileLibrary) -> None:
    options = RenderOptions(correction=0)
    out, choice = render_with_placement(photo, library200, tile_size=16, tiles_across=20, seed="p", options=options)
    assert np.array_equal(out, render(photo, library200, tile_size=16, tiles_across=20, seed="p", options=options))
    index, mirrored = placed_tiles(choice, library200)
    tiles = library200.tiles(16)
    expected = np.where(mirrored.ravel()[:, None, None, None], tiles[index.ravel()][:, :, ::-1], tiles[index.ravel()])
    assert np.array_equal(_cells(out, 16), expected)
    assert mirrored.any() and not mirrored.all()  # both kinds were exercised


@pytest.mark.parametrize("slices", [1, 3, 7])
def test_the_placement_is_each_part_s_own_choice(photo: Image.Image, library200: TileLibrary, slices: int) -> None:
    kwargs = {"tile_size": 8, "tiles_across": 130, "seed": "b", "slices": slices}
    pixels, choice = render_with_placement(photo, library200, **kwargs)
    assert np.array_equal(pixels, _stitch(photo, library200, options=RenderOptions(), **kwargs))
    grid = plan_grid(photo.width, photo.height, tile_size=8, tiles_across=130)
    cells = cell_image(photo, grid)
    parts = plan_parts(grid)
    assert parts.count >= 2
    chosen = [
        choose_tiles(band_cells(cells, part), library200, tile_size=8, seed="b", row_offset=part.start, parts=parts)
        for part in parts.within(range(grid.tiles_down))
    ]
    assert np.array_equal(choice, np.concatenate(chosen))


@pytest.mark.parametrize(("slices", "tile_size"), [(3, 8), (5, 16), (4, 12), (3, 2)])
def test_corrected_bands_rendered_alone_equal_the_whole(
    photo: Image.Image, library200: TileLibrary, slices: int, tile_size: int
) -> None:
    kwargs = {"tile_size": tile_size, "tiles_across": 130, "seed": "req", "slices": slices}
    for options in (RenderOptions(), RenderOptions(correction=80, overlay=40, match_contrast=True)):
        whole = render(photo, library200, options=options, **kwargs)
        assert np.array_equal(whole, _stitch(photo, library200, options=options, **kwargs))


def test_more_correction_brings_each_cell_closer_to_its_target_colour() -> None:
    library = flat_library([(200, 60, 40), (40, 60, 200), (90, 160, 90)])
    target = Image.new("RGB", (6, 4), (120, 100, 130))
    errors = []
    for correction in (0, 25, 50, 75, 100):
        out = render(target, library, tile_size=8, options=RenderOptions(variety=0, correction=correction))
        mean = np.round(out.reshape(-1, 3).mean(axis=0)).astype(np.uint8)
        errors.append(float(ciede2000(srgb_to_lab(mean), srgb_to_lab(np.array([120, 100, 130], np.uint8)))))
    assert all(a > b for a, b in zip(errors, errors[1:]))  # in ΔE00, the unit the correction moves in
    assert errors[-1] <= 1.0  # 100 %: the tile's mean is the cell's


def test_a_shift_stops_where_the_tile_would_lose_its_highlights() -> None:
    tile = np.zeros((1, 10, 10, 3), np.uint8)
    tile[0, :, :5] = 40
    tile[0, :, 5:] = 240  # half the pixels near white
    means, low, high = tile_colours(tile)
    shift = offsets(np.array([[255, 255, 255]], np.uint8), means, low, high, 100)
    assert (shift == high).all() and high.max() == 15


def _two_tone(dark: int, bright: int, size: int = 10) -> np.ndarray:
    tile = np.empty((1, size, size, 3), np.uint8)
    tile[0, :, : size // 2] = dark
    tile[0, :, size // 2 :] = bright
    return tile


def test_a_tile_its_range_stops_short_narrows_its_contrast_to_reach_further() -> None:
    """Half the pixels at 150, half at 240, in a white cell: the offset alone stops at +15;
    a gain of ``GAIN_FLOOR`` (0.91) around the mean (195) frees 9 % of the way to the bright
    tail (4 of 45 levels), and the tile keeps nine tenths of its contrast and all its layout."""
    tile = _two_tone(150, 240)
    means, low, high = tile_colours(tile)
    white = np.array([[255, 255, 255]], np.uint8)
    plain = offsets(white, means, low, high, 50)
    shift, gain = reach(white, means, low, high, luma_spread(tile), 50)
    assert (plain == high).all() and high.max() == 15
    assert gain[0] == np.float32(GAIN_FLOOR) and (shift == 15 + 4).all()  # floor(0.09 × 45)
    out = tile[0].copy()
    add_shift(contract(out, gain.reshape(1, 1), means.reshape(1, 1, 3)), shift.reshape(1, 1, 3))
    assert out.max() == 255 and out.mean() > tile[0].mean() + 15
    assert out.std() / tile[0].std() >= 0.9
    assert _luma_r(out[None], tile)[0] > 0.999


def test_a_tile_that_fits_or_is_nearly_flat_keeps_its_contrast() -> None:
    rng = np.random.default_rng(5)
    tiles = rng.integers(0, 256, (400, 8, 8, 3)).astype(np.uint8)
    tiles[:100] = (tiles[:100] // 32 + 120).astype(np.uint8)  # spreads under FLAT: never narrowed
    means, low, high = tile_colours(tiles)
    spread = luma_spread(tiles)
    assert (spread[:100] < FLAT).all() and (spread[100:] >= FLAT).all()
    targets = rng.integers(0, 256, (400, 3)).astype(np.uint8)
    for percent in (25, 50, 75, 100):
        shift, gain = reach(targets, means, low, high, spread, percent)
        plain = offsets(targets, means, low, high, percent)
        fits = gain == 1
        assert (gain >= np.float32(GAIN_FLOOR)).all() and (gain[:100] == 1).all()
        assert np.array_equal(shift[fits], plain[fits])  # at gain 1 the offset is the plain one
        assert (np.abs(shift[~fits]) > np.abs(plain[~fits])).any(axis=1).all()  # a gain always buys reach
        assert (~fits).sum() > 20


def test_a_pale_target_from_mid_tone_tiles_narrows_them_and_keeps_them_photos() -> None:
    """The whole render: tiles too dark for a pale target are narrowed (to about 0.9 of
    their contrast, never much under), keep their layout, come out paler than the offset
    alone would take them, and a band rendered alone equals the same band of the whole. (The
    target is flat: tiles that could get closer than the rest are held back to the common
    level, whole, so only some are narrowed.)"""
    library = random_library(60, seed=4)
    target = Image.new("RGB", (96, 64), (236, 232, 226))
    kwargs = {"tile_size": 16, "tiles_across": 12, "seed": "pale"}
    out, choice = render_with_placement(target, library, **kwargs)
    placed = candidate_tiles(library, 16, RenderOptions())[choice.ravel()]
    cells = _cells(out, 16)
    weights = np.array([0.299, 0.587, 0.114])
    ratio = (cells.astype(np.float64) @ weights).std(axis=(1, 2)) / (placed.astype(np.float64) @ weights).std(
        axis=(1, 2)
    )
    assert (ratio < 0.97).mean() > 0.1 and ratio.min() >= 0.87  # 0.91 less what the clipped tail takes
    assert _luma_r(cells, placed).min() >= 0.99
    means, low, high = tile_colours(placed)
    targets = np.tile(np.array([[236, 232, 226]], np.uint8), (len(placed), 1))
    plain = np.clip(placed.astype(np.int16) + offsets(targets, means, low, high, 50)[:, None, None, :], 0, 255)
    narrowed = ratio < 0.97
    paler = cells[narrowed].mean(axis=(1, 2, 3)) - plain[narrowed].mean(axis=(1, 2, 3))
    assert (paler > 0.5).all()  # a few levels in the channel that was short, less the clipped tail
    whole = render(target, library, slices=3, **kwargs)
    assert np.array_equal(whole, _stitch(target, library, slices=3, options=RenderOptions(), **kwargs))


def test_render_options_are_validated() -> None:
    defaults = RenderOptions()
    assert defaults.overlay == 0 and not defaults.match_contrast and 0 < defaults.correction < 100
    for bad in ({"correction": 101}, {"correction": -1}, {"overlay": 101}, {"overlay": 2.5}, {"correction": True}):
        with pytest.raises(ValueError):
            RenderOptions(**bad)  # type: ignore[arg-type]


def test_the_overlay_paints_the_target_over_the_tiles_and_breaks_them() -> None:
    """On, the overlay moves every sub-cell toward the target: the tiles stop being photographs."""
    library = random_library(80, seed=3)
    rng = np.random.default_rng(1)
    target = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).resize(
        (96, 96), Image.Resampling.NEAREST
    )
    kwargs = {"tile_size": 16, "tiles_across": 6, "seed": "o"}
    off, choice = render_with_placement(target, library, **kwargs)
    on, same = render_with_placement(target, library, options=RenderOptions(overlay=100), **kwargs)
    assert np.array_equal(choice, same)
    placed = candidate_tiles(library, 16, RenderOptions())[choice.ravel()]
    assert _luma_r(_cells(off, 16), placed).min() >= 0.99
    assert np.median(_luma_r(_cells(on, 16), placed)) < 0.8
    small = np.asarray(target.reduce(4), np.float64)  # the target at one pixel per sub-cell

    def error(out: np.ndarray) -> float:
        return float(np.abs(out.reshape(24, 4, 24, 4, 3).mean(axis=(1, 3)) - small).mean())

    assert error(on) < error(off) / 2


@pytest.mark.parametrize("tile_size", [1, 3, 8, 12])
@pytest.mark.parametrize("largest", [100, 255])
def test_placing_corrected_tiles_is_the_plain_saturating_sum(tile_size: int, largest: int) -> None:
    rng = np.random.default_rng(tile_size + largest)
    tiles = rng.integers(0, 256, (50, tile_size, tile_size, 3), dtype=np.uint8)
    choice = rng.integers(0, 50, (9, 11)).astype(np.int32)
    shift = rng.integers(-largest, largest + 1, (9, 11, 3)).astype(np.int16)
    plain = np.clip(tiles[choice].astype(np.int16) + shift[:, :, None, None, :], 0, 255).astype(np.uint8)
    expected = plain.transpose(0, 2, 1, 3, 4).reshape(9 * tile_size, 11 * tile_size, 3)
    assert np.array_equal(add_shift(compose(choice, tiles), shift), expected)
