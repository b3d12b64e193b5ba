"""``RenderOptions``: what a person may tune about a mosaic, checked when they are made."""

from __future__ import annotations

from dataclasses import dataclass

from .cells import check_cell_sizes


@dataclass(frozen=True, kw_only=True)
class RenderOptions:
    """What people of the mosaic programs expect to tune; the pipeline uses the defaults.

    A photomosaic makes two promises: from afar it is the target photo, up close every cell
    is a real, recognisable photograph. The defaults keep both (``docs/engine.md``).

    variety:       no tile repeats within this many cells (0 = off). Lowered automatically
                   when the library is too small to honour it. The default, 3, also bounds
                   every 8×8-cell window to 4 copies of a tile (6.25 %): two copies are ≥ 4
                   cells apart, so each 4×4 quarter of the window holds at most one.
    correction:    0–100 %: how far each placed tile's mean colour moves toward its cell's
                   mean colour (CIELAB: lightness 1.75 times this share, chroma this share
                   but only within a budget of ΔE00 for the whole move, 4.5 at 50 %), the
                   tile moved as a whole: every pixel gets the same offset, so its layout
                   and contrast stay the photo's own (``correction``). The default, 50,
                   keeps the median tile within 5 ΔE00 of the library photo and beats a
                   program that repeats its nearest tile from afar (``docs/engine.md``).
    overlay:       0–100 % of the target painted over the tiles at sub-cell resolution (4×4
                   patches per tile), the tiles' detail kept: the target photo with a tile
                   texture on top. Off (0) by default. When on it scores better on pixel
                   fidelity because it *is* the target; up close the tiles stop being
                   photographs (print-mosaic makers call it a fake photomosaic).
    match_contrast: with an overlay only: each tile's contrast is held to its cell's (down
                   to a quarter), the overlay rises to 100 % where the target cell is flat,
                   and it is interpolated within each tile (``detail``). Off by default: it
                   flattens tiles into texture.
    colour_first:  match the mean colour only (ignores the layout inside a cell).
    colour_weight: weight of the mean colour (CIELAB) against the luma layout inside the
                   cell (higher favours colour fidelity, lower structure). The default, 16,
                   is chosen knowing the correction: a tile's colour distance to its cell
                   is paid twice, by what the correction leaves (seen from afar) and by
                   what it moves (seen up close), so a tile whose colour is already close
                   beats one whose layout fits a little better but needs a large shift.
    mirror:        tiles may also be used mirrored left-right: twice the choice from the
                   same photos (a tile and its mirror image count as one for variety).
    max_uses:      fair use: no tile (with its mirror image) placed more than this many
                   times in the whole mosaic (None = no limit). The cells are then assigned
                   by a minimum-cost flow over the whole grid (``fair``), which replaces the
                   variety rule.
    use_every_photo: every library photo (every group of near-duplicates) placed at least
                   once: one cell per group chosen for the whole grid first (``cover``), the
                   usual choice around it. The grid needs at least as many cells as the
                   library has groups. Only with one cell size.
    cell_sizes:    the sizes a cell may take, in base tiles (``cells``): (1,) = every cell one
                   tile (the default); (1, 2, 4) lets a calm block of 2×2 or 4×4 base cells
                   take one photo at that size, small photos staying where the detail is.
    split:         0–100: how eagerly the grid is split into small cells (``cells``; only
                   with more than one cell size). Higher keeps more small cells.
    """

    variety: int = 3
    correction: int = 50
    overlay: int = 0
    colour_first: bool = False
    colour_weight: float = 16.0
    mirror: bool = True
    max_uses: int | None = None
    match_contrast: bool = False
    use_every_photo: bool = False
    cell_sizes: tuple[int, ...] = (1,)
    split: int = 50

    def __post_init__(self) -> None:
        if not 0 <= self.variety <= 16:
            raise ValueError(f"variety must be 0..16 cells, got {self.variety}")
        for name in ("correction", "overlay"):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= 100:
                raise ValueError(f"{name} must be an integer 0..100 %, got {value!r}")
        if not self.colour_weight > 0:
            raise ValueError(f"colour_weight must be positive, got {self.colour_weight}")
        if self.max_uses is not None and (type(self.max_uses) is not int or self.max_uses < 1):
            raise ValueError(f"max_uses must be a positive integer or None, got {self.max_uses!r}")
        if type(self.use_every_photo) is not bool:
            raise ValueError(f"use_every_photo must be true or false, got {self.use_every_photo!r}")
        check_cell_sizes(self.cell_sizes)
        if type(self.split) is not int or not 0 <= self.split <= 100:
            raise ValueError(f"split must be an integer 0..100, got {self.split!r}")
        if len(self.cell_sizes) > 1 and (self.overlay or self.max_uses is not None):
            raise ValueError("cells of several sizes work without an overlay and without max_uses")
        if len(self.cell_sizes) > 1 and self.use_every_photo:
            raise ValueError(
                "cells of several sizes cannot use every photo: choose one cell size (1) to use every photo"
            )

    @property
    def sized(self) -> bool:
        """Whether cells take more than one size (``cells``)."""
        return len(self.cell_sizes) > 1


DEFAULT_OPTIONS = RenderOptions()
