"""Near-duplicates are one photo to the engine (variety, max_uses), and "use every photo"."""

from __future__ import annotations

import functools
import io
import json
import zipfile

import numpy as np
import pytest
from PIL import Image

from mosaic import ATLAS_SIZE, RenderOptions, TileLibrary, cell_image, plan_grid, render
from mosaic.cover import CoverError, smallest_tiles_across
from mosaic.errors import LibraryFormatError
from mosaic.parts import plan_parts
from mosaic.render import render_with_placement
from mosaic.tile_choice import choose_tiles, choose_whole

from .conftest import random_library

BURST = 30  # near-identical grey shots
GREY = 128


@functools.lru_cache(maxsize=2)
def burst_library(*, grouped: bool) -> TileLibrary:
    """300 varied tiles far from grey, then a burst of 30 grey shots differing by a little noise."""
    others = random_library(300, seed=4).atlas.astype(np.int16)
    mean = others.reshape(300, -1, 3).mean(axis=1)[:, None, None, :]
    away = np.where(mean < GREY, -70, 70)  # push every other tile's colour away from grey
    others = np.clip(others + away, 0, 255).astype(np.uint8)
    rng = np.random.default_rng(7)
    y = np.linspace(-6, 6, ATLAS_SIZE)[:, None, None]
    shots = np.clip(GREY + y + rng.normal(0, 2, (BURST, ATLAS_SIZE, ATLAS_SIZE, 3)), 0, 255).astype(np.uint8)
    atlas = np.concatenate([others, shots])
    names = [f"other-{i}" for i in range(300)] + [f"burst-{i}" for i in range(BURST)]
    groups = [list(range(300, 300 + BURST))] if grouped else []
    return TileLibrary.from_tiles(atlas, names, groups)


