"""``photomosaics render``: the mosaic engine as an offline tool, one process, no queues.

The library is a folder or zip of photos (built in memory, its index cached on disk), ``demo`` (the demo tiles, made
from the sample photos installed with scikit-image and scikit-learn) or, only when
``AZURE_STORAGE_CONNECTION_STRING`` is set, the name of a library in storage. The target is
rendered part by part, exactly as the workers render it (``mosaic.parts``: the same bytes for any
``--slices``), with a progress bar per band. The library is ``photomosaics.render_library``'s,
the outputs ``photomosaics.render_outputs``'.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from dal.config import Settings
from mosaic.limits import MAX_TILE_SIZE
from mosaic.variety import feasible_distance, tiles_needed
from photomosaics.render_library import library_for
from photomosaics.render_outputs import (
    check_fits,
    check_memory,
    check_not_the_photo,
    distinct_outputs,
    output_format,
    write_all,
    write_tile_map,
)


def _render_options(
    *,
    variety: int | None,
    correction: int | None = None,
    overlay: int | None = None,
    match_contrast: bool = False,
    colour_first: bool,
    max_uses: int | None = None,
    use_every_photo: bool = False,
    cell_sizes: tuple[int, ...] | None = None,
    split: int | None = None,
) -> Any:
    """The engine's RenderOptions with only the options given on the command line changed;
    a combination the engine refuses is a usage error."""
    import dataclasses

    from mosaic.options import DEFAULT_OPTIONS

    changes: dict[str, Any] = {"colour_first": colour_first, "max_uses": max_uses}
    if match_contrast:
        changes["match_contrast"] = True
    if use_every_photo:
        changes["use_every_photo"] = True
    given = (("variety", variety), ("correction", correction), ("overlay", overlay), ("cell_sizes", cell_sizes))
    for name, value in (*given, ("split", split)):
        if value is not None:
            changes[name] = value
    try:
        return dataclasses.replace(DEFAULT_OPTIONS, **changes)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cell-sizes") from None


def _cell_sizes_value(_ctx: Any, _param: Any, value: str | None) -> tuple[int, ...] | None:
    """``--cell-sizes 1,2,4`` -> ``(1, 2, 4)``; a clear usage error for anything else."""
    from mosaic.cells import parse_cell_sizes

    if value is None:
        return None
    try:
        return parse_cell_sizes(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def cell_sizes_options(command: Any) -> Any:
    """``--cell-sizes`` and ``--split``, as ``render`` and ``submit`` both take them."""
    command = click.option(
        "--split",
        type=click.IntRange(0, 100),
        default=None,
        help="With --cell-sizes: how eagerly the grid is split into small cells, 0-100 [default: 50].",
    )(command)
    return click.option(
        "--cell-sizes",
        callback=_cell_sizes_value,
        default=None,
        metavar="SIZES",
        help="Sizes a cell may take, in tiles, e.g. 1,2,4: a calm area gets one large photo, detail small "
        "ones (needs tiles of 4 px or more, the largest cell at most 64 px) [default: 1, every cell one tile].",
    )(command)


@click.command()
@click.argument("target", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-l",
    "--library",
    "library_spec",
    required=True,
    metavar="DIR_OR_NAME",
    help="A folder or zip of photos, 'demo', or a library name in storage (needs AZURE_STORAGE_CONNECTION_STRING).",
)
@click.option(
    "-t",
    "--tile-size",
    type=click.IntRange(1, MAX_TILE_SIZE),
    default=16,
    show_default=True,
    help="Pixels per tile side in the output.",
)
@click.option(
    "--tiles-across",
    type=click.IntRange(min=1),
    default=None,
    help="Mosaic width in tiles [default: one tile per target pixel, within the output limit].",
)
@click.option(
    "--slices",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Report progress in this many bands, as the workers would cut them (the mosaic is the same "
    "for any number); "
    f"at most PHOTOMOSAICS_MAX_SLICES ({Settings().max_slices}).",
)
@click.option(
    "--variety",
    type=click.IntRange(0, 16),
    default=None,
    help="No tile repeats within this many cells, 0 = off [default: the engine's].",
)
@click.option(
    "--correction",
    type=click.IntRange(0, 100),
    default=None,
    help="Move each whole tile this far toward its cell's colour, in percent; the tile stays "
    "the photo it is (0 = tiles untouched) [default: the engine's].",
)
@click.option(
    "--overlay",
    type=click.IntRange(0, 100),
    default=None,
    help="Paint the target over the tiles at sub-cell resolution, in percent (a fake mosaic: "
    "up close the tiles stop being photographs) [default: 0, off].",
)
@click.option(
    "--match-contrast",
    is_flag=True,
    help="With --overlay: hold each tile's contrast to its cell's and raise the overlay where the target is flat.",
)
@click.option("--colour-first", is_flag=True, help="Match mean colours only, ignoring the layout inside a cell.")
@click.option(
    "--max-uses",
    type=click.IntRange(min=1),
    default=None,
    help="Fair use: no tile placed more than N times in the mosaic (exact minimum-cost assignment) [default: no limit].",
)
@click.option(
    "--use-every-photo",
    is_flag=True,
    default=False,
    help="Every photo of the library (near-duplicates counted once) at least once; refused, naming the "
    "smallest --tiles-across that works, when the mosaic has too few tiles.",
)
@cell_sizes_options
@click.option("--seed", default="", help="Seed of the variety choices (same seed, same pixels).")
@click.option(
    "--max-output-pixels",
    type=click.IntRange(min=1),
    default=None,
    help="Largest output in pixels for an explicit --tiles-across [default: PHOTOMOSAICS_MAX_OUTPUT_PIXELS or 400 MP; without --tiles-across at most 40 MP].",
)
@click.option(
    "-o",
    "--output",
    "outputs",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    required=True,
    multiple=True,
    help="Output image; the format follows the extension (.jpg, .png, .webp, .tif; .dzi writes a Deep Zoom pyramid: "
    "name.dzi and name_files/). Repeat it for several outputs of one render, written at once (-o m.jpg -o m.dzi).",
)
@click.option(
    "--tile-map",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Also write which library photo is in which cell, as CSV: col,row,tile,mirrored (mirrored 0 or 1).",
)
@click.option("--no-cache", is_flag=True, help="Rebuild a folder or zip library instead of using its cached index.")
@click.option("--quality", type=click.IntRange(1, 100), default=90, show_default=True, help="JPEG/WebP quality.")
def render(
    target: Path,
    library_spec: str,
    tile_size: int,
    tiles_across: int | None,
    slices: int,
    variety: int | None,
    correction: int | None,
    overlay: int | None,
    match_contrast: bool,
    colour_first: bool,
    max_uses: int | None,
    use_every_photo: bool,
    cell_sizes: tuple[int, ...] | None,
    split: int | None,
    seed: str,
    max_output_pixels: int | None,
    outputs: tuple[Path, ...],
    tile_map: Path | None,
    no_cache: bool,
    quality: int,
) -> None:
    """Render TARGET as a mosaic of library tiles, offline, into each OUTPUT."""
    from dal.config import Settings
    from mosaic.grid import min_slices
    from mosaic.images import ImageDecodeError, check_image_file, open_image
    from mosaic.render import render_with_placement

    outputs = distinct_outputs(outputs, tile_map)
    formats = {output: output_format(output) for output in outputs}
    for output in (*outputs, *([tile_map] if tile_map is not None else [])):
        check_not_the_photo(target, output, "--tile-map" if output == tile_map else "--output")
    if tile_map is not None and not tile_map.parent.is_dir():
        raise click.BadParameter(f"folder {tile_map.parent} does not exist", param_hint="--tile-map")
    settings = Settings.from_env()
    if slices > settings.max_slices:
        raise click.BadParameter(
            f"at most {settings.max_slices} slices (PHOTOMOSAICS_MAX_SLICES), got {slices}", param_hint="--slices"
        )
    try:
        if target.is_file():  # a pipe's first bytes cannot be read twice
            check_image_file(target)
        image = open_image(target.read_bytes(), max_pixels=settings.max_input_pixels)
    except ImageDecodeError as exc:
        raise click.BadParameter(f"{target}: {exc}", param_hint="TARGET") from None
    options = _render_options(
        variety=variety,
        correction=correction,
        overlay=overlay,
        match_contrast=match_contrast,
        colour_first=colour_first,
        max_uses=max_uses,
        use_every_photo=use_every_photo,
        cell_sizes=cell_sizes,
        split=split,
    )
    _check_cells_fit(options, tile_size)
    limit = max_output_pixels or settings.max_output_pixels
    grid = _plan(image, tile_size=tile_size, tiles_across=tiles_across, slices=slices, limit=limit, formats=formats)
    library = library_for(
        library_spec, use_cache=not no_cache, max_uses=max_uses, cells=grid.tiles_across * grid.tiles_down
    )
    click.echo(
        f"{grid.tiles_across}x{grid.tiles_down} tiles of {tile_size} px, {len(library.names)} in the library -> "
        f"{grid.output_width}x{grid.output_height} px",
        err=True,
    )
    if use_every_photo:
        _check_every_photo(library, grid, image.size)
    kept = feasible_distance(options.variety, library.group_count)
    if kept < options.variety:  # the engine lowers the rule to what the library can keep
        near = "a photo may sit next to itself" if kept == 0 else f"the variety is lowered to {kept}"
        click.echo(
            f"note: with {library.group_count} photos {near}; "
            f"variety {options.variety} needs {tiles_needed(options.variety)} photos or more",
            err=True,
        )
    with click.progressbar(length=grid.tiles_down, label="rendering", file=sys.stderr) as bar:

        def advance(done_rows: int, _total: int) -> None:
            bar.update(done_rows - bar.pos)

        # The grid's parts (mosaic.parts) are chosen and painted one by one, as the pipeline's
        # processors render them: the outputs are the pipeline's byte for byte, for any slicing.
        mosaic, placement = render_with_placement(
            image,
            library,
            tile_size=tile_size,
            slices=max(slices, min_slices(grid)),
            tiles_across=tiles_across,
            seed=seed,
            options=options,
            max_output_pixels=limit,
            progress=advance,
        )
    write_all(mosaic, formats, quality)
    if tile_map is not None:
        sizes = None
        if options.sized:  # each cell's rectangle: the sizes the engine planned from the same cells
            from mosaic.sized import cell_sizes as planned_sizes

            sizes = planned_sizes(image, grid, options, placement)
        write_tile_map(placement, library, library_spec, tile_map, sizes)


def _check_cells_fit(options: Any, tile_size: int) -> None:
    """A usage error, before any work, when the cells' sizes do not fit the tile size."""
    from mosaic.cells import check_tile_size
    from mosaic.library import ATLAS_SIZE

    try:
        check_tile_size(options.cell_sizes, tile_size, ATLAS_SIZE)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cell-sizes") from None


