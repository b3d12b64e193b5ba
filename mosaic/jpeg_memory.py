"""What libjpeg holds in memory to decode a progressive JPEG, read from its frame header.

A baseline JPEG is decoded a row of blocks at a time, so a reduced decode (``draft``) costs
memory in proportion to its output. A progressive one is not: its scans refine every block of
the image in turn, so libjpeg keeps every DCT coefficient of the whole image (2 bytes each,
each component at its own sampling) whatever the scale asked for. A 100 MP progressive photo
with full-resolution colour (4:4:4) holds 573 MiB that way, a flat-coloured one in a file of a
few hundred KB. ``progressive_frame`` reads that figure from the header, before
anything is decoded, so a caller can refuse the photo or decode it alone.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProgressiveFrame", "progressive_frame"]

_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_BARE = frozenset([0x01, *range(0xD0, 0xD8)])  # TEM and RSTn: no length
_SOS = 0xDA
_COEFFICIENT_BYTES = 64 * 2  # one 8 x 8 block of 16-bit coefficients


@dataclass(frozen=True)
class ProgressiveFrame:
    width: int
    height: int
    coefficient_bytes: int  # what libjpeg allocates for the image's coefficients


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def progressive_frame(data: bytes) -> ProgressiveFrame | None:
    """The frame of a progressive JPEG, or None for a baseline JPEG or anything else (a file
    whose header cannot be read is left to the decoder)."""
    if data[:2] != b"\xff\xd8":
        return None
    pos, size = 2, len(data)
    while pos + 4 <= size:
        if data[pos] != 0xFF:  # junk between segments (check_structure bounds how much)
            pos = data.find(b"\xff", pos)
            if pos < 0:
                return None
            continue
        marker = data[pos + 1]
        if marker == 0xFF:  # fill
            pos += 1
            continue
        if marker in _BARE or marker == 0x00:
            pos += 2
            continue
        if marker == _SOS:
            return None  # a scan before any frame: not a JPEG libjpeg would decode
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if marker in _SOF:
            return _frame(data[pos + 4 : pos + 2 + length]) if marker in _PROGRESSIVE else None
        pos += 2 + max(2, length)
    return None


def _frame(segment: bytes) -> ProgressiveFrame | None:
    if len(segment) < 6:
        return None
    height, width, count = int.from_bytes(segment[1:3], "big"), int.from_bytes(segment[3:5], "big"), segment[5]
    sampling = [segment[7 + 3 * i] for i in range(count) if 7 + 3 * i < len(segment)]
    if not sampling or not width or not height:
        return None
    factors = [(max(1, s >> 4), max(1, s & 15)) for s in sampling]
    h_max, v_max = max(h for h, _ in factors), max(v for _, v in factors)
    total = 0
    for h, v in factors:  # libjpeg's jdcoefct: blocks of the component, rounded up to its sampling
        across = _ceil_div(_ceil_div(width * h, h_max), 8)
        down = _ceil_div(_ceil_div(height * v, v_max), 8)
        total += _ceil_div(across, h) * h * _ceil_div(down, v) * v * _COEFFICIENT_BYTES
    return ProgressiveFrame(width=width, height=height, coefficient_bytes=total)
