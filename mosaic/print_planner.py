"""Print planner arithmetic: paper size and DPI to a mosaic grid, and back.

``plan_for_paper(width_cm, dpi, tile_size)`` says how many tiles across fill a print of that
width at that DPI (the pixels needed, rounded to whole tiles); ``paper_for_grid(tiles_across,
tile_size, dpi)`` says how wide that grid prints. Round-trip: planning for the width a grid
prints at gives that grid back. ``every_photo_tiles_across(width, height, tile_size, photos)``
says the fewest tiles across a photo of that size needs to use every photo of a library once
("use every photo", ``mosaic.cover``). Pure arithmetic, no images.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cover import smallest_tiles_across

CM_PER_INCH = 2.54


@dataclass(frozen=True)
class PrintPlan:
    tiles_across: int
    tile_size: int
    width_px: int
    width_cm: float


def plan_for_paper(width_cm: float, dpi: int, tile_size: int) -> PrintPlan:
    """Tiles across (at least 1) so that ``tiles_across * tile_size`` px print ``width_cm`` at ``dpi``."""
    if width_cm <= 0 or dpi <= 0 or tile_size <= 0:
        raise ValueError("paper width, DPI and tile size must be positive")
    tiles = max(1, round(width_cm / CM_PER_INCH * dpi / tile_size))
    return paper_for_grid(tiles, tile_size, dpi)


def paper_for_grid(tiles_across: int, tile_size: int, dpi: int) -> PrintPlan:
    """The print width of a grid of ``tiles_across`` tiles of ``tile_size`` px at ``dpi``."""
    if tiles_across <= 0 or dpi <= 0 or tile_size <= 0:
        raise ValueError("tiles across, DPI and tile size must be positive")
    width_px = tiles_across * tile_size
    return PrintPlan(tiles_across, tile_size, width_px, width_px / dpi * CM_PER_INCH)


def every_photo_tiles_across(width: int, height: int, tile_size: int, photos: int) -> int:
    """The fewest tiles across whose grid, for a ``width`` × ``height`` photo, has a cell for each
    of ``photos`` (a library's photos, near-duplicates counted once); 0 when no grid has."""
    if width <= 0 or height <= 0 or tile_size <= 0 or photos < 0:
        raise ValueError("photo size and tile size must be positive, photos not negative")
    return smallest_tiles_across(width, height, tile_size=tile_size, groups=max(1, photos))
