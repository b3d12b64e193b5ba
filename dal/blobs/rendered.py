"""Rendered slices in storage: their blob names and their format, for every role that reads them.

A processor writes the mosaic of its band to ``sliceresponse/<request_id>/<seq>.npy``: raw
``(H, W, 3) uint8`` pixels in NumPy's ``.npy`` format. A rendered slice is as big as its part
of the mosaic (a 40 MP job is 120 MB of pixels); PNG cost seconds of zlib on both sides for
photo tiles that barely compress, ``.npy`` is a memory copy, and lossless all the same.

Blob names live in ``dal.blobs.names`` (re-exported here). Versioned by name and by magic bytes: slices written as ``<seq>.png`` by processors of an
older release (in flight across an upgrade) are still found (``slice_blob_candidates``) and
read (``decode_rendered``). A job of one slice has no rendered slice at all: its processor
writes the final ``imageoutput/<request_id>.jpg`` itself.

Here in ``dal`` because three layers read these blobs: the controller stitches them, the
web app previews them, tests compare them.
"""

from __future__ import annotations

import io
from tokenize import TokenError

import numpy as np

from dal.errors import RenderedFormatError

__all__ = [
    "NPY_HEADER_FAILURES",
    "decode_rendered",
    "encode_rendered",
]

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_NPY_MAGIC = b"\x93NUMPY"
# What ``np.load`` raises on a damaged ``.npy``: its header is a Python literal, so a broken one
# is a SyntaxError or a TokenError (an unclosed dict), not only a ValueError.
NPY_HEADER_FAILURES = (ValueError, OSError, EOFError, SyntaxError, TokenError)


def encode_rendered(pixels: np.ndarray) -> bytes:
    """A rendered slice as a ``.npy`` array (no compression: a copy, not seconds of zlib)."""
    out = io.BytesIO()
    np.save(out, np.ascontiguousarray(pixels, dtype=np.uint8), allow_pickle=False)
    return out.getvalue()


def decode_rendered(data: bytes) -> np.ndarray:
    """The pixels of a rendered slice, ``.npy`` or (written by an older processor) PNG."""
    if data.startswith(_PNG_MAGIC):
        from PIL import Image

        try:
            with Image.open(io.BytesIO(data), formats=("PNG",)) as image:  # no other decoder tried
                return np.asarray(image.convert("RGB"))
        except Exception as exc:  # Pillow raises many types for broken files
            raise RenderedFormatError(f"not a readable PNG: {exc}") from None
    if not data.startswith(_NPY_MAGIC):
        raise RenderedFormatError("a rendered slice must be a .npy array or a PNG")
    try:
        pixels = np.load(io.BytesIO(data), allow_pickle=False)
    except NPY_HEADER_FAILURES as exc:
        raise RenderedFormatError(f"not a readable .npy array: {exc}") from None
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3:
        raise RenderedFormatError(f"expected (H, W, 3) uint8 pixels, got {pixels.shape} {pixels.dtype}")
    return pixels
