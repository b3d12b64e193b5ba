"""The pure mosaic engine: arrays and images in, arrays out, no Azure inside.

It imports nothing of the project (NumPy and Pillow only), so every layer may use it and a
reader can lift it out whole. Its errors and limits are its own:

    errors      PhotoMosaicsError (the project's root error), MosaicError and the engine's errors
    limits      MAX_TILE_SIZE and the default pixel limits (``dal.config`` defaults to these)
    sources     open_tile_sources, SourceLimits, build_library_from: a library from a folder, zips or uploads
    images      open_image, probe_size, ImageDecodeError — every uploaded image is decoded here
    image_structure  check_structure: what opening a file costs, bounded before Pillow reads it
    library     TileLibrary (atlas + index blob + groups of near-duplicates), build_library
    grid        Grid, plan_grid (output-size rule), plan_bands (slices), cell_image
    signatures  CIELAB sub-cell features, exact integers
    matching    nearest tiles by chunked matrix products
    variety     anti-repetition, deterministic and safe across band borders
    rounds      the variety rule's conflict rounds (which candidate each cell keeps)
    candidates  each cell's ranked tiles, shared by variety and rounds
    fair        max_uses: each tile at most N times, an exact sparse min-cost assignment
    cover       use every photo: one cell pinned to every group, a min-cost assignment
    gamut       the in-gamut CIELAB colours a library should reach, its coverage, colour grades
    correction  whole-tile colour correction: each placed tile moved as one piece toward its cell
    overlay     the optional overlay: the target painted over the tiles per sub-cell, integer-exact
    detail      contrast matching for the overlay: tile detail held to the cell's
    options     RenderOptions, DEFAULT_OPTIONS: what a render may change
    tile_choice which tile each cell gets: part by part, fairly, or every photo at least once
    render      render_band (one slice), render (the whole mosaic)
"""

from __future__ import annotations

from .compose import compose
from .errors import (
    ImageDecodeError,
    LibraryFormatError,
    MosaicError,
    NoUsableImageError,
    PhotoMosaicsError,
    TileSourceError,
)
from .grid import Grid, band_cells, cell_image, plan_bands, plan_grid
from .images import open_image, probe_size, to_rgb
from .library import ATLAS_SIZE, TileLibrary, build_library
from .limits import DEFAULT_MAX_INPUT_PIXELS, DEFAULT_MAX_OUTPUT_PIXELS, MAX_TILE_SIZE
from .options import DEFAULT_OPTIONS, RenderOptions
from .render import placed_tiles, render, render_band, render_with_placement
from .signatures import SUB, cell_pixels
from .sources import SourceLimits, build_library_from, open_tile_sources

__all__ = [
    "ATLAS_SIZE",
    "DEFAULT_MAX_INPUT_PIXELS",
    "DEFAULT_MAX_OUTPUT_PIXELS",
    "DEFAULT_OPTIONS",
    "MAX_TILE_SIZE",
    "SUB",
    "Grid",
    "ImageDecodeError",
    "LibraryFormatError",
    "MosaicError",
    "NoUsableImageError",
    "PhotoMosaicsError",
    "RenderOptions",
    "SourceLimits",
    "TileLibrary",
    "TileSourceError",
    "band_cells",
    "build_library",
    "build_library_from",
    "cell_image",
    "cell_pixels",
    "compose",
    "open_image",
    "open_tile_sources",
    "placed_tiles",
    "plan_bands",
    "plan_grid",
    "probe_size",
    "render",
    "render_band",
    "render_with_placement",
    "to_rgb",
]
