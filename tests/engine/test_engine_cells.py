"""Cells of several sizes (``mosaic.cells``, ``mosaic.sized``): a calm block takes one large photo,
detail keeps small ones, variety counts photos whatever their size, and one size is today's mosaic."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mosaic import SUB, TileLibrary, cell_image, plan_grid, sized
from mosaic.cells import origins, parse_cell_sizes, plan_cells, plan_of
from mosaic.options import DEFAULT_OPTIONS, RenderOptions
from mosaic.render import render_with_placement

from .conftest import random_library
from .test_engine_groups import burst_library, calm_photo


@pytest.fixture(scope="module")
def library() -> TileLibrary:
    return random_library(240, seed=5)


def _sky_over_noise(width: int = 480, height: int = 320) -> Image.Image:
    """A calm sky above, noise below: where the cells must be large and where small."""
    rng = np.random.default_rng(3)
    pixels = np.empty((height, width, 3), np.uint8)
    ramp = np.linspace(190, 215, width)[None, :, None]
    pixels[: height // 2] = np.clip(ramp + np.array([0, 8, 30]), 0, 255).astype(np.uint8)
    pixels[height // 2 :] = rng.integers(0, 256, (height - height // 2, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def test_cell_sizes_are_checked_and_one_size_is_the_default() -> None:
    assert parse_cell_sizes("1,2,4") == (1, 2, 4) and parse_cell_sizes(" 4,1 ") == (1, 4)
    for bad in ("2,4", "1,3", "1,1", "x", "1,8", ""):
        with pytest.raises(ValueError, match="cell sizes"):
            parse_cell_sizes(bad)
    assert DEFAULT_OPTIONS.cell_sizes == (1,) and not DEFAULT_OPTIONS.sized
    with pytest.raises(ValueError, match="split"):
        RenderOptions(cell_sizes=(1, 2), split=101)
    with pytest.raises(ValueError, match="several sizes"):
        RenderOptions(cell_sizes=(1, 2), overlay=30)
    with pytest.raises(ValueError, match="cells of several sizes cannot use every photo"):
        RenderOptions(cell_sizes=(1, 2), use_every_photo=True)


def test_calm_blocks_merge_and_detail_stays_small() -> None:
    grid = plan_grid(480, 320, tile_size=8, tiles_across=48)
    cells = cell_image(_sky_over_noise(), grid)
    plan = plan_cells(cells, (1, 2, 4), 50)
    top, bottom = plan[: grid.tiles_down // 2 - 4], plan[grid.tiles_down // 2 + 1 :]
    assert (top == 4).mean() > 0.9 and (bottom == 1).all()
    assert (plan_cells(cells, (1, 2, 4), 100) == 1).all()  # the most eager split keeps every cell small
    assert (plan_cells(cells, (1,), 0) == 1).all()
    for size in (2, 4):  # a cell of a size sits on multiples of it, whole
        rows, cols = np.nonzero(origins(plan, size))
        for r, c in zip(rows * size, cols * size):
            assert (plan[r : r + size, c : c + size] == size).all()


def test_a_run_of_rows_on_a_multiple_of_the_largest_size_plans_what_the_whole_plans() -> None:
    grid = plan_grid(480, 320, tile_size=8, tiles_across=48)
    cells = cell_image(_sky_over_noise(), grid)
    whole = plan_cells(cells, (1, 2, 4), 40)
    for start, stop in ((0, 12), (12, 20), (16, grid.tiles_down)):
        alone = plan_cells(cells[start * SUB : stop * SUB], (1, 2, 4), 40)
        assert np.array_equal(alone, whole[start:stop]), (start, stop)


def test_each_cell_shows_one_photo_at_its_size_and_photos_keep_apart_whatever_their_size() -> None:
    library = _flat_library(120, sloped=random_library(120, seed=5))  # sloped photos split a block, calm ones keep it
    options = RenderOptions(cell_sizes=(1, 2, 4))
    pixels, choice = render_with_placement(
        _sky_over_noise(), library, tile_size=8, tiles_across=48, seed="c", options=options
    )
    grid = plan_grid(480, 320, tile_size=8, tiles_across=48)
    upper = plan_cells(cell_image(_sky_over_noise(), grid), options.cell_sizes, options.split)
    plan = plan_of(upper, choice, options.cell_sizes)  # as painting reads it: the target's plan, split by fit
    assert (plan <= upper).all() and (plan == 1).any() and (plan > 1).any()
    count, d = len(library), 2  # 240 tiles in three shares of border classes: variety 2
    rects = []
    for size in options.cell_sizes:
        for r, c in np.argwhere(origins(plan, size)):
            r0, c0 = r * size, c * size
            block = choice[r0 : r0 + size, c0 : c0 + size]
            assert (block == block[0, 0]).all()  # one candidate over the whole cell
            rects.append((r0, c0, size, int(block[0, 0]) % count))
            tile = library.tiles(8 * size)[block[0, 0] % count]
            if block[0, 0] >= count:
                tile = tile[:, ::-1]
            shown = pixels[r0 * 8 : (r0 + size) * 8, c0 * 8 : (c0 + size) * 8].astype(float)
            assert np.corrcoef(shown[..., 1].ravel(), tile[..., 1].astype(float).ravel())[0, 1] > 0.9
    for i, (r0, c0, s0, p0) in enumerate(rects):  # no photo twice within d base cells, rectangle to rectangle
        for r1, c1, s1, p1 in rects[i + 1 :]:
            if p0 == p1:
                gap_rows = max(r1 - (r0 + s0), r0 - (r1 + s1)) + 1
                gap_cols = max(c1 - (c0 + s0), c0 - (c1 + s1)) + 1
                assert max(gap_rows, gap_cols) > d, ((r0, c0, s0), (r1, c1, s1))


def _burst_gaps(choice: np.ndarray, plan: np.ndarray, sizes: tuple[int, ...], count: int) -> list[int]:
    """The Chebyshev distance in base cells between every two cells holding a burst shot."""
    rects = [
        (r * size, c * size, size)
        for size in sizes
        for r, c in np.argwhere(origins(plan, size))
        if int(choice[r * size, c * size]) % count >= 300
    ]
    return [
        max(max(r1 - (r0 + s0), r0 - (r1 + s1)) + 1, max(c1 - (c0 + s0), c0 - (c1 + s1)) + 1)
        for i, (r0, c0, s0) in enumerate(rects)
        for r1, c1, s1 in rects[i + 1 :]
    ]


def test_near_duplicates_are_one_photo_to_cells_of_every_size() -> None:
    photo, options = calm_photo(), RenderOptions(cell_sizes=(1, 2, 4), split=90)
    grid = plan_grid(*photo.size, tile_size=8, tiles_across=30)
    upper = plan_cells(cell_image(photo, grid), options.cell_sizes, options.split)
    assert {1, 2, 4} <= set(np.unique(upper).tolist())
    gaps = {}
    for grouped in (False, True):
        library = burst_library(grouped=grouped)
        _, choice = render_with_placement(photo, library, tile_size=8, tiles_across=30, seed="s", options=options)
        plan = plan_of(upper, choice, options.cell_sizes)
        gaps[grouped] = _burst_gaps(choice, plan, options.cell_sizes, len(library))
    assert min(gaps[False]) == 1  # 30 "different" grey shots side by side
    assert gaps[True] and min(gaps[True]) > 2  # one photo: kept apart (variety 2 with 301 photos in 3 shares)


def test_one_size_is_the_single_size_mosaic(library: TileLibrary) -> None:
    photo = _sky_over_noise(240, 160)
    one, placed = render_with_placement(photo, library, tile_size=8, tiles_across=30, seed="s")
    again, same = render_with_placement(
        photo, library, tile_size=8, tiles_across=30, seed="s", options=RenderOptions(cell_sizes=(1,), split=10)
    )
    assert np.array_equal(one, again) and np.array_equal(placed, same)


def test_cells_too_large_for_the_library_or_too_small_for_a_layout_are_refused(library: TileLibrary) -> None:
    photo = _sky_over_noise(240, 160)
    with pytest.raises(ValueError, match="over the library's 64 px"):
        render_with_placement(photo, library, tile_size=32, seed="s", options=RenderOptions(cell_sizes=(1, 4)))
    with pytest.raises(ValueError, match="4 pixels or more"):
        render_with_placement(photo, library, tile_size=2, seed="s", options=RenderOptions(cell_sizes=(1, 2)))


def _flat_library(count: int, seed: int = 0, *, sloped: TileLibrary | None = None) -> TileLibrary:
    """Calm photos in the sky's colours: a colour and a little grain, no slope (from afar each
    is one colour); after ``sloped``'s photos if given."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(170, 250, (count, 1, 1, 3))
    atlas = np.clip(base + rng.normal(0, 6, (count, 64, 64, 3)), 0, 255).astype(np.uint8)
    names = [f"flat-{i}.png" for i in range(count)]
    if sloped is not None:
        atlas, names = (
            np.concatenate([sloped.tiles(64), atlas]),
            [*(f"sloped-{i}.png" for i in range(len(sloped))), *names],
        )
    return TileLibrary.from_tiles(atlas, names)