def calm_photo() -> Image.Image:
    """A flat grey area with a little texture: what a burst of grey shots would crowd."""
    rng = np.random.default_rng(1)
    pixels = np.clip(GREY + rng.normal(0, 1.5, (160, 240, 3)), 0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def burst_cells(choice: np.ndarray, library: TileLibrary) -> np.ndarray:
    return (choice % len(library)) >= 300


def max_window_share(mask: np.ndarray, window: int = 8) -> int:
    counts = np.lib.stride_tricks.sliding_window_view(mask, (window, window)).sum(axis=(2, 3))
    return int(counts.max())


def closest_pair(mask: np.ndarray) -> int:
    """The least Chebyshev distance between two marked cells."""
    points = np.argwhere(mask)
    gaps = np.abs(points[:, None, :] - points[None, :, :]).max(axis=2)
    np.fill_diagonal(gaps, 10**6)
    return int(gaps.min())


def test_without_groups_a_burst_crowds_a_calm_area_and_with_groups_it_is_one_photo() -> None:
    photo = calm_photo()
    plain, grouped = burst_library(grouped=False), burst_library(grouped=True)
    _, loose = render_with_placement(photo, plain, tile_size=8, tiles_across=30, seed="s")
    _, kept = render_with_placement(photo, grouped, tile_size=8, tiles_across=30, seed="s")
    # Without groups: 30 "different" tiles, packed side by side all over the calm area.
    assert burst_cells(loose, plain).mean() > 0.5
    assert closest_pair(burst_cells(loose, plain)) == 1
    assert max_window_share(burst_cells(loose, plain)) > 16
    # With groups: one photo, never twice within 3 cells, at most 4 of any 8 x 8 window (6.25 %).
    assert closest_pair(burst_cells(kept, grouped)) >= 4
    assert max_window_share(burst_cells(kept, grouped)) <= 4
    assert burst_cells(kept, grouped).any()  # the burst is still used: its best member per cell


def test_max_uses_counts_a_group_once() -> None:
    library = burst_library(grouped=True)
    _, choice = render_with_placement(
        calm_photo(), library, tile_size=8, tiles_across=30, seed="s", options=RenderOptions(max_uses=3)
    )
    assert burst_cells(choice, library).sum() <= 3
    plain = burst_library(grouped=False)
    _, loose = render_with_placement(
        calm_photo(), plain, tile_size=8, tiles_across=30, seed="s", options=RenderOptions(max_uses=3)
    )
    assert burst_cells(loose, plain).sum() > 3


def test_groups_travel_with_the_library_bytes_and_its_version() -> None:
    grouped, plain = burst_library(grouped=True), burst_library(grouped=False)
    read = TileLibrary.from_bytes(grouped.to_bytes())
    assert read.groups == grouped.groups and read.version == grouped.version
    assert read.group_count == 301 and plain.group_count == 330
    assert grouped.version != plain.version
    assert TileLibrary.from_bytes(plain.to_bytes()).groups == ()
    np.testing.assert_array_equal(plain.group_of(), np.arange(330))  # no groups: every tile its own
    with pytest.raises(ValueError, match="groups"):
        TileLibrary.from_tiles(grouped.atlas[:3], ["a", "b", "c"], [[0, 1], [1, 2]])
    with pytest.raises(LibraryFormatError, match="groups"):  # a damaged index is refused, not guessed at
        TileLibrary.from_bytes(_with_meta(grouped.to_bytes(), groups=[[0, 999]]))


def _with_meta(index: bytes, **changes: object) -> bytes:
    source, out = zipfile.ZipFile(io.BytesIO(index)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            if name == "index.json":
                data = json.dumps({**json.loads(data), **changes}).encode()
            target.writestr(name, data)
    return out.getvalue()


def grouped_random(count: int, *, seed: int) -> TileLibrary:
    """A random library in which every tenth tile and the next are one group."""
    library = random_library(count, seed=seed)
    groups = [[i, i + 1] for i in range(0, count - 1, 10)]
    return TileLibrary.from_tiles(library.atlas, library.names, groups)


def test_use_every_photo_places_every_group_and_keeps_variety_across_parts(photo: Image.Image) -> None:
    library = grouped_random(240, seed=3)  # 216 groups
    options = RenderOptions(use_every_photo=True, correction=0)
    grid = plan_grid(photo.width, photo.height, tile_size=4, tiles_across=100)  # 100 x 100: two parts
    assert plan_parts(grid).count == 2
    pixels, choice = render_with_placement(photo, library, tile_size=4, tiles_across=100, seed="s", options=options)
    groups = library.group_of()[choice % len(library)]
    assert set(np.unique(groups)) == set(range(library.group_count))
    for g in range(library.group_count):  # variety holds for every group, across the part border too
        if (groups == g).sum() > 1:
            assert closest_pair(groups == g) >= 4
    _, usual = render_with_placement(photo, library, tile_size=4, tiles_across=100, seed="s")
    assert len(np.unique(library.group_of()[usual % len(library)])) < library.group_count  # the option did it
    # Any slicing gives the same bytes: the pins are decided once, from the grid alone.
    for slices in (2, 5):
        again = render(photo, library, tile_size=4, tiles_across=100, seed="s", options=options, slices=slices)
        np.testing.assert_array_equal(again, pixels)
    # and band by band, as processors render their rows of the controller's choice
    cells = cell_image(photo, grid)
    whole = choose_whole(cells, library, tile_size=4, seed="s", options=options, parts=plan_parts(grid))
    np.testing.assert_array_equal(whole, choice)


def test_use_every_photo_with_max_uses_places_every_group_within_its_budget(photo: Image.Image) -> None:
    library = grouped_random(150, seed=5)  # 135 groups
    options = RenderOptions(use_every_photo=True, max_uses=2, correction=0)
    _, choice = render_with_placement(photo, library, tile_size=8, tiles_across=14, seed="s", options=options)
    uses = np.bincount(library.group_of()[choice.ravel() % len(library)], minlength=library.group_count)
    assert uses.min() >= 1 and uses.max() <= 2


def test_a_grid_too_small_for_every_photo_names_the_smallest_tiles_across(photo: Image.Image) -> None:
    library = grouped_random(240, seed=3)  # 216 groups; the photo is square
    with pytest.raises(CoverError, match="choose at least 15 tiles across") as caught:
        render(photo, library, tile_size=8, tiles_across=14, options=RenderOptions(use_every_photo=True))
    assert caught.value.tiles_across == 15
    assert plan_grid(photo.width, photo.height, tile_size=8, tiles_across=15).cells >= 216 > 14 * 14
    wide = smallest_tiles_across(4000, 1000, tile_size=8, groups=216)
    assert plan_grid(4000, 1000, tile_size=8, tiles_across=wide).cells >= 216
    assert plan_grid(4000, 1000, tile_size=8, tiles_across=wide - 1).cells < 216
    render(photo, library, tile_size=8, tiles_across=15, options=RenderOptions(use_every_photo=True))


def test_use_every_photo_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="use_every_photo"):
        RenderOptions(use_every_photo=1)  # type: ignore[arg-type]


def test_pins_survive_a_band_chosen_on_its_own(photo: Image.Image) -> None:
    """A band chosen with its rows of the pins keeps them (the variety fill around them)."""
    library = grouped_random(240, seed=3)
    options = RenderOptions(use_every_photo=True)
    grid = plan_grid(photo.width, photo.height, tile_size=8, tiles_across=20)
    cells = cell_image(photo, grid)
    pins = np.full((grid.tiles_down, grid.tiles_across), -1, np.int32)
    pins[3, 4], pins[10, 10] = 7, 200
    choice = choose_tiles(cells, library, tile_size=8, seed="s", options=options, parts=plan_parts(grid), pins=pins)
    assert choice[3, 4] == 7 and choice[10, 10] == 200
