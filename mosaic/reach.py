"""How well a library reaches a photo's colours, said before the job, not after.

A person's library is often narrow: a year of beach photos, a night sky. The engine keeps every
tile a photograph and moves its colour only a little (``correction``), so where the library has
no tile near a colour of the photo (no red photo for a red apple) the mosaic comes out greyer
there, and from afar a program that repeats its nearest photo wherever it fits is closer.
That is the honest result, and a person should learn it before waiting for it.

``library_reach`` renders a small preview of the photo with the real engine (``PREVIEW_ACROSS``
cells across, the job's options) and compares, at one pixel per cell, its colour with the
photo's (``ours``: mean ΔE00) against what a program that repeats its best-fitting photo at will and
leaves its colour alone would give (``nearest``: the same matcher with no variety and no
correction, metapixel ``-d 0``'s way). Where ours is the further by more
than ``MARGIN`` the library does not reach the photo: ``warn``. The same per region (a 3 × 3
grid of the photo) says where, and previews with the colour moved further toward the photo say
what the tiles ↔ photo slider would give. Pure NumPy and Pillow; a few tens of milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from PIL import Image

from .colour_difference import ciede2000
from .grid import cell_image, plan_grid
from .library import TileLibrary
from .options import DEFAULT_OPTIONS, RenderOptions
from .parts import plan_parts
from .render import render_band
from .signatures import srgb_to_lab
from .tile_choice import choose_tiles

__all__ = ["MARGIN", "PREVIEW_ACROSS", "Reach", "library_reach"]

PREVIEW_ACROSS = 48  # cells across the preview: enough to see the photo, a few ms to render
PREVIEW_TILE = 8  # pixels per preview cell: a thumbnail a page can show
MARGIN = 1.0  # ΔE00 by which the preview may miss the photo more than the nearest tiles before we say so
REGIONS = 3  # the photo's regions per side, for where the library falls short
TOWARD_PHOTO = (75, 100)  # the slider's settings whose previews are measured too


@dataclass(frozen=True)
class Reach:
    """``ours``: the preview's mean ΔE00 from the photo at one pixel per cell; ``nearest``: the
    same for the nearest tile of every cell, repeated at will; ``regions``: ``(row, column,
    ours, nearest)`` per region of a 3 × 3 grid; ``toward_photo``: ``{correction: ours}`` for
    the settings further toward the photo; ``preview``: the preview, ``(H, W, 3) uint8``, and
    ``preview_toward_photo`` the same tiles with the colour moved all the way (100 %)."""

    ours: float
    nearest: float
    regions: tuple[tuple[int, int, float, float], ...]
    toward_photo: dict[int, float]
    correction: int
    preview: np.ndarray
    preview_toward_photo: np.ndarray

    @property
    def warn(self) -> bool:
        return self.ours > self.nearest + MARGIN

    def short_regions(self) -> list[tuple[int, int]]:
        """The regions (row, column) the library reaches worst: where ours misses by more than the margin."""
        return [(r, c) for r, c, ours, nearest in self.regions if ours > nearest + MARGIN]

    def message(self) -> str:
        """One sentence for the page, the API and the command line."""
        if not self.warn:
            return f"The library reaches this photo's colours (from afar {self.ours:.1f} ΔE00 from the photo)."
        where = _where(self.short_regions())
        better = ", ".join(f"{v:.1f} at {c} %" for c, v in sorted(self.toward_photo.items()))
        return (
            f"This library lacks some of the photo's colours{where}: from afar the mosaic will be "
            f"{self.ours:.1f} ΔE00 from the photo, where one that repeats its best-fitting photos would be "
            f"{self.nearest:.1f}. Moving the slider toward the photo gives {better} (each tile "
            f"tinted further), or add photos of those colours."
        )


def library_reach(
    image: Image.Image,
    library: TileLibrary,
    *,
    options: RenderOptions = DEFAULT_OPTIONS,
    seed: str = "reach",
) -> Reach:
    """How well ``library`` reaches ``image``'s colours with ``options`` (see the module docstring)."""
    grid = plan_grid(image.width, image.height, tile_size=PREVIEW_TILE, tiles_across=min(PREVIEW_ACROSS, image.width))
    target = srgb_to_lab(cell_image(image, replace(grid, tile_size=1)).reshape(-1, 3))

    cells = cell_image(image, grid)
    parts = plan_parts(grid)
    choice = choose_tiles(cells, library, tile_size=PREVIEW_TILE, seed=seed, options=options, parts=parts)

    def far(correction: int) -> tuple[np.ndarray, np.ndarray]:  # the same tiles, moved further or less
        moved = replace(options, correction=correction)
        pixels = render_band(
            cells, library, tile_size=PREVIEW_TILE, seed=seed, options=moved, choice=choice, parts=parts
        )
        means = np.asarray(Image.fromarray(pixels).reduce(PREVIEW_TILE), np.uint8).reshape(-1, 3)
        return ciede2000(srgb_to_lab(means), target), pixels

    # A program that repeats its best-fitting photo at will and leaves its colour alone
    # (metapixel -d 0): the same matcher with no variety and no correction.
    repeating = replace(options, variety=0, correction=0, max_uses=None)
    plain = render_band(cells, library, tile_size=PREVIEW_TILE, seed=seed, options=repeating, parts=parts)
    means = np.asarray(Image.fromarray(plain).reduce(PREVIEW_TILE), np.uint8).reshape(-1, 3)
    nearest = ciede2000(srgb_to_lab(means), target)
    ours, preview = far(options.correction)
    moved = {c: far(c) for c in TOWARD_PHOTO if c > options.correction}
    toward = {c: float(distance.mean()) for c, (distance, _) in moved.items()}
    furthest = moved[max(moved)][1] if moved else preview
    shape = (grid.tiles_down, grid.tiles_across)
    return Reach(
        ours=float(ours.mean()),
        nearest=float(nearest.mean()),
        regions=tuple(_regions(ours.reshape(shape), nearest.reshape(shape))),
        toward_photo=toward,
        correction=options.correction,
        preview=preview,
        preview_toward_photo=furthest,
    )


def _regions(ours: np.ndarray, nearest: np.ndarray) -> list[tuple[int, int, float, float]]:
    """Each region of a 3 × 3 grid of the cells (fewer where the grid has fewer rows or columns)."""
    found = []
    for i, rows in enumerate(np.array_split(np.arange(ours.shape[0]), REGIONS)):
        for j, cols in enumerate(np.array_split(np.arange(ours.shape[1]), REGIONS)):
            if rows.size and cols.size:
                block = np.ix_(rows, cols)
                found.append((i, j, float(ours[block].mean()), float(nearest[block].mean())))
    return found


_NAMES = {0: "top", 1: "middle", 2: "bottom"}
_SIDES = {0: "left", 1: "centre", 2: "right"}


def _where(regions: list[tuple[int, int]]) -> str:
    if not regions or len(regions) == REGIONS * REGIONS:
        return ""
    return " (" + ", ".join(f"{_NAMES[r]} {_SIDES[c]}" for r, c in regions) + ")"
