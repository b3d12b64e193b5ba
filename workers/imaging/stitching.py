"""The streaming stitch: rendered slices on disk to the final JPEG and the Deep Zoom pyramid.

A 400 MP mosaic is 1.2 GB of pixels: no role may hold it. So the controller never joins the
slices in memory. It streams each rendered slice blob to a scratch file (``.npy``, or PNG
from an older processor), opens each file with libvips (``pyvips``) as an image that reads
from disk as it is consumed (a ``.npy`` is a header and raw pixels: read from the header's
offset, behind a TIFF header: streamed, nothing memory-mapped), joins them top to bottom (``join``, lazy),
and lets libvips pull that pipeline through each encoder in one top-to-bottom pass:

- ``save_jpeg``: the full-resolution JPEG, when it fits the format (65,500 px a side);
- ``save_pyramid``: the Deep Zoom pyramid as one uncompressed zip (``mosaic.deepzoom``),
  streamed to its blob as it is made (``BlobStore.open_writer``): no file of it.

The two passes are independent (each opens the slice files again), so the controller runs
them at once, in two threads: libvips works outside the GIL, and the pyramid, the longer of
the two, no longer waits for the JPEG.

Memory stays at a few tile rows whatever the size of the mosaic (``make bench`` prints the
controller's peak RSS for 40 and 400 MP); the scratch disk holds the slices (about 3 bytes
per output pixel) for the length of the stitch. Both encoders write to a path or to a
``write(bytes)`` callable (``mosaic.deepzoom.stream_save``): the stitch streams each output to
its blob as it is encoded, so neither is ever a file.

The JPEG parameters live in one place, ``JPEG_OPTIONS``: ``encode_output`` (a processor's
one-slice job, and tests) encodes an in-memory array with the same libvips encoder, so a
stitched job and the in-process render give the same bytes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dal.blobs.rendered import NPY_HEADER_FAILURES
from dal.errors import RenderedFormatError
from mosaic.deepzoom import stream_save, write_dzi_zip
from mosaic.limits import JPEG_MAX_SIDE  # libjpeg's 65,500: a mosaic over it has only its pyramid

__all__ = [
    "JPEG_OPTIONS",
    "PYRAMID_CONTENT_TYPE",
    "Streamed",
    "encode_jpeg",
    "fits_jpeg",
    "from_pixels",
    "join_slices",
    "jpeg_options",
    "open_jpeg",
    "open_slice",
    "save_jpeg",
    "save_pyramid",
    "save_pyramid_pixels",
]

PYRAMID_CONTENT_TYPE = "application/zip"
# Quality 90, 4:2:0 chroma (libvips would keep full chroma at Q >= 90: a third bigger for
# photo tiles, invisible at print size), standard Huffman tables: optimised tables need a
# second pass over the whole image's coefficients, held in memory (a 100 MP stitch peaked at
# 667 MB with them, 100 MB without, and took 2.4x as long) for a file a few % smaller.
# A restart marker after every row of MCUs (16 px of 4:2:0): a band of rows is then a run of
# whole restart intervals, which giant jobs' processors encode on their own and the controller
# concatenates (``workers.imaging.jpeg_segments``); 2 bytes and a pad per 16 rows, about 0.01 %.
JPEG_OPTIONS: dict[str, Any] = {"Q": 90, "optimize_coding": False, "subsample_mode": "on", "keep": "none"}
JPEG_MCU = 16


def jpeg_options(width: int) -> dict[str, Any]:
    """``JPEG_OPTIONS`` with the restart interval of an image ``width`` px wide (one MCU row)."""
    return {**JPEG_OPTIONS, "restart_interval": -(-width // JPEG_MCU)}


_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_NPY_MAGIC = b"\x93NUMPY"


def _vips() -> Any:
    import pyvips  # a dependency (pyvips[binary]); imported where it is used, like mosaic.deepzoom

    return pyvips


def fits_jpeg(width: int, height: int) -> bool:
    return 0 < width <= JPEG_MAX_SIDE and 0 < height <= JPEG_MAX_SIDE


@dataclass(frozen=True)
class Streamed:
    """A ``pyvips.Image`` read from disk as it is consumed, and what must live while it is."""

    image: Any
    keep: list[Any]

    def close(self) -> None:
        """Close the files behind it (after the pass that read it)."""
        for kept in self.keep:
            if hasattr(kept, "close"):
                kept.close()


def open_slice(path: Path) -> Streamed:
    """A rendered-slice file as a ``pyvips.Image`` streamed from disk, top to bottom, once.

    A ``.npy`` is a header and raw pixels; libvips reads it as an uncompressed TIFF (the
    same raw pixels behind a TIFF header made here, strips of 16 rows) through a custom
    source, so nothing is memory-mapped: ``rawload`` maps the file whole, and every page read
    stays in the process's RSS (a 100 MP stitch peaked at 900 MB that way).
    Sequential access: call ``open_slice`` again for a second pass."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(_PNG_MAGIC):
        # Only slices of older processors are PNG; PNG decodes top to bottom anyway.
        image = _vips().Image.new_from_file(str(path), access="sequential")
        return Streamed(image.colourspace("srgb")[0:3] if image.bands != 3 else image, [])
    if not head.startswith(_NPY_MAGIC):
        raise RenderedFormatError("a rendered slice must be a .npy array or a PNG")
    try:
        header = np.load(path, mmap_mode="r", allow_pickle=False)  # reads the header only
    except NPY_HEADER_FAILURES as exc:
        raise RenderedFormatError(f"not a readable .npy array: {exc}") from None
    shape, dtype, offset, fortran = header.shape, header.dtype, header.offset, np.isfortran(header)
    del header
    if dtype != np.uint8 or len(shape) != 3 or shape[2] != 3 or fortran:
        raise RenderedFormatError(f"expected (H, W, 3) uint8 C-order pixels, got {shape} {dtype}")
    stream = open(path, "rb")  # noqa: SIM115 -- closed by Streamed.close()
    source = _tiff_source(stream, offset, shape[1], shape[0])
    # libvips calls back into the Python source for as long as the image is read: keep it alive.
    return Streamed(_vips().Image.tiffload_source(source, access="sequential"), [source, stream])


