"""Small files whose *opening* is expensive: what a header-only size check lets through.

Each declares a tiny image (8 x 8 or 64 x 64 pixels), so any pixel budget admits it, and then
makes Pillow build one Python object per element of its header while it merely opens it:

- ``padded_jpeg``: an 8 x 8 JPEG with millions of empty APP segments before its scan (Pillow
  keeps one entry per segment in ``applist``);
- ``many_strips_tiff``: a 64 x 64 TIFF whose first IFD lists a million strips (one tile tuple
  each, before a pixel is read); it compresses to almost nothing inside a zip;
- ``many_text_png``: a PNG with a hundred thousand text chunks of distinct keys.

And one whose *decoding* fails in a way Pillow does not call an OSError: ``damaged_avif``, a
small AVIF whose AV1 payload is zeroed, inverted or cut short (libavif raises RuntimeError).

The same builders serve the web tests (a job photo, a library zip) and the worker tests.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import numpy as np
from PIL import Image

__all__ = ["avif_cut_in_half", "damaged_avif", "many_strips_tiff", "many_text_png", "padded_jpeg", "tiff_zip"]


def padded_jpeg(total_bytes: int = 14 * 1024 * 1024, *, marker: int = 0xE1) -> bytes:
    """An 8 x 8 JPEG of about ``total_bytes``: SOI, then empty APPn segments (``FF En 00 02``), then the rest."""
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 40, 40)).save(out, "JPEG", quality=90)
    jpeg = out.getvalue()
    empty = bytes((0xFF, marker, 0x00, 0x02))
    count = max(1, (total_bytes - len(jpeg)) // len(empty))
    return jpeg[:2] + empty * count + jpeg[2:]


def many_strips_tiff(strips: int = 1_000_000, side: int = 64, *, height: int | None = None) -> bytes:
    """A ``side`` x ``height`` (default ``side``) 8-bit grey TIFF (little-endian) whose first IFD
    lists ``strips`` strips of one row.

    Every strip points at the same row of pixels, so the file is regular and tiny once
    deflated, and a reader that trusts the strip count builds ``strips`` of everything."""
    pixels = bytes(i % 256 for i in range(side))
    entries = 9
    ifd_at = 8
    ifd_size = 2 + entries * 12 + 4
    offsets_at = ifd_at + ifd_size
    counts_at = offsets_at + 4 * strips
    pixels_at = counts_at + 4 * strips

    def entry(tag: int, kind: int, count: int, value: int) -> bytes:
        if kind == 3 and count == 1:
            return struct.pack("<HHIHH", tag, kind, count, value, 0)
        return struct.pack("<HHII", tag, kind, count, value)

    ifd = struct.pack("<H", entries) + b"".join(
        [
            entry(256, 3, 1, side),  # ImageWidth
            entry(257, 4, 1, side if height is None else height),  # ImageLength
            entry(258, 3, 1, 8),  # BitsPerSample
            entry(259, 3, 1, 1),  # Compression: none
            entry(262, 3, 1, 1),  # Photometric: black is zero
            entry(273, 4, strips, offsets_at),  # StripOffsets
            entry(277, 3, 1, 1),  # SamplesPerPixel
            entry(278, 3, 1, 1),  # RowsPerStrip
            entry(279, 4, strips, counts_at),  # StripByteCounts
        ]
    )
    ifd += struct.pack("<I", 0)
    offsets = struct.pack("<I", pixels_at) * strips
    counts = struct.pack("<I", side) * strips
    return b"II*\x00" + struct.pack("<I", ifd_at) + ifd + offsets + counts + pixels


def tiff_zip(count: int = 4, strips: int = 1_000_000) -> bytes:
    """A zip of ``count`` such TIFFs, deflated (about 20 KB each for a million strips)."""
    buffer = io.BytesIO()
    tiff = many_strips_tiff(strips)
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for i in range(count):
            archive.writestr(f"strips-{i}.tif", tiff)
    return buffer.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def many_text_png(chunks: int = 100_000) -> bytes:
    """An 8 x 8 PNG with ``chunks`` tEXt chunks of distinct keys before its pixels."""
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (40, 200, 40)).save(out, "PNG")
    png = out.getvalue()
    ihdr_end = 8 + 8 + 13 + 4  # signature, then IHDR (length, type, 13 bytes, CRC)
    text = b"".join(_chunk(b"tEXt", b"k%d\x00v" % i) for i in range(chunks))
    return png[:ihdr_end] + text + png[ihdr_end:]


def avif_cut_in_half() -> bytes:
    """The first half of a 400 x 300 AVIF photo, as an interrupted copy leaves it: its items lie
    past the end, so libavif refuses the container itself ("BMFF parsing failed") and Pillow
    knows no format for the bytes, where ``damaged_avif("cut-short")`` fails only as it decodes."""
    rng = np.random.default_rng(3)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(out, "AVIF", quality=60)
    return out.getvalue()[: out.tell() // 2]


def damaged_avif(how: str = "zeroed") -> bytes:
    """A good 96 x 64 AVIF whose ``mdat`` payload is ``zeroed``, ``inverted`` or ``cut-short``:
    what a mangled download or a broken exporter leaves."""
    out = io.BytesIO()
    Image.linear_gradient("L").resize((96, 64)).convert("RGB").save(out, "AVIF")
    data = out.getvalue()
    start = data.index(b"mdat") + 4
    payload = data[start:]
    damaged = {
        "zeroed": bytes(len(payload)),
        "inverted": bytes(255 - b for b in payload),
        "cut-short": payload[: len(payload) // 2],
    }[how]
    return data[:start] + damaged
