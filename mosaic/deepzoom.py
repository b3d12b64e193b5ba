"""Deep Zoom (DZI) pyramids of a mosaic, written by libvips through ``pyvips``.

Contract: ``write_dzi(pixels, path)`` writes ``path`` (``name.dzi``, the XML descriptor) and
``name_files/`` beside it: the standard DZI layout that OpenSeadragon and its peers read.
Level ``L`` holds the image scaled by ``2 ** (L - max_level)``, each side rounded up, cut
into ``tile_size`` px tiles with ``overlap`` px shared at each inner edge; level 0 is 1 px.
``top_level``, ``level_size``, ``level_tiles``, ``tile_origin`` and ``level_covering`` are
that geometry, and ``read_descriptor`` reads a pyramid's own size, tile size and overlap, for
readers of a pyramid (the web app's previews). ``write_dzi_zip`` writes the same pyramid as one
stored zip, to a file or to a ``write(bytes)`` callback as it is made (a job's blob, uploaded
while libvips builds it).

Why libvips: it builds the pyramid as a stream, tile row by tile row, so the pyramid costs
little more memory than its input, and a source that is itself a file (a JPEG stitched from
the slices) is never decoded whole. ``pyvips`` is imported only here, when a pyramid is
asked for, so the rest of the engine does not need libvips.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np

# 510 + 2 x 1 overlap = 512 px tiles, not OpenSeadragon's 254 (256 px): libvips spends most
# of a pyramid's time per tile, not per pixel (40 MP: 0.69 s at 254, 0.41 s at 510), and a
# viewer then reads a quarter as many tiles (a range read of the zip each) for the same bytes.
# Readers take the size from the descriptor (``read_descriptor``): older 254 px pyramids still read.
DZI_TILE_SIZE = 510
DZI_OVERLAP = 1
DZI_QUALITY = 90
# 4:2:0 chroma, as the full-size JPEG (workers.stitching.JPEG_OPTIONS); libvips would keep
# full chroma at Q >= 90. On the benchmark's 40 MP mosaic: 20 % less pyramid time and 22 %
# fewer bytes, mean error 1.68 -> 1.90 levels, no difference to see at 300 % zoom.
_TILE_SUFFIX = ".jpg[Q={quality},strip,subsample_mode=on]"
ZIP_STEM = "mosaic"  # a streamed zip's members: mosaic.dzi and mosaic_files/


def top_level(width: int, height: int) -> int:
    """The full-size level's number: levels run from 0 (1 px) to this."""
    return math.ceil(math.log2(max(width, height, 1)))


def level_size(width: int, height: int, level: int) -> tuple[int, int]:
    """The size of ``level`` of a ``width`` x ``height`` pyramid (each halving rounds up)."""
    scale = 2 ** (top_level(width, height) - level)
    return math.ceil(width / scale), math.ceil(height / scale)


def level_tiles(width: int, height: int, level: int, *, tile_size: int = DZI_TILE_SIZE) -> tuple[int, int]:
    """Columns and rows of tiles of ``level``."""
    w, h = level_size(width, height, level)
    return math.ceil(w / tile_size), math.ceil(h / tile_size)


def tile_origin(
    column: int, row: int, *, tile_size: int = DZI_TILE_SIZE, overlap: int = DZI_OVERLAP
) -> tuple[int, int]:
    """Where tile ``(column, row)``'s top-left pixel lies in its level (inner edges overlap)."""
    return column * tile_size - (overlap if column else 0), row * tile_size - (overlap if row else 0)


def level_covering(width: int, height: int, side: int) -> int:
    """The smallest level whose longer side is at least ``side`` (the full size when none is)."""
    top = top_level(width, height)
    return next((level for level in range(top + 1) if max(level_size(width, height, level)) >= side), top)


@dataclass(frozen=True)
class Descriptor:
    """What a ``.dzi`` says: the full size and how its tiles are cut."""

    width: int
    height: int
    tile_size: int
    overlap: int


def read_descriptor(data: bytes) -> Descriptor:
    """Parse a DZI descriptor (XML); ValueError when it is not one."""
    try:
        root = ElementTree.fromstring(data)
        size = next(child for child in root if child.tag.rsplit("}", 1)[-1] == "Size")
        described = Descriptor(
            int(size.get("Width", "")),
            int(size.get("Height", "")),
            int(root.get("TileSize", "")),
            int(root.get("Overlap", "")),
        )
    except (ElementTree.ParseError, StopIteration, ValueError) as exc:
        raise ValueError(f"not a Deep Zoom descriptor: {exc or 'no Size element'}") from None
    if min(described.width, described.height, described.tile_size) < 1 or described.overlap < 0:
        raise ValueError(f"not a Deep Zoom descriptor: {described}")
    return described


def _vips() -> Any:
    try:
        import pyvips
    except (ImportError, OSError) as exc:  # OSError: the libvips shared library is missing
        raise RuntimeError(f"Deep Zoom output needs pyvips with libvips ({exc}); install pyvips[binary]") from exc
    return pyvips


