"""Fair use (``max_uses``): never exceeded, across bands too; exact where it can be checked; deterministic."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from PIL import Image

from mosaic import RenderOptions, TileLibrary, band_cells, cell_image, plan_bands, plan_grid, render, render_band
from mosaic.errors import TileBudgetError
from mosaic.fair import assign, check_budget
from mosaic.limits import MAX_FAIR_CELLS
from mosaic.tile_choice import assign_fair, choose_tiles

from .conftest import random_library


@pytest.mark.parametrize(("max_uses", "slices"), [(1, 1), (1, 4), (3, 3)])
def test_max_uses_is_never_exceeded_even_across_bands(photo: Image.Image, max_uses: int, slices: int) -> None:
    library = random_library(150, seed=2)
    options = RenderOptions(max_uses=max_uses, correction=0)
    grid = plan_grid(photo.width, photo.height, tile_size=8, tiles_across=12)  # 12 x 12 = 144 cells
    cells = cell_image(photo, grid)
    whole = assign_fair(cells, library, tile_size=8, options=options)
    assert np.bincount(whole.ravel() % len(library)).max() <= max_uses  # a mirror image is the same tile
    # The pipeline's way: one assignment, each band composes its own rows of it.
    stitched = np.concatenate(
        [
            render_band(
                band_cells(cells, band, tile_size=8),
                library,
                tile_size=8,
                seed="s",
                row_offset=band.start,
                options=options,
                choice=whole[band.start : band.stop],
            )
            for band in plan_bands(grid.tiles_down, slices)
        ]
    )
    out = render(photo, library, tile_size=8, tiles_across=12, slices=slices, seed="s", options=options)
    assert np.array_equal(out, stitched)
    assert np.array_equal(
        out, render(photo, library, tile_size=8, tiles_across=12, slices=slices, seed="t", options=options)
    )


def test_fair_use_on_a_flat_target_spreads_the_cells_over_distinct_tiles() -> None:
    library = random_library(64, seed=5)
    target = Image.new("RGB", (8, 8), (120, 140, 160))
    grid = plan_grid(8, 8, tile_size=4)
    cells = cell_image(target, grid)
    plain = choose_tiles(cells, library, tile_size=4, seed="s", options=RenderOptions(variety=0, correction=0))
    assert np.bincount(plain.ravel() % 64).max() == 64  # every cell wants the same tile
    fair = choose_tiles(cells, library, tile_size=4, seed="s", options=RenderOptions(max_uses=1, correction=0))
    assert sorted((fair.ravel() % 64).tolist()) == list(range(64))  # all 64 tiles, once each


def test_the_assignment_is_the_exact_optimum_on_a_small_problem() -> None:
    rng = np.random.default_rng(7)
    cells = rng.integers(-40, 40, (6, 5)).astype(np.float32)
    tiles = rng.integers(-40, 40, (4, 5)).astype(np.float32)
    choice = assign(cells, tiles, distinct=4, max_uses=2)
    cost = ((cells[:, None, :] - tiles[None, :, :]) ** 2).sum(axis=2)
    best = min(
        sum(cost[i, t] for i, t in enumerate(p))
        for p in itertools.product(range(4), repeat=6)
        if max(np.bincount(p, minlength=4)) <= 2
    )
    assert np.bincount(choice, minlength=4).max() <= 2
    assert sum(cost[i, t] for i, t in enumerate(choice)) == best


def test_a_budget_too_small_for_the_cells_is_refused_clearly(library200: TileLibrary) -> None:
    target = Image.new("RGB", (21, 10), (90, 90, 90))
    with pytest.raises(
        TileBudgetError, match="210 cells need more than 200 tiles x 1 uses: raise max_uses to at least 2"
    ):
        render(target, library200, tile_size=4, options=RenderOptions(max_uses=1))
    assert render(target, library200, tile_size=4, options=RenderOptions(max_uses=2)).shape == (40, 84, 3)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_uses_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="max_uses"):
        RenderOptions(max_uses=bad)  # type: ignore[arg-type]


def test_a_grid_too_big_to_assign_fairly_is_refused_before_any_work() -> None:
    check_budget(MAX_FAIR_CELLS, MAX_FAIR_CELLS, 1)  # the limit itself is allowed
    with pytest.raises(
        TileBudgetError, match=f"at most {MAX_FAIR_CELLS:,} cells and this one has {MAX_FAIR_CELLS + 1:,}"
    ):
        check_budget(MAX_FAIR_CELLS + 1, MAX_FAIR_CELLS + 1, 1)  # enough tiles, but too many cells
