"""The mosaic is a function of the photo, the library, the options and the seed: never of the
slicing (``mosaic.parts``). Every slicing the controller can cut, plain bands or a giant job's
pieces, is made of whole parts planned from the grid alone, and renders, band by band in any
order, the same bytes as the offline render: pixels, placement and the JPEG.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mosaic import RenderOptions, TileLibrary, band_cells, cell_image, plan_grid, render_band
from mosaic.grid import Grid
from mosaic.limits import MAX_SLICE_PIXELS
from mosaic.parts import PART_ROWS, Parts, plan_parts, unit_lattice
from mosaic.pieces import job_plan
from mosaic.render import render_with_placement
from workers.imaging.slicing import encode_output

from .conftest import random_library

GRIDS = [  # (width, height, tile size, tiles across): one part, plain parts, pyramid units
    (w, h, t, a)
    for (w, h) in [(512, 512), (300, 1400), (2000, 600), (4000, 3000), (640, 12000), (20000, 20000)]
    for t in (1, 2, 4, 8, 12, 16, 32, 64)
    for a in (None, 7, 40, 150, 900, 5000)
]


def _grids() -> list[Grid]:
    grids = []
    for w, h, t, a in GRIDS:
        try:
            grids.append(plan_grid(w, h, tile_size=t, tiles_across=a))
        except ValueError:
            continue
    return grids


def test_every_slicing_the_controller_cuts_is_whole_parts_planned_from_the_grid_alone() -> None:
    seen = 0
    for grid in _grids():
        parts = plan_parts(grid)
        assert parts == plan_parts(Grid(*vars(grid).values()))  # the grid alone decides
        assert parts.rows == grid.tiles_down
        seams = set() if unit_lattice(grid) is None else set(parts.cuts)
        for slices in range(1, 9):
            plan = job_plan(grid, slices)
            bands = parts.bands(slices) if plan is None else [p.cells for p in plan.pieces()]
            for band in bands:
                assert parts.within(band)  # ValueError unless whole parts
            if plan is None:
                assert [b.start for b in bands[1:]] == [b.stop for b in bands[:-1]]
                assert len(bands) == min(slices, parts.count)
            seen += 1
        fits = MAX_SLICE_PIXELS // (grid.output_width * grid.tile_size)
        for part in parts.within(range(grid.tiles_down)):
            tall = len(part) >= min(PART_ROWS // 2, fits, grid.tiles_down)
            assert tall or part.start in seams, (grid, parts)  # only a pyramid seam's own rows are thin
    assert seen > 500


def test_a_grid_under_two_parts_tall_is_one_part_and_the_create_pages_default_too() -> None:
    assert plan_parts(Grid(30, 22, 240, 176, 8)).count == 1
    assert plan_parts(Grid(100, 75, 3200, 2400, 32)).count == 1
    assert plan_parts(Grid(100, 130, 800, 1040, 8)).cuts == (0, 63, 64, 130)  # two units, a seam part between


def test_bands_group_whole_parts_evenly_and_never_more_than_there_are() -> None:
    parts = Parts((0, 64, 128, 130, 200, 264))
    assert parts.bands(1) == [range(0, 264)]
    assert parts.bands(2) == [range(0, 130), range(130, 264)]
    assert len(parts.bands(8)) == 5
    assert parts.bands(1, max_rows=140) == [range(0, 130), range(130, 264)]
    with pytest.raises(ValueError, match="do not start and end where parts do"):
        parts.within(range(0, 100))


@pytest.fixture(scope="module")
def library() -> TileLibrary:
    return random_library(240, seed=11)


def _photo(kind: str, width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(len(kind) + width)
    if kind == "flat":
        return Image.new("RGB", (width, height), (214, 220, 230))
    small = rng.integers(0, 256, (max(2, height // 40), max(2, width // 40), 3), dtype=np.uint8)
    photo = Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC)
    if kind == "noisy":
        noise = rng.integers(-40, 40, (height, width, 3))
        photo = Image.fromarray(np.clip(np.asarray(photo, np.int16) + noise, 0, 255).astype(np.uint8))
    return photo


@pytest.mark.parametrize(
    ("kind", "tile_size", "across", "options"),
    [
        ("smooth", 8, 16, RenderOptions()),
        ("noisy", 16, 10, RenderOptions()),
        ("flat", 32, 6, RenderOptions()),
        ("smooth", 64, 4, RenderOptions()),
        ("noisy", 8, 20, RenderOptions(correction=80, overlay=30)),
        ("smooth", 2, 40, RenderOptions()),
        ("smooth", 8, 16, RenderOptions(cell_sizes=(1, 2, 4))),
        ("noisy", 16, 10, RenderOptions(cell_sizes=(1, 2), split=20)),
        ("flat", 8, 12, RenderOptions(cell_sizes=(1, 4))),
    ],
)
def test_any_slicing_in_any_order_renders_the_offline_bytes(
    library: TileLibrary, kind: str, tile_size: int, across: int, options: RenderOptions
) -> None:
    # A tall, narrow photo: two or three pyramid units (or plain parts) at every tile size, few cells.
    height = 6200 if tile_size >= 32 else 3100
    photo = _photo(kind, across * 10, across * 10 * height // (across * tile_size))
    grid = plan_grid(photo.width, photo.height, tile_size=tile_size, tiles_across=across)
    largest = options.cell_sizes[-1]  # cells of several sizes: parts align to the largest
    parts = plan_parts(grid, align=largest)
    assert parts.count >= 2 and all(cut % largest == 0 for cut in parts.cuts[:-1]), parts
    pixels, choice = render_with_placement(
        photo, library, tile_size=tile_size, tiles_across=across, seed="j", options=options
    )
    jpeg = encode_output(pixels)
    cells = cell_image(photo, grid)
    for slices in (2, 3, 5, 8):
        again, placed = render_with_placement(
            photo, library, tile_size=tile_size, tiles_across=across, seed="j", options=options, slices=slices
        )
        assert encode_output(again) == jpeg and np.array_equal(placed, choice), slices
        plan = None if options.sized else job_plan(grid, slices)  # several sizes: offline only, plain bands
        bands = parts.bands(slices) if plan is None else [p.cells for p in plan.pieces()]
        for band in reversed(bands):  # each band alone, as a processor renders it, in any order
            alone = render_band(
                band_cells(cells, band, tile_size=tile_size).copy(),
                library,
                tile_size=tile_size,
                seed="j",
                row_offset=band.start,
                options=options,
                parts=parts,
            )
            rows = pixels[band.start * tile_size : band.stop * tile_size]
            assert np.array_equal(alone, rows), (slices, band)
