"""A large image in a format with no reduced decode, decoded small by libvips.

Pillow decodes a PNG, WebP, TIFF or GIF whole before it can be reduced: a 100 MP PNG with alpha
took the indexer to 898 MiB, a flat 100 MP WebP of 179 KB to 1,567 MiB. libvips' ``thumbnail``
streams a PNG's or TIFF's rows through its shrink and asks libwebp for a scaled decode, so the
same photos cost about 150 MiB. It also turns the image by its EXIF orientation and brings its
colours to sRGB through its ICC profile, as ``mosaic.images.open_image`` does.

Only what ``open_image``'s checks have let through reaches here (``check_structure``, a format
of ``DECODER_FORMATS`` read by Pillow from the header, the pixel budget), and libvips is told to
refuse its loaders marked untrusted. Its operation cache is off in a process that calls this:
a cached thumbnail would hold its input's bytes.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from PIL import Image

from .errors import ImageDecodeError
from .images import to_rgb

__all__ = ["LIBVIPS_FORMATS", "decode_shrunk"]

LIBVIPS_FORMATS = frozenset({"PNG", "WEBP", "TIFF", "GIF"})  # Pillow's names; JPEG has its own reduced decode
_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


@functools.cache
def _vips() -> Any:
    import pyvips  # a dependency (pyvips[binary]), imported where it is used

    pyvips.block_untrusted_set(True)
    pyvips.cache_set_max(0)
    return pyvips


def decode_shrunk(data: bytes, longer: int) -> Image.Image:
    """The image upright, in sRGB, as RGB, its longer side ``longer`` (never enlarged)."""
    pyvips = _vips()
    try:
        # A square box: libvips fits the stored image before turning it upright.
        image = pyvips.Image.thumbnail_buffer(
            data,
            max(1, longer),
            height=max(1, longer),
            size="down",
            export_profile="srgb",  # also 8 bits a band, three (or four with alpha), whatever came in
            # As Pillow: a damaged file is refused, not padded. "truncated" is not enough: a TIFF
            # cut after its header (strips missing) came out with its lower half black.
            option_string="fail_on=error",
        )
        pixels = np.asarray(image.numpy(), dtype=np.uint8)
    except pyvips.Error as exc:
        raise ImageDecodeError(f"cannot decode image: {_loader_said(str(exc))}") from None
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    mode = _MODES.get(pixels.shape[2])
    if mode is None:
        raise ImageDecodeError(f"cannot decode image: {pixels.shape[2]} bands")
    return to_rgb(Image.fromarray(pixels[:, :, 0] if mode == "L" else pixels, mode))


def _loader_said(message: str) -> str:
    """The loader's own line of a libvips error ("unable to call thumbnail_buffer" first, then
    e.g. "gifload_buffer: Unexpected end of GIF source data"), else its first line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[1] if len(lines) > 1 else (lines[0] if lines else "libvips failed")
