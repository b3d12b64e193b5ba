"""The final size of a mosaic, computed before anything is submitted.

The same ``plan_grid`` the JobController uses, so the size the page shows is the size the
job gets. Also the slice limits: at most ``Settings.max_slices`` and never more slices than
the grid has parts (a slice is a band of whole parts, ``mosaic.parts``).
"""

from __future__ import annotations

from typing import Any

from mosaic import pieces
from mosaic.grid import Grid, plan_grid
from mosaic.grid import min_slices as fewest_slices
from mosaic.parts import plan_parts, unit_lattice
from mosaic.pieces import job_plan
from webapp.errors import ApiError

MAX_TILES_ACROSS = 10_000


def plan(*, width: int, height: int, tile_size: int, tiles_across: int | None, max_output_pixels: int) -> Grid:
    """The engine's Grid for this photo and settings; ApiError 422 when it cannot be planned.

    422, not 400: the request is well-formed and within every stated range, but this photo
    cannot make a mosaic under the output limit (say 1 × 1,000,000 px)."""
    try:
        return plan_grid(
            width, height, tile_size=tile_size, tiles_across=tiles_across, max_output_pixels=max_output_pixels
        )
    except ValueError as exc:
        raise ApiError(422, "invalid_plan", str(exc)) from None


def job_bands(grid: Grid, slices: int, *, align: int = 1) -> list[list[int]]:
    """A job's bands in cell rows [start, stop), as the controller will cut them: a giant job's
    pieces (the rows each owns, to the cell rows that cover them), else whole parts of the grid.
    ``align``: the job's largest cell size (``mosaic.cells``)."""
    plan, bands = pieces.job_bands(grid, slices, align=align)
    if plan is None:
        return [[band.start, band.stop] for band in bands]
    ts = grid.tile_size  # a piece shows the rows it owns, not the margin it renders beyond them
    return [[p.owned.start // ts, -(-p.owned.stop // ts)] for p in plan.pieces()]


def min_slices(grid: Grid, *, align: int = 1) -> int:
    """The fewest slices the controller will cut: a giant mosaic's pieces plan, else whole rows."""
    plan = job_plan(grid, 1, align=align)
    return fewest_slices(grid) if plan is None else plan.bands


def max_slices(grid: Grid, limit: int, *, align: int = 1) -> int:
    """The most slices this grid can be cut into: one per part (``mosaic.parts``), or per Deep
    Zoom unit of a giant job; more would not be faster, and never change the mosaic."""
    lattice = unit_lattice(grid)
    most = plan_parts(grid, align=align).count if lattice is None or align > 1 else lattice.units
    return max(1, min(limit, most))


def largest(*, width: int, height: int, tile_size: int, max_output_pixels: int) -> Grid:
    """The most tiles across this photo may have under the hard limit (the detail slider's end)."""
    return plan(
        width=width,
        height=height,
        tile_size=tile_size,
        tiles_across=MAX_TILES_ACROSS,
        max_output_pixels=max_output_pixels,
    )


def describe(grid: Grid, *, limit: int, align: int = 1) -> dict[str, Any]:
    """The JSON the form shows: grid, output size, megapixels and the slice floor and ceiling
    (``align``: the largest cell size, ``mosaic.cells``)."""
    return {
        "min_slices": min(min_slices(grid, align=align), max_slices(grid, limit, align=align)),
        "tiles_across": grid.tiles_across,
        "tiles_down": grid.tiles_down,
        "output_width": grid.output_width,
        "output_height": grid.output_height,
        "megapixels": round(grid.output_width * grid.output_height / 1e6, 1),
        "max_slices": max_slices(grid, limit, align=align),
    }