_ROWS_PER_STRIP = 16


def _tiff_header(width: int, height: int) -> bytes:
    """A little-endian baseline TIFF header for uncompressed 8-bit RGB, strips of 16 rows,
    whose pixel data follows it directly: the bytes of a ``.npy`` body, unchanged."""
    strips = math.ceil(height / _ROWS_PER_STRIP)
    row = width * 3
    tags = 10
    ifd = 8
    bits_at = ifd + 2 + tags * 12 + 4
    offsets_at = bits_at + 6
    counts_at = offsets_at + 4 * strips
    data_at = counts_at + 4 * strips
    entries = [  # (tag, type, count, value or offset); types: 3 SHORT, 4 LONG
        (256, 4, 1, width),
        (257, 4, 1, height),
        (258, 3, 3, bits_at),
        (259, 3, 1, 1),
        (262, 3, 1, 2),
        (273, 4, strips, offsets_at if strips > 1 else data_at),
        (277, 3, 1, 3),
        (278, 4, 1, _ROWS_PER_STRIP),
        (279, 4, strips, counts_at if strips > 1 else row * height),
        (284, 3, 1, 1),
    ]
    out = bytearray(b"II*\0" + struct.pack("<I", ifd) + struct.pack("<H", tags))
    for tag, kind, count, value in entries:
        packed = struct.pack("<HH", value, 0) if kind == 3 and count == 1 else struct.pack("<I", value)
        out += struct.pack("<HHI", tag, kind, count) + packed
    out += struct.pack("<I", 0) + struct.pack("<HHH", 8, 8, 8)
    out += b"".join(struct.pack("<I", data_at + i * _ROWS_PER_STRIP * row) for i in range(strips))
    out += b"".join(struct.pack("<I", min(_ROWS_PER_STRIP, height - i * _ROWS_PER_STRIP) * row) for i in range(strips))
    assert len(out) == data_at
    return bytes(out)


