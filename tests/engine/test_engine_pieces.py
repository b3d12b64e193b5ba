"""Giant bands on Deep Zoom units (``mosaic.pieces``): every tile made once, by one band, byte
for byte what ``dzsave`` writes for the whole mosaic; JPEG rows that partition the image on
restart-marker boundaries; bands made of whole parts of the grid (``mosaic.parts``), so tile
choices agree wherever two bands render the same rows.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest

from mosaic import RenderOptions, render_band
from mosaic.deepzoom import DZI_TILE_SIZE, encode_tile, level_tiles, top_level, write_dzi
from mosaic.grid import Grid, cell_image
from mosaic.parts import JPEG_ROWS, plan_parts, unit_lattice
from mosaic.pieces import band_tiles, job_plan, plan_pieces, shrink


def _grid(width: int, height: int, tile: int) -> Grid:
    return Grid(width // tile, height // tile, width // tile * tile, height // tile * tile, tile)


@pytest.mark.parametrize(
    ("width", "height", "tile", "slices", "limit"),
    [
        (2608, 4112, 16, 3, 50e6),  # two units: three slices asked, two bands
        (3008, 4000, 16, 1, 2.5e6),  # a unit over the limit: one unit per band
        (1600, 3072, 16, 3, 50e6),
        (4096, 8400, 64, 2, 8e6),  # four levels per band
        (1104, 4080 + 80, 16, 4, 50e6),  # a sliver of a third unit joins the second
        (1104, 6144 + 48, 16, 4, 50e6),
        (1104, 6120, 16, 3, 50e6),
    ],
)
def test_every_tile_is_made_once_by_one_band_and_the_jpeg_rows_partition_the_image(
    width: int, height: int, tile: int, slices: int, limit: float
) -> None:
    grid = _grid(width, height, tile)
    plan = plan_pieces(grid, slices, max_slice_pixels=int(limit))
    lattice = unit_lattice(grid)
    assert plan is not None and lattice is not None and plan.levels == lattice.levels
    per_band = max(1, int(limit) // (lattice.unit * grid.output_width))
    assert max(-(-lattice.units // per_band), min(lattice.units, max(2, slices))) == plan.bands
    pieces = plan.pieces()
    assert [p.jpeg.start for p in pieces] == [0, *(p.jpeg.stop for p in pieces[:-1])]
    assert pieces[-1].jpeg.stop == grid.output_height
    assert all(p.jpeg.start % JPEG_ROWS == 0 and len(p.jpeg) > 0 for p in pieces)
    assert all(p.owned.start % (DZI_TILE_SIZE * 2 ** (plan.levels - 1)) == 0 for p in pieces)
    for p in pieces:
        assert p.rendered.start <= min(p.jpeg.start, p.pyramid_rows.start)
        assert p.rendered.stop >= max(p.jpeg.stop, p.pyramid_rows.stop)
        assert plan.parts.within(p.cells)  # each band's cells are whole parts of the grid
        assert len(p.owned) <= (per_band + 1) * lattice.unit  # a band's units, and a last one's sliver
    pixels = np.zeros((grid.output_height, grid.output_width, 3), np.uint8)
    made: list[tuple[int, int, int]] = []
    for p in pieces:
        tiles, _ = band_tiles(pixels[p.rendered.start : p.rendered.stop], p, first_row=p.rendered.start)
        made += [(level, c, r) for level, c, r, _ in tiles]
    assert len(made) == len(set(made))
    top = top_level(grid.output_width, grid.output_height)
    expected = {
        (level, c, r)
        for level in range(top - plan.levels + 1, top + 1)
        for c in range(level_tiles(grid.output_width, grid.output_height, level)[0])
        for r in range(level_tiles(grid.output_width, grid.output_height, level)[1])
    }
    assert set(made) == expected


def test_band_tiles_and_the_reduced_bands_give_dzsaves_pyramid_byte_for_byte() -> None:
    rng = np.random.default_rng(2)
    width, height = 2608, 4112
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    plan = plan_pieces(_grid(width, height, 16), 3)
    assert plan is not None and plan.levels == 2 and plan.bands == 3
    made, reduced = {}, []
    for p in plan.pieces():
        tiles, rows = band_tiles(pixels[p.rendered.start : p.rendered.stop], p, first_row=p.rendered.start)
        made.update({(level, c, r): encode_tile(t) for level, c, r, t in tiles})
        reduced.append(rows)
    joined = np.concatenate(reduced)
    assert joined.shape[:2] == plan.reduced_size()[::-1]
    with tempfile.TemporaryDirectory() as folder:
        write_dzi(joined, Path(folder) / "r.dzi")
        write_dzi(pixels, Path(folder) / "w.dzi")
        for tile in (Path(folder) / "r_files").rglob("*.jpg"):
            made[int(tile.parent.name), *map(int, tile.stem.split("_"))] = tile.read_bytes()
        whole = {
            (int(t.parent.name), *map(int, t.stem.split("_"))): t.read_bytes()
            for t in (Path(folder) / "w_files").rglob("*.jpg")
        }
    assert made.keys() == whole.keys()
    assert [k for k in whole if whole[k] != made[k]] == []


def test_shrink_is_the_rounded_two_by_two_mean_with_the_edge_repeated() -> None:
    a = np.array([[[0], [1], [9]], [[2], [2], [9]], [[4], [4], [4]]], dtype=np.uint8).repeat(3, axis=2)
    assert shrink(a)[..., 0].tolist() == [[(0 + 1 + 2 + 2 + 2) // 4, 9], [4, 4]]


def test_bands_that_share_rows_choose_the_same_tiles_there(library200, photo) -> None:
    grid = Grid(100, 300, 1600, 4800, 16)
    plan = job_plan(grid, 3)
    assert plan is not None and plan.bands == 3
    parts = plan_parts(grid)
    cells = cell_image(photo, grid)
    k = cells.shape[0] // grid.tiles_down
    whole = render_band(cells, library200, tile_size=16, seed="s", parts=parts)
    for p in plan.pieces():
        band = render_band(
            cells[p.cells.start * k : p.cells.stop * k],
            library200,
            tile_size=16,
            seed="s",
            row_offset=p.cells.start,
            parts=parts,
        )
        assert np.array_equal(band, whole[p.rendered.start : p.rendered.stop]), p.index


@pytest.mark.parametrize(
    "options",
    [RenderOptions(), RenderOptions(overlay=30), RenderOptions(overlay=40, match_contrast=True, correction=80)],
)
def test_a_segment_is_painted_into_its_rows_of_the_piece_as_it_is_painted_alone(
    library200, photo, options: RenderOptions
) -> None:
    # A piece paints each choice segment straight into its rows (no second copy of a 50 MP
    # band), and what lands there is the segment painted on its own.
    grid = Grid(40, 30, 640, 480, 16)
    cells = cell_image(photo, grid)
    k = cells.shape[0] // grid.tiles_down
    whole = np.zeros((30 * 16, 40 * 16, 3), np.uint8)
    view = whole[10 * 16 : 22 * 16]
    band = cells[10 * k : 22 * k]
    painted = render_band(band, library200, tile_size=16, seed="v", row_offset=10, options=options, out=view)
    assert np.shares_memory(painted, whole)
    alone = render_band(band, library200, tile_size=16, seed="v", row_offset=10, options=options)
    assert np.array_equal(view, alone)
    assert not whole[: 10 * 16].any() and not whole[22 * 16 :].any()  # nothing painted outside its rows


def test_small_or_one_slice_mosaics_keep_plain_bands() -> None:
    assert job_plan(Grid(60, 40, 480, 320, 8), 4) is None  # too short for two units
    assert job_plan(Grid(100, 75, 3200, 2400, 32), 4) is None  # the create page's default: one unit of 64 rows
    assert job_plan(Grid(121, 81, 7744, 5184, 64), 1) is None  # 40 MP, one slice: its processor writes both outputs
    assert job_plan(Grid(2000, 10, 128_000, 640, 64), 2) is None  # over JPEG's 65,500 px a side
    big = job_plan(Grid(382, 255, 24448, 16320, 64), 1)
    assert big is not None and (big.bands, big.levels) == (8, 3)
    assert math.prod(big.reduced_size()) < 24448 * 16320 / 60
