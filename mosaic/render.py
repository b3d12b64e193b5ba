"""Rendering: cells in, mosaic pixels out — one band at a time, or the whole grid.

``render_band`` is what an ImageProcessor runs on its slice: the band's cell image
(``SUB`` × ``SUB`` pixels per cell, made by ``grid.cell_image``) becomes tiles, part by part
(``mosaic.parts``: runs of cell rows planned from the grid alone). ``render`` is the offline
path and renders the same parts, so one process and many workers, any slicing, give the same
pixels. Which tile each cell gets is ``mosaic.tile_choice``; painting the tiles ``mosaic.painting``;
the options ``mosaic.options``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PIL import Image

from . import sized
from .grid import DEFAULT_MAX_OUTPUT_PIXELS, Grid, band_cells, cell_image, plan_grid
from .library import TileLibrary
from .options import DEFAULT_OPTIONS, RenderOptions
from .painting import paint
from .parts import Parts, plan_parts
from .signatures import cell_pixels
from .tile_choice import check_cells, choose_tiles, choose_whole, parts_of


def render_band(
    cells: np.ndarray,
    library: TileLibrary,
    *,
    tile_size: int,
    seed: str,
    row_offset: int = 0,
    options: RenderOptions = DEFAULT_OPTIONS,
    choice: np.ndarray | None = None,
    out: np.ndarray | None = None,
    parts: Parts | None = None,
) -> np.ndarray:
    """The mosaic of one band: ``(rows*tile_size, cols*tile_size, 3) uint8``.

    ``cells`` is the band's cell image; ``row_offset`` its first row in the whole grid
    (variety depends on global positions); ``seed`` the job's request id. ``parts``: the
    grid's parts (``mosaic.parts``), of which the band's rows are whole ones: each is chosen
    and corrected on its own, so the band's pixels are those rows of the whole mosaic
    whatever the slicing (None: the band is one part). ``choice``: the band's rows of a choice
    made already (fair use, ``assign_fair``, or ``choose_tiles``); by default the band chooses
    its own tiles. ``out``: where to paint it (``paint``).
    """
    rows, cols = check_cells(cells, tile_size, options)
    if choice is None:
        choice = choose_tiles(
            cells, library, tile_size=tile_size, seed=seed, row_offset=row_offset, options=options, parts=parts
        )
    elif choice.shape != (rows, cols):
        raise ValueError(f"choice is {choice.shape}, the band has {rows}x{cols} cells")
    if out is None:
        out = np.empty((rows * tile_size, cols * tile_size, 3), np.uint8)
    k = cell_pixels(tile_size)
    painter = sized.paint_part if options.sized else paint
    for part, _ in parts_of(parts, row_offset, rows):
        first, last = part.start - row_offset, part.stop - row_offset
        painter(
            cells[first * k : last * k],
            choice[first:last],
            library,
            tile_size=tile_size,
            options=options,
            out=out[first * tile_size : last * tile_size],
        )
    return out


def render(
    image: Image.Image,
    library: TileLibrary,
    *,
    tile_size: int,
    slices: int = 1,
    tiles_across: int | None = None,
    seed: str = "",
    options: RenderOptions = DEFAULT_OPTIONS,
    max_output_pixels: int = DEFAULT_MAX_OUTPUT_PIXELS,
    grid: Grid | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """The whole mosaic: the grid's parts (``mosaic.parts``) chosen and painted one by one,
    exactly as the workers render them, so ``slices`` changes how often ``progress`` is
    called and nothing else.

    ``grid``: a grid planned on the original size, when ``image`` was decoded at reduced
    scale (``open_image(min_size=...)``); otherwise it is planned here.
    ``progress(done_rows, total_rows)`` is called after each band (for a progress bar).
    """
    pixels, _ = render_with_placement(
        image,
        library,
        tile_size=tile_size,
        slices=slices,
        tiles_across=tiles_across,
        seed=seed,
        options=options,
        max_output_pixels=max_output_pixels,
        grid=grid,
        progress=progress,
    )
    return pixels


def render_with_placement(
    image: Image.Image,
    library: TileLibrary,
    *,
    tile_size: int,
    slices: int = 1,
    tiles_across: int | None = None,
    seed: str = "",
    options: RenderOptions = DEFAULT_OPTIONS,
    max_output_pixels: int = DEFAULT_MAX_OUTPUT_PIXELS,
    grid: Grid | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``render``'s pixels and the placement behind them: ``(pixels, choice)``.

    ``choice`` is ``(tiles_down, tiles_across) int32``, the candidate placed in each cell,
    exactly the one ``render_band`` placed (``placed_tiles`` turns it into library tiles
    and mirror flags). Same arguments as ``render``.
    """
    if grid is None:
        grid = plan_grid(
            image.width,
            image.height,
            tile_size=tile_size,
            tiles_across=tiles_across,
            max_output_pixels=max_output_pixels,
        )
    elif grid.tile_size != tile_size:
        raise ValueError(f"grid is planned for tile size {grid.tile_size}, not {tile_size}")
    cells = cell_image(image, grid)
    parts = plan_parts(grid, align=options.cell_sizes[-1])
    whole = None
    if options.max_uses is not None or options.use_every_photo:  # decided once for the whole grid
        whole = choose_whole(
            cells, library, tile_size=tile_size, seed=seed, options=options, parts=parts, photo=image.size
        )
    pixels = np.empty((grid.tiles_down * tile_size, grid.tiles_across * tile_size, 3), np.uint8)
    choice = np.empty((grid.tiles_down, grid.tiles_across), np.int32)
    for band in parts.bands(slices):  # each painted straight into its rows of the mosaic
        part = band_cells(cells, band, tile_size=tile_size)
        choice[band.start : band.stop] = (
            choose_tiles(
                part, library, tile_size=tile_size, seed=seed, row_offset=band.start, options=options, parts=parts
            )
            if whole is None
            else whole[band.start : band.stop]
        )
        rows = pixels[band.start * tile_size : band.stop * tile_size]
        render_band(
            part,
            library,
            tile_size=tile_size,
            seed=seed,
            row_offset=band.start,
            options=options,
            choice=choice[band.start : band.stop],
            out=rows,
            parts=parts,
        )
        if progress is not None:
            progress(band.stop, grid.tiles_down)
    return pixels, choice


def placed_tiles(choice: np.ndarray, library: TileLibrary) -> tuple[np.ndarray, np.ndarray]:
    """A choice as library tiles: ``(index into library.names, mirrored)``, both shaped like ``choice``.

    Candidates ``>= len(library)`` are the mirror images (left-right) of ``candidate - len(library)``.
    """
    count = len(library)
    return (choice % count).astype(np.int32), choice >= count
