"""What an offline render writes: its image outputs (by extension: JPEG, PNG, WebP, TIFF, or a
Deep Zoom ``.dzi``), checked before any work (the folder, the format's largest side, this
machine's memory), written at once, and its tile map as CSV.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import click

from photomosaics.whole_files import written_whole

PNG_COMPRESS_LEVEL = 1
_FORMATS = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".webp": "WEBP", ".tif": "TIFF", ".tiff": "TIFF"}


def output_format(output: Path) -> str:
    """The format an output's extension asks for; a clear error for an unknown one or a missing folder."""
    fmt = "DZI" if output.suffix.lower() == ".dzi" else _FORMATS.get(output.suffix.lower())
    if fmt is None:
        raise click.BadParameter(
            f"unknown image type {output.suffix!r}; use one of {', '.join(_FORMATS)}, .dzi", param_hint="--output"
        )
    if not output.parent.is_dir():
        raise click.BadParameter(f"folder {output.parent} does not exist", param_hint="--output")
    return fmt


def distinct_outputs(outputs: tuple[Path, ...], tile_map: Path | None) -> tuple[Path, ...]:
    """``outputs`` with one path per file (``a.jpg`` and ``./a.jpg`` are one output, written once);
    a usage error when the tile map would overwrite one of them."""
    by_file: dict[Path, Path] = {}
    for output in outputs:
        by_file.setdefault(output.resolve(), output)
    if tile_map is not None and tile_map.resolve() in by_file:
        raise click.BadParameter(
            f"{tile_map} is also an --output: the tile map needs a file of its own", param_hint="--tile-map"
        )
    return tuple(by_file.values())


def check_not_the_photo(photo: Path, output: Path, param_hint: str) -> None:
    """A usage error when ``output`` is the photo itself (the same file by any path): writing the
    mosaic there would destroy the photo it is made of."""
    try:
        same = output.exists() and output.samefile(photo)
    except OSError:  # the photo is unreadable or a pipe's name: nothing on disk to lose
        same = False
    if same:
        raise click.BadParameter(f"{output} is the photo itself: choose another file", param_hint=param_hint)


def check_fits(output: Path, fmt: str, width: int, height: int) -> None:
    """A usage error when the format cannot hold a mosaic this large (JPEG 65,500 px a side, WebP 16,383)."""
    from mosaic.limits import JPEG_MAX_SIDE, WEBP_MAX_SIDE

    most = {"JPEG": JPEG_MAX_SIDE, "WEBP": WEBP_MAX_SIDE}.get(fmt)
    if most is not None and max(width, height) > most:
        raise click.BadParameter(
            f"{output.name}: the mosaic is {width:,}x{height:,} px and {fmt} holds at most {most:,} px a side; "
            "write .png, .tif or .dzi, or ask for fewer --tiles-across or a smaller --tile-size",
            param_hint="--output",
        )


# What one render holds per output pixel at its peak (the mosaic, the band being composed, the
# encoders' buffers), and besides it: measured on this project's renders (docs/benchmarks.md).
RENDER_BYTES_PER_PIXEL = 7.5
RENDER_BASE_BYTES = 300 * 2**20


def render_memory_bytes(pixels: int) -> int:
    """The memory an offline render of ``pixels`` output pixels needs at its peak (an estimate)."""
    return int(RENDER_BASE_BYTES + RENDER_BYTES_PER_PIXEL * pixels)


def _available_memory() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_memory(pixels: int) -> None:
    """Say what the render needs; refuse, before any work, when it cannot fit in this machine's memory."""
    need, available = render_memory_bytes(pixels), _available_memory()
    have = "" if available is None else f", {available / 2**30:.1f} GB available"
    click.echo(f"this render holds the whole mosaic: it needs about {need / 2**30:.1f} GB of memory{have}", err=True)
    if available is not None and need > available:
        raise click.ClickException(
            f"a {pixels / 1e6:,.0f} MP mosaic needs about {need / 2**30:.1f} GB in one process and this machine has "
            f"{available / 2**30:.1f} GB available: render it through the pipeline instead (photomosaics run, then "
            "photomosaics submit), where no role holds the whole mosaic"
        )


