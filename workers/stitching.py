"""The streaming stitch: rendered slices on disk to the final JPEG and the Deep Zoom pyramid.

A 400 MP mosaic is 1.2 GB of pixels: no role may hold it. So the controller never joins the
slices in memory. It streams each rendered slice blob to a scratch file (``.npy``, or PNG
from an older processor), opens each file with libvips (``pyvips``) as an image that reads
from disk on demand (a ``.npy`` is a header and raw pixels: ``rawload`` at the header's
offset), joins them top to bottom (``join``, lazy), and lets libvips pull that pipeline
through its encoders tile row by tile row:

- ``save_jpeg``: the full-resolution JPEG, when it fits the format (65,535 px a side);
- ``save_pyramid``: the Deep Zoom pyramid as one uncompressed zip (``mosaic.deepzoom``).

Memory stays at a few tile rows whatever the size of the mosaic (``make bench`` prints the
controller's peak RSS for 40 and 400 MP); the scratch disk holds the slices and the outputs
(about 3 bytes per output pixel, plus the JPEG and the zip) for the length of the stitch.

The JPEG parameters live in one place, ``JPEG_OPTIONS``: ``encode_output`` (a processor's
one-slice job, and tests) encodes an in-memory array with the same libvips encoder, so a
stitched job and the in-process render give the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dal.rendered import RenderedFormatError
from mosaic.deepzoom import write_dzi_zip

__all__ = ["JPEG_MAX_SIDE", "JPEG_OPTIONS", "fits_jpeg", "open_slice", "open_jpeg", "join_slices", "save_jpeg",
           "encode_jpeg", "save_pyramid"]  # fmt: skip

JPEG_MAX_SIDE = 65_535  # the JPEG format's limit on each side
# Quality 90, Huffman tables optimised, 4:2:0 chroma (libvips would keep full chroma at
# Q >= 90: a third bigger for photo tiles, invisible at print size).
JPEG_OPTIONS: dict[str, Any] = {"Q": 90, "optimize_coding": True, "subsample_mode": "on", "keep": "none"}
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_NPY_MAGIC = b"\x93NUMPY"


def _vips() -> Any:
    import pyvips  # a dependency (pyvips[binary]); imported where it is used, like mosaic.deepzoom

    return pyvips


def fits_jpeg(width: int, height: int) -> bool:
    return 0 < width <= JPEG_MAX_SIDE and 0 < height <= JPEG_MAX_SIDE


def open_slice(path: Path) -> Any:
    """A rendered-slice file as a ``pyvips.Image`` read from disk on demand (never loaded whole)."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(_PNG_MAGIC):
        # Random access: the stitch reads each slice twice (JPEG, then pyramid). Only slices of
        # older processors are PNG; libvips decodes a large one to a disk buffer, not memory.
        image = _vips().Image.new_from_file(str(path))
        return image.colourspace("srgb")[0:3] if image.bands != 3 else image
    if not head.startswith(_NPY_MAGIC):
        raise RenderedFormatError("a rendered slice must be a .npy array or a PNG")
    try:
        header = np.load(path, mmap_mode="r", allow_pickle=False)  # reads the header only
    except (ValueError, OSError, EOFError) as exc:
        raise RenderedFormatError(f"not a readable .npy array: {exc}") from None
    shape, dtype, offset, fortran = header.shape, header.dtype, header.offset, np.isfortran(header)
    del header
    if dtype != np.uint8 or len(shape) != 3 or shape[2] != 3 or fortran:
        raise RenderedFormatError(f"expected (H, W, 3) uint8 C-order pixels, got {shape} {dtype}")
    image = _vips().Image.rawload(str(path), shape[1], shape[0], 3, offset=offset)
    return image.copy(interpretation="srgb")


def open_jpeg(path: Path) -> Any:
    """A JPEG file as a ``pyvips.Image`` decoded top to bottom as it is consumed."""
    return _vips().Image.new_from_file(str(path), access="sequential")


def join_slices(slices: Sequence[Any], *, width: int, height: int) -> Any:
    """The slices stacked top to bottom (lazily); ValueError when they do not add up."""
    if not slices:
        raise ValueError("nothing to stitch")
    for i, image in enumerate(slices):
        if image.width != width or image.bands != 3:
            raise ValueError(f"slice {i} is {image.width}x{image.height}x{image.bands}, expected width {width}, 3 bands")
    total = sum(image.height for image in slices)
    if total != height:
        raise ValueError(f"slices add up to {total} rows, expected {height}")
    joined = slices[0]
    for image in slices[1:]:  # join, not arrayjoin: arrayjoin pads every cell to the largest
        joined = joined.join(image, "vertical")
    return joined


def save_jpeg(image: Any, path: Path) -> None:
    """The full-resolution JPEG, streamed to ``path``."""
    if not fits_jpeg(image.width, image.height):
        raise ValueError(f"{image.width}x{image.height} is over JPEG's {JPEG_MAX_SIDE} px a side")
    image.jpegsave(str(path), **JPEG_OPTIONS)


def encode_jpeg(pixels: np.ndarray) -> bytes:
    """An ``(H, W, 3) uint8`` array as the same JPEG ``save_jpeg`` writes (deterministic)."""
    array = np.ascontiguousarray(pixels, dtype=np.uint8)
    image = _vips().Image.new_from_array(array, interpretation="srgb")
    return bytes(image.jpegsave_buffer(**JPEG_OPTIONS))


def save_pyramid(image: Any, path: Path) -> None:
    """The Deep Zoom pyramid as one uncompressed zip at ``path`` (``mosaic.dzi`` inside)."""
    write_dzi_zip(image, path)