def write_dzi(
    pixels: np.ndarray,
    path: Path,
    *,
    tile_size: int = DZI_TILE_SIZE,
    overlap: int = DZI_OVERLAP,
    quality: int = DZI_QUALITY,
) -> None:
    """Write an ``H x W x 3`` uint8 image as ``path`` (``.dzi``) plus ``<stem>_files/``."""
    if path.suffix.lower() != ".dzi":
        raise ValueError(f"a Deep Zoom descriptor ends in .dzi, not {path.suffix!r}")
    pyvips = _vips()
    image = pyvips.Image.new_from_array(np.ascontiguousarray(pixels, dtype=np.uint8), interpretation="srgb")
    write_dzi_from_vips(image, path, tile_size=tile_size, overlap=overlap, quality=quality)


def _dzsave_options(tile_size: int, overlap: int, quality: int) -> dict[str, Any]:
    """The pyramid's cut and tile encoding, the same for a folder and a zip."""
    return {
        "layout": "dz",
        "tile_size": tile_size,
        "overlap": overlap,
        "suffix": _TILE_SUFFIX.format(quality=quality),
        "depth": "onepixel",
    }


def write_dzi_from_vips(
    image: Any, path: Path, *, tile_size: int = DZI_TILE_SIZE, overlap: int = DZI_OVERLAP, quality: int = DZI_QUALITY
) -> None:
    """Write a ``pyvips.Image`` (possibly streamed from a file) as a DZI pyramid."""
    # dzsave takes the name without ".dzi" and adds it, and "_files/" for the tiles.
    image.dzsave(str(path.with_suffix("")), **_dzsave_options(tile_size, overlap, quality))


def write_dzi_zip(
    image: Any,
    out: Path | Callable[[bytes], object],
    *,
    tile_size: int = DZI_TILE_SIZE,
    overlap: int = DZI_OVERLAP,
    quality: int = DZI_QUALITY,
) -> None:
    """Write a ``pyvips.Image`` as one uncompressed zip: ``<stem>.dzi`` and ``<stem>_files/``.

    ``out`` is a path (``<stem>.zip``), or a ``write(bytes)`` callable that receives the zip
    front to back as libvips makes it (about every 10 KB; stem ``mosaic``), so a caller can
    stream it to storage while the pyramid is built: no file, no seek. An exception raised by
    ``write`` stops the build at once (libvips sees a failed write) and is raised from here.

    Stored, not deflated: the tiles are JPEGs already, and a stored member can be served by
    one range read of the zip (``dal.blobs.pyramid``)."""
    options = {"container": "zip", "compression": 0, **_dzsave_options(tile_size, overlap, quality)}
    if isinstance(out, Path):
        if out.suffix.lower() != ".zip":
            raise ValueError(f"a pyramid zip ends in .zip, not {out.suffix!r}")
        image.dzsave(str(out), **options)
        return
    stream_save(lambda target: image.dzsave_target(target, basename=ZIP_STEM, **options), out)


def stream_save(save: Callable[[Any], None], write: Callable[[bytes], object]) -> None:
    """Run a libvips ``*_target`` save, ``save(target)``, into ``write(bytes)``: the output
    front to back as libvips makes it. An exception raised by ``write`` stops libvips at once
    (it sees a failed write) and is raised from here."""
    failed: list[BaseException] = []

    def on_write(chunk: Any) -> int:
        try:
            write(bytes(chunk))  # chunk is libvips' buffer, valid during this call only
        except BaseException as exc:
            failed.append(exc)
            return -1  # libvips: a failed write ends the save
        return len(chunk)

    target = _vips().TargetCustom()
    target.on_write(on_write)
    try:
        save(target)
    except _vips().Error:
        if failed:
            raise failed[0] from None
        raise
    if failed:  # libvips finished anyway: still not the output
        raise failed[0]


def encode_tile(pixels: np.ndarray, *, quality: int = DZI_QUALITY) -> bytes:
    """One pyramid tile, ``(h, w, 3) uint8``, as the bytes ``dzsave`` writes for it (same encoder and options)."""
    image = _vips().Image.new_from_array(np.ascontiguousarray(pixels, dtype=np.uint8), interpretation="srgb")
    return bytes(image.jpegsave_buffer(Q=quality, keep="none", subsample_mode="on"))


def descriptor_xml(width: int, height: int, *, tile_size: int = DZI_TILE_SIZE, overlap: int = DZI_OVERLAP) -> bytes:
    """The ``.dzi`` descriptor, byte for byte as ``dzsave`` writes it."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<Image xmlns="http://schemas.microsoft.com/deepzoom/2008"\n'
        '  Format="jpg"\n'
        f'  Overlap="{overlap}"\n'
        f'  TileSize="{tile_size}"\n'
        "  >\n"
        "  <Size \n"
        f'    Height="{height}"\n'
        f'    Width="{width}"\n'
        "  />\n"
        "</Image>\n"
    ).encode()
