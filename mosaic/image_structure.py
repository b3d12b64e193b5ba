"""What opening an image will cost, bounded before Pillow sees a byte of it.

A pixel limit read from the header does not bound *opening* a file: Pillow builds Python
objects for its header while it reads it, one per JPEG segment, per TIFF strip or tag value,
per PNG text chunk, and skips JPEG padding one byte at a time. An 8 x 8 JPEG padded to 14 MB
with empty segments took 8 s and 500 MB just to open; a 64 x 64 TIFF listing a million strips
(20 KB inside a zip) 3 s and 285 MB. ``check_structure(data)`` walks the same structure with
slices and ``bytes.find`` (C speed, no objects kept), stops as soon as a count passes its
limit, and raises ``ImageStructureError`` (an ``ImageDecodeError``), so what a hostile file
can cost is a constant. The limits sit far above what cameras, phones and editors write:

- JPEG: at most ``MAX_JPEG_SEGMENTS`` markers before the first scan (a phone's photo has
  about 20; ICC and extended XMP split into 64 KB segments add a few hundred at most), at most
  ``MAX_JPEG_SKIPPED_BYTES`` bytes of fill and junk between them, at most ``MAX_JPEG_SCANS``
  scans in the file (a progressive JPEG has about 10; each scan is a pass over the image);
- TIFF (and BigTIFF): at most ``MAX_TIFF_ENTRIES`` tags in the first IFD, at most
  ``MAX_TIFF_STRIPS`` strips or tiles, and no more strips than the image has rows, at most
  ``MAX_TIFF_VALUES`` numeric values in the IFD (byte, text and undefined tags stay bytes);
- PNG: at most ``MAX_PNG_CHUNKS`` chunks up to IEND and ``MAX_PNG_TEXT_CHUNKS`` text chunks;
- GIF: at most ``MAX_GIF_BLOCKS`` extension sub-blocks before the first image.

Any other content (WebP and BMP, parsed by C code from a fixed header) passes unchecked; a
file that is truncated or malformed is left to the decoder, which refuses it cheaply.
"""

from __future__ import annotations

import re
import struct

from .errors import ImageDecodeError

__all__ = [
    "MAX_GIF_BLOCKS",
    "MAX_JPEG_SCANS",
    "MAX_JPEG_SEGMENTS",
    "MAX_JPEG_SKIPPED_BYTES",
    "MAX_PNG_CHUNKS",
    "MAX_PNG_TEXT_CHUNKS",
    "MAX_TIFF_ENTRIES",
    "MAX_TIFF_STRIPS",
    "MAX_TIFF_VALUES",
    "ImageStructureError",
    "check_structure",
]

MAX_JPEG_SEGMENTS = 1024
MAX_JPEG_SKIPPED_BYTES = 64 * 1024
MAX_JPEG_SCANS = 256
MAX_TIFF_ENTRIES = 1024
MAX_TIFF_STRIPS = 65_536
MAX_TIFF_VALUES = 1 << 19
MAX_PNG_CHUNKS = 65_536
MAX_PNG_TEXT_CHUNKS = 1024
MAX_GIF_BLOCKS = 8192


class ImageStructureError(ImageDecodeError):
    """The file's structure would cost more to open than any real photo's: refused unopened."""


def check_structure(data: bytes) -> None:
    """Raise ``ImageStructureError`` when opening ``data`` would cost more than the limits allow."""
    head = bytes(data[:8])
    if head[:3] == b"\xff\xd8\xff":
        _check_jpeg(data)
    elif head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        _check_tiff(data)
    elif head == b"\x89PNG\r\n\x1a\n":
        _check_png(data)
    elif head[:6] in (b"GIF87a", b"GIF89a"):
        _check_gif(data)


def _refuse(message: str) -> ImageStructureError:
    return ImageStructureError(f"the image's structure is not that of a photo: {message}")


# -- JPEG -------------------------------------------------------------------------------------

_FILL = re.compile(rb"\xff+")
# Markers without a length (as Pillow reads them): JPG, RSTn, SOI, EOI, JPGn.
_BARE = frozenset([0xC8, *range(0xD0, 0xDA), *range(0xF0, 0xFE)])
_SOS = 0xDA


def _check_jpeg(data: bytes) -> None:
    """Walk the markers as Pillow's ``JpegImageFile._open`` does, up to the first scan."""
    if data.count(b"\xff\xda") > MAX_JPEG_SCANS:  # entropy-coded data never holds FF DA (stuffed)
        raise _refuse(f"more than {MAX_JPEG_SCANS} scans")
    size, pos, segments, skipped = len(data), 2, 0, 0
    while pos < size:
        if data[pos] != 0xFF:  # junk, which Pillow reads a byte at a time
            found = data.find(b"\xff", pos)
            skipped += (size if found < 0 else found) - pos
            if skipped > MAX_JPEG_SKIPPED_BYTES:
                raise _refuse(f"more than {MAX_JPEG_SKIPPED_BYTES:,} bytes of padding between its segments")
            if found < 0:
                return
            pos = found
        end = _FILL.match(data, pos).end()  # type: ignore[union-attr]  # data[pos] is 0xFF
        skipped += end - pos - 1  # fill bytes before the marker, also read one at a time
        if skipped > MAX_JPEG_SKIPPED_BYTES:
            raise _refuse(f"more than {MAX_JPEG_SKIPPED_BYTES:,} bytes of padding between its segments")
        if end >= size:
            return
        marker, pos = data[end], end + 1
        if marker == 0x00:
            skipped += 1
            continue
        segments += 1
        if segments > MAX_JPEG_SEGMENTS:
            raise _refuse(f"more than {MAX_JPEG_SEGMENTS:,} segments before its pixels")
        if marker == _SOS or marker < 0xC0:  # the scan (libjpeg's from here), or no marker: Pillow stops
            return
        if marker not in _BARE:
            if pos + 2 > size:
                return
            pos += max(2, int.from_bytes(data[pos : pos + 2], "big"))


