"""How well a library reaches a photo's colours, said before the job, not after.

A person's library is often narrow: a year of beach photos, a night sky. The engine keeps every
tile a photograph and moves its colour only a little (``correction``), so where the library has
no tile near a colour of the photo (no red photo for a red apple) the mosaic comes out greyer
there, and from afar a program that repeats its nearest photo wherever it fits is closer.
That is the honest result, and a person should learn it before waiting for it.

``library_reach`` renders a small preview of the photo with the real engine (the job's own
cells across, up to ``PREVIEW_MOST``; ``PREVIEW_ACROSS`` when the job's are not given; the job's
options) and compares, at one pixel per cell, its colour with the
photo's (``ours``: mean ΔE00) against what metapixel ``-d 0``, a program that repeats its
best-fitting photo at will and leaves its colour alone, would give (``nearest``). That program
is emulated the way it really chooses (``repeated_colours``): by the small image of the cell
and of each tile (YIQ sub-pixels, luma weighing as much as colour), not by the mean colour. A
stand-in that took the nearest mean colour was closer to the photo than metapixel really is
(by 2.4 ΔE00 on average with the demo library, 1.9 with a narrow one), so the plan warned on
jobs our mosaic in fact won; the emulation lands within a few tenths of metapixel's result.

Where ours is the further at all (``MARGIN`` is 0) the library does not reach the photo:
``warn``. The preview is planned on the job's own grid because a coarser one errs toward
silence: with fewer, larger cells ours comes out closer than the job will be (48 cells across
for jobs of 144: the job's shortfall was the preview's plus 0.27 ΔE00, spread 0.42, on the
held-out astronomy library; on the job's grid plus 0.01, spread 0.15). ``PREVIEW_MOST`` bounds
what one plan request costs the web process (about half a second of CPU at 100 cells across).

The same per region (a 3 × 3 grid of the photo) says where, and previews with the colour moved
further toward the photo say what the tiles ↔ photo slider would give. Pure NumPy and Pillow;
about half a second of CPU at 100 cells across with the demo library.
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
from .signatures import SUB, srgb_to_lab
from .tile_choice import choose_tiles

__all__ = ["MARGIN", "PREVIEW_ACROSS", "PREVIEW_MOST", "Reach", "library_reach", "preview_across", "repeated_colours"]

PREVIEW_ACROSS = 48  # cells across the preview when the job's grid is not given
PREVIEW_MOST = 100  # the most cells across a preview: the create page's default detail
PREVIEW_TILE = 8  # pixels per preview cell: a thumbnail a page can show
MARGIN = 0.0  # ΔE00 by which the preview may miss the photo more than metapixel would before we say so
REGIONS = 3  # the photo's regions per side, for where the library falls short
TOWARD_PHOTO = (75, 100)  # the slider's settings whose previews are measured too


@dataclass(frozen=True)
class Reach:
    """``ours``: the preview's mean ΔE00 from the photo at one pixel per cell; ``nearest``: the
    same for metapixel ``-d 0``'s tile of every cell, repeated at will (``repeated_colours``);
    ``regions``: ``(row, column, ours, nearest)`` per region of a 3 × 3 grid; ``toward_photo``:
    ``{correction: ours}`` for the settings further toward the photo; ``preview``: the preview,
    ``(H, W, 3) uint8``, and ``preview_toward_photo`` the same tiles with the colour moved all the way (100 %)."""

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
    tiles_across: int | None = None,
) -> Reach:
    """How well ``library`` reaches ``image``'s colours with ``options`` (see the module docstring);
    ``tiles_across``: the job's grid (its cells across), which the preview follows up to ``PREVIEW_MOST``."""
    across = min(preview_across(tiles_across), image.width)
    grid = plan_grid(image.width, image.height, tile_size=PREVIEW_TILE, tiles_across=across)
    target = srgb_to_lab(cell_image(image, replace(grid, tile_size=1)).reshape(-1, 3))

    cells = cell_image(image, grid)
    parts = plan_parts(grid, align=options.cell_sizes[-1])
    choice = choose_tiles(cells, library, tile_size=PREVIEW_TILE, seed=seed, options=options, parts=parts)

    def far(correction: int) -> tuple[np.ndarray, np.ndarray]:  # the same tiles, moved further or less
        moved = replace(options, correction=correction)
        pixels = render_band(
            cells, library, tile_size=PREVIEW_TILE, seed=seed, options=moved, choice=choice, parts=parts
        )
        means = np.asarray(Image.fromarray(pixels).reduce(PREVIEW_TILE), np.uint8).reshape(-1, 3)
        return ciede2000(srgb_to_lab(means), target), pixels

    nearest = ciede2000(srgb_to_lab(repeated_colours(cells, library)), target)
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


