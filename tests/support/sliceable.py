"""Photos whose grids can be cut into a given number of slices (``mosaic.parts``).

A slice is whole parts of the grid, and a grid has as many parts as its size gives it, never
as many as a test would like: a 48 x 36 photo is one part, one slice. These sizes give a test
the slicing it needs, and check it, so a change to the planning fails here with a clear message
rather than as a count of queue messages somewhere else.

- ``plain_photo(n)``: ``n`` (1-3) plain parts at tile size ``PLAIN_TILE`` (4): bands that the
  processors render to pixels and the controller stitches.
- ``unit_photo(n)``: ``n`` Deep Zoom units at tile sizes 8-64: a giant job's pieces when ``n``
  is 2 or more (the processors stage JPEG rows and pyramid tiles, the controller assembles).
"""

from __future__ import annotations

from mosaic.grid import plan_grid
from mosaic.parts import plan_parts, unit_lattice
from tests.support.pipelines import sample_photo

PLAIN_TILE = 4


def plain_rows(slices: int) -> int:
    """Cell rows of a grid with ``slices`` plain parts at tile size 4 (48 rows a part; 152 rows
    would make it two pyramid units)."""
    if not 1 <= slices <= 3:
        raise ValueError(f"a plain grid at tile size 4 has 1 to 3 parts, not {slices}")
    return 48 * slices + 4


def unit_rows(slices: int) -> int:
    """Cell rows of a grid with ``slices`` Deep Zoom units at tile sizes 8 to 64 (64 rows a unit)."""
    return 64 * slices - 16


def plain_photo(slices: int, *, width: int = 12, seed: int = 0) -> bytes:
    rows = plain_rows(slices)
    grid = plan_grid(width, rows, tile_size=PLAIN_TILE)
    assert unit_lattice(grid) is None and plan_parts(grid).count == slices, (grid, plan_parts(grid))
    return sample_photo(width, rows, seed=seed)


def unit_photo(slices: int, *, width: int = 12, tile: int = 8, seed: int = 0) -> bytes:
    rows = unit_rows(slices)
    lattice = unit_lattice(plan_grid(width, rows, tile_size=tile))
    assert (1 if lattice is None else lattice.units) == slices, (width, rows, tile, lattice)
    return sample_photo(width, rows, seed=seed)
