"""The full-size JPEG of a giant mosaic as band segments, concatenated instead of re-encoded.

Every JPEG the project writes carries a restart marker after each row of MCUs
(``workers.imaging.stitching.jpeg_options``: ``restart_interval`` = MCUs per row). At a restart the
encoder pads to a byte, resets its DC predictions and writes ``RSTn`` (n = 0..7, cycling);
the tables are fixed (quality 90, the standard Huffman tables: no optimised coding). So the
scan of a band of rows that starts on a multiple of ``mosaic.pieces.JPEG_ROWS`` (8 MCU rows)
is, byte for byte, that part of the whole image's scan, and the whole image's JPEG is:

    header (SOI .. SOS, the full height in SOF) + scan(band 0) + RST7 + scan(band 1) + RST7 + ... + EOI

A processor encodes its band (``encode_segment``: its header and its scan with the marker
that follows it); the controller writes one header with the full height (``full_header``)
and commits the bands' staged bytes after it (``workers.controller.assembly``). Tests check the result
equals a single encode byte for byte and decodes in Pillow and libvips.
"""

from __future__ import annotations

import numpy as np

from workers.imaging.stitching import from_pixels, jpeg_options

__all__ = ["encode_segment", "full_header", "split_jpeg"]

_SOS, _SOF0, _EOI, _RST7 = 0xDA, 0xC0, b"\xff\xd9", b"\xff\xd7"


def split_jpeg(jpeg: bytes) -> tuple[bytes, bytes]:
    """(header through SOS, entropy-coded scan without EOI) of a baseline single-scan JPEG."""
    if jpeg[:2] != b"\xff\xd8" or jpeg[-2:] != _EOI:
        raise ValueError("not a complete JPEG")
    at = 2
    while at + 4 <= len(jpeg):
        if jpeg[at] != 0xFF:
            raise ValueError(f"no marker at byte {at}")
        marker, length = jpeg[at + 1], int.from_bytes(jpeg[at + 2 : at + 4], "big")
        if marker == _SOS:
            return jpeg[: at + 2 + length], jpeg[at + 2 + length : -2]
        at += 2 + length
    raise ValueError("no start of scan")


def encode_segment(pixels: np.ndarray, *, last: bool) -> tuple[bytes, bytes]:
    """A band's (header, scan + the marker after it: RST7, or EOI for the last band)."""
    image = from_pixels(pixels)
    header, scan = split_jpeg(bytes(image.jpegsave_buffer(**jpeg_options(image.width))))
    return header, scan + (_EOI if last else _RST7)


def full_header(header: bytes, height: int) -> bytes:
    """A band's header with the whole image's height in its frame header (SOF0)."""
    at = 2
    while at + 4 <= len(header):
        marker, length = header[at + 1], int.from_bytes(header[at + 2 : at + 4], "big")
        if marker == _SOF0:
            return header[: at + 5] + height.to_bytes(2, "big") + header[at + 7 :]
        at += 2 + length
    raise ValueError("no baseline frame header (SOF0)")