def preview_across(tiles_across: int | None) -> int:
    """The preview's cells across for a job of ``tiles_across`` (None: not known)."""
    return PREVIEW_ACROSS if tiles_across is None else max(1, min(tiles_across, PREVIEW_MOST))


def repeated_colours(cells: np.ndarray, library: TileLibrary) -> np.ndarray:
    """``(cells, 3)``: the mean colour of the tile metapixel ``-d 0`` would place in each cell.

    Metapixel (its default ``subpixel`` metric) picks, for every cell, the tile whose small
    image is nearest to the cell's, summed squared differences over 5 × 5 sub-pixels in YIQ
    (I and Q scaled to 8 bits like Y), every tile free to repeat. Here the same on the 4 × 4
    sub-cells the matcher already has (box means, for the cell and for the tile at the preview
    size), and the placed tile's mean colour is what it shows from afar: the choice follows luma
    layout as much as colour, so it misses colour more than the nearest mean colour would.
    """
    tiles, norms, means = library.cached(("metapixel-signatures", PREVIEW_TILE), lambda: _signatures(library))
    k = cells.shape[0] // SUB, cells.shape[1] // SUB
    wanted = _yiq(cells.reshape(k[0], SUB, k[1], SUB, 3).transpose(0, 2, 1, 3, 4).reshape(k[0] * k[1], -1, 3))
    chosen = np.empty(wanted.shape[0], np.intp)
    for start in range(0, wanted.shape[0], _CHUNK):
        block = wanted[start : start + _CHUNK]
        chosen[start : start + _CHUNK] = np.argmin(norms[None, :] - 2.0 * (block @ tiles.T), axis=1)
    return means[chosen]


def _signatures(library: TileLibrary) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every tile's YIQ sub-cells ``(N, 3 SUB²)``, their squared norms, and its mean colour ``(N, 3) uint8``."""
    sub = library.sub_cells(PREVIEW_TILE).reshape(len(library), -1, 3)
    tiles = _yiq(sub)
    means = np.clip(np.rint(sub.mean(axis=1)), 0, 255).astype(np.uint8)
    return tiles, (tiles * tiles).sum(axis=1), means


def _yiq(rgb: np.ndarray) -> np.ndarray:
    """``(n, k, 3) uint8`` -> ``(n, 3k) float32``: metapixel's YIQ (its offsets left out)."""
    return (rgb.astype(np.float32) @ _YIQ.T).reshape(rgb.shape[0], -1)


# YIQ as metapixel 1.0.2 stores it, 0..255 each: I and Q scaled to their ranges (I / 1.192,
# Q / 1.046), read back from the tables metapixel-prepare writes for flat colours.
_YIQ = np.array(
    [
        [0.299, 0.587, 0.114],
        [0.596 / 1.192, -0.274 / 1.192, -0.322 / 1.192],
        [0.211 / 1.046, -0.523 / 1.046, 0.312 / 1.046],
    ],
    np.float32,
)
_CHUNK = 512  # cells compared with every tile at once


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
    """Where, in words: the regions short, or (when they are most of the photo) the ones spared."""
    every = [(r, c) for r in range(REGIONS) for c in range(REGIONS)]
    if not regions or len(regions) == len(every):
        return ""
    if len(regions) > len(every) // 2:  # eight names read as noise: name the few it reaches
        spared = [f"the {_NAMES[r]} {_SIDES[c]}" for r, c in every if (r, c) not in regions]
        return " (everywhere but " + ", ".join(spared[:-1]) + (" and " if len(spared) > 1 else "") + spared[-1] + ")"
    return " (" + ", ".join(f"{_NAMES[r]} {_SIDES[c]}" for r, c in regions) + ")"