def test_a_calm_block_splits_where_its_photo_seen_from_afar_does_not_fit_it(
    library: TileLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    photo, options = _sky_over_noise(240, 160), RenderOptions(cell_sizes=(1, 2, 4))
    grid = plan_grid(240, 160, tile_size=8, tiles_across=30)
    upper = plan_cells(cell_image(photo, grid), options.cell_sizes, options.split)
    large = {}
    for name, photos in (("sloped", library), ("calm", _flat_library(600))):
        _, choice = render_with_placement(photo, photos, tile_size=8, tiles_across=30, seed="f", options=options)
        plan = plan_of(upper, choice, options.cell_sizes)
        assert (plan <= upper).all()
        large[name] = float((plan > 1).mean())
    assert large["sloped"] < large["calm"]  # a sloped photo's layout is seen from afar: its block splits
    monkeypatch.setattr(sized, "FIT_DELTA_E", None)  # the plan from the target alone
    _, choice = render_with_placement(photo, library, tile_size=8, tiles_across=30, seed="f", options=options)
    assert np.array_equal(plan_of(upper, choice, options.cell_sizes), upper)


def test_the_plan_is_read_back_from_the_choice_and_a_split_block_never_reads_as_one_cell() -> None:
    upper = np.full((4, 8), 4, np.uint8)
    upper[:, 4:] = 1
    choice = np.arange(32, dtype=np.int32).reshape(4, 8)
    choice[:, :4] = 7  # one photo over the block: one cell of 4
    assert np.array_equal(plan_of(upper, choice, (1, 2, 4)), upper)
    choice[:2, :2], choice[2:, :2], choice[2:, 3] = 8, 9, 10  # split: three cells of 2 and base cells
    plan = plan_of(upper, choice, (1, 2, 4))
    assert (plan[:, :2] == 2).all() and (plan[:2, 2:4] == 2).all() and (plan[2:, 2:] == 1).all()
    # without variety four quarters may take one photo: the block keeps its large cell, and every
    # cell painting reads back is its photo at its size, untouched here (no correction)
    photo, options = _sky_over_noise(240, 160), RenderOptions(cell_sizes=(1, 2, 4), variety=0, correction=0)
    flat = _flat_library(40, seed=1)
    grid = plan_grid(240, 160, tile_size=8, tiles_across=30)
    upper = plan_cells(cell_image(photo, grid), options.cell_sizes, options.split)
    pixels, choice = render_with_placement(photo, flat, tile_size=8, tiles_across=30, seed="v", options=options)
    plan = plan_of(upper, choice, options.cell_sizes)
    assert (plan <= upper).all() and (plan > 1).any()
    for size in options.cell_sizes:
        for r, c in np.argwhere(origins(plan, size)) * size:
            candidate = int(choice[r, c])
            tile = flat.tiles(8 * size)[candidate % len(flat)]
            tile = tile[:, ::-1] if candidate >= len(flat) else tile
            assert np.array_equal(pixels[r * 8 : (r + size) * 8, c * 8 : (c + size) * 8], tile), (r, c, size)