def _tiff_source(stream: Any, offset: int, width: int, height: int) -> Any:
    """A seekable pyvips source: a TIFF header, then ``stream``'s bytes from ``offset``."""
    header = _tiff_header(width, height)
    total = len(header) + width * height * 3
    state = {"pos": 0}

    def read(size: int) -> bytes:
        pos = state["pos"]
        if pos < len(header):
            chunk = header[pos : pos + size]
        else:
            stream.seek(offset + pos - len(header))
            chunk = stream.read(min(size, total - pos))
        state["pos"] = pos + len(chunk)
        return chunk

    def seek(where: int, whence: int) -> int:
        state["pos"] = {0: 0, 1: state["pos"], 2: total}[whence] + where
        return state["pos"]

    source = _vips().SourceCustom()
    source.on_read(read)
    source.on_seek(seek)
    return source


def open_jpeg(path: Path) -> Any:
    """A JPEG file as a ``pyvips.Image`` decoded top to bottom as it is consumed."""
    return _vips().Image.new_from_file(str(path), access="sequential")


def join_slices(opened: Sequence[Streamed], *, width: int, height: int) -> Streamed:
    """The slices stacked top to bottom (lazily); ValueError when they do not add up."""
    if not opened:
        raise ValueError("nothing to stitch")
    slices = [s.image for s in opened]
    for i, image in enumerate(slices):
        if image.width != width or image.bands != 3:
            raise ValueError(
                f"slice {i} is {image.width}x{image.height}x{image.bands}, expected width {width}, 3 bands"
            )
    total = sum(image.height for image in slices)
    if total != height:
        raise ValueError(f"slices add up to {total} rows, expected {height}")
    joined = slices[0]
    for image in slices[1:]:  # join, not arrayjoin: arrayjoin pads every cell to the largest
        joined = joined.join(image, "vertical")
    return Streamed(joined, [kept for s in opened for kept in s.keep])


def save_jpeg(mosaic: Streamed | Any, out: Path | Callable[[bytes], object]) -> None:
    """The full-resolution JPEG, streamed to a file at ``out`` or to an ``out(bytes)`` callable
    as it is encoded (a ``BlobStore.open_writer``: the stitch uploads it while it encodes)."""
    image = mosaic.image if isinstance(mosaic, Streamed) else mosaic
    if not fits_jpeg(image.width, image.height):
        raise ValueError(f"{image.width}x{image.height} is over JPEG's {JPEG_MAX_SIDE} px a side")
    if isinstance(out, Path):
        image.jpegsave(str(out), **jpeg_options(image.width))
    else:
        stream_save(lambda target: image.jpegsave_target(target, **jpeg_options(image.width)), out)


def encode_jpeg(pixels: np.ndarray) -> bytes:
    """An ``(H, W, 3) uint8`` array as the same JPEG ``save_jpeg`` writes (deterministic)."""
    image = from_pixels(pixels)
    return bytes(image.jpegsave_buffer(**jpeg_options(image.width)))


def save_pyramid(mosaic: Streamed | Any, out: Path | Callable[[bytes], object]) -> None:
    """The Deep Zoom pyramid as one uncompressed zip (``mosaic.dzi`` inside): to the file
    ``out``, or streamed to ``out(bytes)`` as libvips makes it (a ``BlobWriter``'s ``write``)."""
    write_dzi_zip(mosaic.image if isinstance(mosaic, Streamed) else mosaic, out)


def save_pyramid_pixels(pixels: np.ndarray, out: Path | Callable[[bytes], object]) -> None:
    """The pyramid zip of an in-memory ``(H, W, 3) uint8`` array (a one-slice job's processor,
    the offline render): the same ``save_pyramid``, no file in between."""
    write_dzi_zip(from_pixels(pixels), out)


def from_pixels(pixels: np.ndarray) -> Any:
    """An ``(H, W, 3) uint8`` array as a ``pyvips.Image`` (sRGB), for the in-memory encoders."""
    return _vips().Image.new_from_array(np.ascontiguousarray(pixels, dtype=np.uint8), interpretation="srgb")