# -- TIFF -------------------------------------------------------------------------------------

# TIFF field types -> bytes per value; the ones Pillow keeps as bytes (BYTE, ASCII, UNDEFINED)
# cost nothing per value and are not counted.
_TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4, 16: 8, 17: 8, 18: 8}
_AS_BYTES = frozenset({1, 2, 7})
_IMAGE_LENGTH, _SAMPLES_PER_PIXEL = 257, 277
_STRIP_TAGS = frozenset({273, 279})  # StripOffsets, StripByteCounts
_TILE_TAGS = frozenset({324, 325})  # TileOffsets, TileByteCounts


def _check_tiff(data: bytes) -> None:
    """Count the first IFD's tags, numeric values and strips (what Pillow reads when it opens)."""
    endian = "<" if data[:2] == b"II" else ">"
    big = data[2:4] in (b"+\x00", b"\x00+")
    try:
        if big:
            (offset,) = struct.unpack_from(endian + "Q", data, 8)
            (entries,) = struct.unpack_from(endian + "Q", data, offset)
            entry_format, entry_size, first, field = endian + "HHQ", 20, offset + 8, 12
        else:
            (offset,) = struct.unpack_from(endian + "I", data, 4)
            (entries,) = struct.unpack_from(endian + "H", data, offset)
            entry_format, entry_size, first, field = endian + "HHI", 12, offset + 2, 8
    except struct.error:
        return  # no IFD where the header says: the decoder refuses it
    if entries > MAX_TIFF_ENTRIES:
        raise _refuse(f"{entries:,} tags in its first directory (at most {MAX_TIFF_ENTRIES:,})")
    values, strips, tiles, small = 0, 0, 0, {}
    for index in range(entries):
        at = first + index * entry_size
        try:
            tag, kind, count = struct.unpack_from(entry_format, data, at)
            if count == 1 and kind in (3, 4):  # a SHORT or LONG kept in the entry itself
                small[tag] = struct.unpack_from(endian + ("H" if kind == 3 else "I"), data, at + field)[0]
        except struct.error:
            return
        if kind not in _TYPE_SIZES:
            continue  # Pillow skips an unknown type
        if kind not in _AS_BYTES:
            values += count
        if tag in _STRIP_TAGS:
            strips = max(strips, count)
        elif tag in _TILE_TAGS:
            tiles = max(tiles, count)
    if max(strips, tiles) > MAX_TIFF_STRIPS:
        raise _refuse(f"{max(strips, tiles):,} strips or tiles (at most {MAX_TIFF_STRIPS:,})")
    if values > MAX_TIFF_VALUES:
        raise _refuse(f"{values:,} numbers in its first directory (at most {MAX_TIFF_VALUES:,})")
    rows = small.get(_IMAGE_LENGTH)
    if strips and rows is not None and strips > max(1, rows) * max(1, small.get(_SAMPLES_PER_PIXEL, 1)):
        raise _refuse(f"{strips:,} strips for {rows:,} rows")


# -- PNG --------------------------------------------------------------------------------------

_TEXT_CHUNKS = frozenset({b"tEXt", b"zTXt", b"iTXt"})


def _check_png(data: bytes) -> None:
    """Count the chunks up to IEND (Pillow reads each, and keeps every text chunk)."""
    pos, size, chunks, texts = 8, len(data), 0, 0
    while pos + 8 <= size:
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = bytes(data[pos + 4 : pos + 8])
        chunks += 1
        if chunks > MAX_PNG_CHUNKS:
            raise _refuse(f"more than {MAX_PNG_CHUNKS:,} chunks")
        if kind in _TEXT_CHUNKS:
            texts += 1
            if texts > MAX_PNG_TEXT_CHUNKS:
                raise _refuse(f"more than {MAX_PNG_TEXT_CHUNKS:,} text chunks")
        if kind == b"IEND":
            return
        pos += 12 + length


# -- GIF --------------------------------------------------------------------------------------


def _check_gif(data: bytes) -> None:
    """Count the extension sub-blocks before the first image (Pillow reads each in Python)."""
    size = len(data)
    if size < 13:
        return
    flags = data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    blocks = 0
    while pos < size and data[pos] == 0x21:  # an extension: label, then sub-blocks up to an empty one
        pos += 2
        while pos < size:
            length = data[pos]
            pos += 1 + length
            if length == 0:
                break
            blocks += 1
            if blocks > MAX_GIF_BLOCKS:
                raise _refuse(f"more than {MAX_GIF_BLOCKS:,} extension blocks before its image")