def _check_every_photo(library: Any, grid: Any, photo: tuple[int, int]) -> None:
    """A usage error naming the smallest tiles across when the grid cannot hold every photo."""
    from mosaic.cover import CoverError, check_cover

    try:
        check_cover(
            grid.cells,
            library.group_count,
            width=photo[0],
            height=photo[1],
            tile_size=grid.tile_size,
            tiles_across=grid.tiles_across,
        )
    except CoverError as exc:
        raise click.BadParameter(str(exc), param_hint="--tiles-across") from None


def _plan(
    image: Any, *, tile_size: int, tiles_across: int | None, slices: int, limit: int, formats: dict[Path, str]
) -> Any:
    """The job's grid, refused with a usage error before any work when it cannot be made."""
    from mosaic.grid import plan_grid

    try:
        grid = plan_grid(
            image.width, image.height, tile_size=tile_size, tiles_across=tiles_across, max_output_pixels=limit
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tile-size") from None
    if tiles_across is not None and grid.tiles_across < tiles_across:
        click.echo(
            f"note: {tiles_across:,} tiles across would be over the {limit:,}-pixel limit "
            f"(--max-output-pixels): {grid.tiles_across:,} across fit",
            err=True,
        )
    for output, fmt in formats.items():  # refused now, not after the whole render
        check_fits(output, fmt, grid.output_width, grid.output_height)
    check_memory(grid.output_width * grid.output_height)
    return grid
