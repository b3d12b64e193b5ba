"""Deep Zoom (DZI) pyramids of a mosaic, written by libvips through ``pyvips``.

Contract: ``write_dzi(pixels, path)`` writes ``path`` (``name.dzi``, the XML descriptor) and
``name_files/`` beside it: the standard DZI layout that OpenSeadragon and its peers read.
Level ``L`` holds the image scaled by ``2 ** (L - max_level)``, each side rounded up, cut
into ``tile_size`` px tiles with ``overlap`` px shared at each inner edge; level 0 is 1 px.
``top_level``, ``level_size``, ``level_tiles``, ``tile_origin`` and ``level_covering`` are
that geometry, for readers of a pyramid (the web app's previews).

Why libvips: it builds the pyramid as a stream, tile row by tile row, so the pyramid costs
little more memory than its input, and a source that is itself a file (a JPEG stitched from
the slices) is never decoded whole. ``pyvips`` is imported only here, when a pyramid is
asked for, so the rest of the engine does not need libvips.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

DZI_TILE_SIZE = 254  # OpenSeadragon's and Microsoft's default: 254 + 2 x 1 overlap = 256 px
DZI_OVERLAP = 1
DZI_QUALITY = 90


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


def tile_origin(column: int, row: int, *, tile_size: int = DZI_TILE_SIZE, overlap: int = DZI_OVERLAP) -> tuple[int, int]:
    """Where tile ``(column, row)``'s top-left pixel lies in its level (inner edges overlap)."""
    return column * tile_size - (overlap if column else 0), row * tile_size - (overlap if row else 0)


def level_covering(width: int, height: int, side: int) -> int:
    """The smallest level whose longer side is at least ``side`` (the full size when none is)."""
    top = top_level(width, height)
    return next((level for level in range(top + 1) if max(level_size(width, height, level)) >= side), top)


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


def write_dzi_from_vips(image: Any, path: Path, *, tile_size: int = DZI_TILE_SIZE, overlap: int = DZI_OVERLAP,
                        quality: int = DZI_QUALITY) -> None:  # fmt: skip
    """Write a ``pyvips.Image`` (possibly streamed from a file) as a DZI pyramid."""
    # dzsave takes the name without ".dzi" and adds it, and "_files/" for the tiles.
    image.dzsave(
        str(path.with_suffix("")),
        layout="dz",
        tile_size=tile_size,
        overlap=overlap,
        suffix=f".jpg[Q={quality},strip]",
        depth="onepixel",
    )


def write_dzi_zip(image: Any, path: Path, *, tile_size: int = DZI_TILE_SIZE, overlap: int = DZI_OVERLAP,
                  quality: int = DZI_QUALITY) -> None:  # fmt: skip
    """Write a ``pyvips.Image`` as one uncompressed zip: ``<stem>.dzi`` and ``<stem>_files/``.

    Stored, not deflated: the tiles are JPEGs already, and a stored member can be served by
    one range read of the zip (``dal.pyramid``). libvips streams the zip to disk as it goes."""
    if path.suffix.lower() != ".zip":
        raise ValueError(f"a pyramid zip ends in .zip, not {path.suffix!r}")
    image.dzsave(
        str(path),
        layout="dz",
        container="zip",
        compression=0,
        tile_size=tile_size,
        overlap=overlap,
        suffix=f".jpg[Q={quality},strip]",
        depth="onepixel",
    )
