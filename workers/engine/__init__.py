"""The pure mosaic engine: arrays and images in, arrays out, no Azure inside.

    images      open_image, probe_size, ImageDecodeError — every uploaded image is decoded here
    library     TileLibrary (atlas + index blob), build_library
    grid        Grid, plan_grid (output-size rule), plan_bands (slices), cell_image
    signatures  CIELAB sub-cell features, exact integers
    matching    nearest tiles by chunked matrix products
    variety     anti-repetition, deterministic and safe across band borders
    rounds      the variety rule's conflict rounds (which candidate each cell keeps)
    blend       colour correction of the placed tiles toward the target, integer-exact
    render      RenderOptions, render_band (one slice), render (the whole mosaic)
"""

from __future__ import annotations

from .grid import Grid, band_cells, cell_image, plan_bands, plan_grid
from .images import ImageDecodeError, open_image, probe_size, to_rgb
from .library import ATLAS_SIZE, LibraryFormatError, TileLibrary, build_library
from .render import DEFAULT_OPTIONS, RenderOptions, compose, render, render_band
from .signatures import SUB, cell_pixels

__all__ = [
    "ATLAS_SIZE",
    "DEFAULT_OPTIONS",
    "SUB",
    "Grid",
    "ImageDecodeError",
    "LibraryFormatError",
    "RenderOptions",
    "TileLibrary",
    "band_cells",
    "build_library",
    "cell_pixels",
    "cell_image",
    "compose",
    "open_image",
    "plan_bands",
    "plan_grid",
    "probe_size",
    "render",
    "render_band",
    "to_rgb",
]