def _write(mosaic: Any, output: Path, fmt: str, quality: int) -> None:
    """Encode ``output`` whole or not at all (``whole_files``): a failed write (a full disk, a
    file size limit) leaves no cut-short mosaic, and the file written before stays whole."""
    try:
        with written_whole(output) as partial:
            try:
                _encode(mosaic, partial, fmt, quality)
                if fmt == "DZI":  # the descriptor names no folder: a viewer finds <stem>_files beside it
                    files = _dzi_files(output)
                    if files.is_dir():
                        shutil.rmtree(files)
                    os.replace(_dzi_files(partial), files)
            finally:
                if fmt == "DZI":
                    shutil.rmtree(_dzi_files(partial), ignore_errors=True)
    except _write_errors() as exc:
        raise click.ClickException(f"cannot write {output}: {_reason(exc)}") from None


def _encode(mosaic: Any, path: Path, fmt: str, quality: int) -> None:
    from PIL import Image

    save: dict[str, Any] = {"quality": quality} if fmt in ("JPEG", "WEBP") else {}
    if fmt == "PNG":
        # zlib level 1: a mosaic is photo noise that deflate barely shrinks; Pillow's default
        # level 6 took 2.7x as long for files only ~10 % smaller (12 MP, tile 8).
        save["compress_level"] = PNG_COMPRESS_LEVEL
    if fmt == "DZI":
        from mosaic.deepzoom import write_dzi

        write_dzi(mosaic, path, quality=quality)
    elif fmt == "JPEG":  # the pipeline's encoder and options (restart markers included): the same bytes
        from workers.imaging.stitching import from_pixels, jpeg_options

        from_pixels(mosaic).jpegsave(str(path), **{**jpeg_options(mosaic.shape[1]), "Q": quality})
    else:
        Image.fromarray(mosaic).save(path, format=fmt, **save)


def _dzi_files(descriptor: Path) -> Path:
    return descriptor.with_name(f"{descriptor.stem}_files")


def _write_errors() -> tuple[type[BaseException], ...]:
    """What a failed encode or write raises: OSError, Pillow's RuntimeError and ValueError (its
    WebP encoder), and libvips' own error (JPEG, Deep Zoom), whose log holds the system's reason."""
    from pyvips import Error as VipsError

    return (OSError, RuntimeError, ValueError, VipsError)


def _reason(exc: BaseException) -> str:
    """One line: the system's reason (``No space left on device``) where there is one."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = f"{exc}\n{getattr(exc, 'detail', '')}"  # pyvips.Error: its message, then libvips' log
    system = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("system error:")]
    return system[0] if system else text.strip().splitlines()[0]


def write_all(mosaic: Any, formats: dict[Path, str], quality: int) -> None:
    """Every output of one render at once: libvips (the pyramid) and Pillow's encoders work
    outside the GIL, so a JPEG and its Deep Zoom pyramid take about as long as the pyramid."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(formats)) as pool:
        written = [pool.submit(_write, mosaic, output, fmt, quality) for output, fmt in formats.items()]
    for future in written:
        future.result()
    for output in formats:
        click.echo(f"wrote {output} ({mosaic.shape[1]}x{mosaic.shape[0]} px)", err=True)


def write_tile_map(placement: Any, library: Any, library_spec: str, path: Path, sizes: Any = None) -> None:
    """The placement as CSV (``dal.blobs.tile_maps``: the same lines as ``GET /api/jobs/<id>/tiles?format=csv``;
    with cells of several sizes, one line per cell with its size)."""
    from dal.blobs.library_creation import tile_blob_names
    from dal.blobs.tile_maps import TileMap

    names = library.names
    placed = TileMap.from_choice(
        placement, names=names, blobs=tile_blob_names(names), library=library_spec, sizes=sizes
    )
    try:
        with written_whole(path) as partial, partial.open("w", encoding="utf-8", newline="") as out:
            out.writelines(placed.csv_lines())
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None
    click.echo(f"wrote {path} ({placed.columns}x{placed.rows} cells, {len(placed.tiles)} distinct photos)", err=True)
