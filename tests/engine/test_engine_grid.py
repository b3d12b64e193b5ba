"""The output-size rule, slicing into bands, and the cell image the matcher works on."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mosaic import SUB, Grid, band_cells, cell_image, plan_bands, plan_grid


def test_one_cell_per_pixel_when_it_fits() -> None:
    grid = plan_grid(100, 50, tile_size=8, max_output_pixels=40_000_000)
    assert grid == Grid(100, 50, 800, 400, 8)


def test_large_photo_gets_the_largest_grid_under_the_maximum() -> None:
    grid = plan_grid(4000, 3000, tile_size=16, max_output_pixels=40_000_000)
    assert grid.output_pixels <= 40_000_000
    assert grid.tiles_down == round(3000 * grid.tiles_across / 4000)
    bigger = grid.tiles_across + 1
    assert bigger * round(3000 * bigger / 4000) * 256 > 40_000_000


def test_explicit_tiles_across_is_honoured_and_rows_follow_the_aspect() -> None:
    grid = plan_grid(4000, 3000, tile_size=16, tiles_across=100)
    assert (grid.tiles_across, grid.tiles_down, grid.output_width, grid.output_height) == (100, 75, 1600, 1200)


def test_explicit_tiles_across_is_clamped_to_the_maximum() -> None:
    grid = plan_grid(1000, 1000, tile_size=10, tiles_across=1000, max_output_pixels=1_000_000)
    assert grid.tiles_across == 100 and grid.output_pixels == 1_000_000


def test_tiny_and_extreme_aspects() -> None:
    assert plan_grid(1, 1, tile_size=64) == Grid(1, 1, 64, 64, 64)
    assert plan_grid(1000, 1, tile_size=4, tiles_across=10).tiles_down == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tile_size": 0}, "tile size"),
        ({"tile_size": 65}, "tile size"),
        ({"tile_size": 8, "tiles_across": 0}, "tiles across"),
        ({"tile_size": 64, "max_output_pixels": 1000}, "larger than the maximum"),
    ],
)
def test_impossible_grids_are_clear_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_grid(100, 100, **kwargs)


def test_bands_are_as_equal_as_possible_and_cover_every_row() -> None:
    bands = plan_bands(10, 4)
    assert [len(b) for b in bands] == [3, 3, 2, 2]
    assert [row for band in bands for row in band] == list(range(10))


def test_more_slices_than_rows_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="cannot cut 3 rows of tiles into 5 slices"):
        plan_bands(3, 5)
    with pytest.raises(ValueError):
        plan_bands(3, 0)


def test_cell_image_has_sub_by_sub_pixels_per_cell_and_box_averages() -> None:
    array = np.zeros((40, 80, 3), np.uint8)
    array[:, 40:] = 200  # right half bright
    grid = plan_grid(80, 40, tile_size=8, tiles_across=4)
    cells = cell_image(Image.fromarray(array), grid)
    assert cells.shape == (2 * SUB, 4 * SUB, 3) and cells.dtype == np.uint8
    assert np.all(cells[:, : 2 * SUB] == 0) and np.all(cells[:, 2 * SUB :] == 200)
    assert band_cells(cells, range(1, 2)).shape == (SUB, 4 * SUB, 3)
