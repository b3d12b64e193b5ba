"""Decoding uploaded and library images into RGB, the one way every role does it.

Every image that enters the application (a target photo, a tile, a slice) goes through
``open_image``: it refuses oversized images before decoding them (decompression bombs),
applies the EXIF orientation (phones store portrait photos sideways), converts the colours of
an embedded ICC profile other than sRGB (an iPhone's Display P3, a camera's Adobe RGB, a
CMYK press profile) to sRGB, flattens transparency onto white and maps every Pillow mode —
palette, grey, 16-bit, CMYK — to 8-bit RGB. Anything
Pillow cannot decode, including truncated files, raises ``ImageDecodeError``.
"""

from __future__ import annotations

import io
import struct
import warnings

import numpy as np
from PIL import Image, ImageCms, ImageOps, UnidentifiedImageError

from .errors import ImageDecodeError
from .limits import DEFAULT_MAX_INPUT_PIXELS as DEFAULT_MAX_PIXELS

_ORIENTATION_TAG = 0x0112
_SIDEWAYS = {5, 6, 7, 8}
_TRANSPOSE = {  # EXIF orientation -> the turn that shows it upright (as Pillow's exif_transpose)
    2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}  # fmt: skip
_SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
_ICC_MODES = {"RGB": "RGB", "RGBA": "RGBA", "CMYK": "RGB"}  # mode -> mode after the conversion


def open_image(
    data: bytes,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    min_size: tuple[int, int] | None = None,
) -> Image.Image:
    """Decode ``data`` into an upright RGB image.

    ``min_size`` (width, height of the upright image) lets a JPEG decode at a reduced scale
    (libjpeg's DCT scaling) when the caller needs no more than that: several times faster
    for a 12 MP photo that is about to be reduced to a few pixels per cell.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            if image.width * image.height > max_pixels:
                raise ImageDecodeError(
                    f"image of {image.width}x{image.height} pixels is larger than the "
                    f"maximum of {max_pixels:,} pixels"
                )
            if min_size is not None and image.format == "JPEG":
                width, height = min_size
                if image.getexif().get(_ORIENTATION_TAG) in _SIDEWAYS:
                    width, height = height, width
                image.draft("RGB", (max(1, width), max(1, height)))
            icc = image.info.get("icc_profile")
            image = _upright(image)
            image.load()
            return to_rgb(_to_srgb(image, icc))
    except ImageDecodeError:
        raise
    except UnidentifiedImageError:
        raise ImageDecodeError("not an image Pillow can identify") from None
    except (OSError, SyntaxError, ValueError, TypeError, EOFError, IndexError, KeyError,
            struct.error, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageDecodeError(f"cannot decode image: {exc}") from exc


def _upright(image: Image.Image) -> Image.Image:
    """The image turned as its EXIF orientation says.

    ``ImageOps.exif_transpose`` also rewrites the copy's EXIF, and raises on a tag it cannot
    rewrite (a resolution stored as text by some editor): such a photo passes the web app's
    checks and was then failed by the controller. Its orientation alone is enough to turn it.
    """
    try:
        return ImageOps.exif_transpose(image)
    except (TypeError, ValueError, KeyError, IndexError, struct.error):
        method = _TRANSPOSE.get(image.getexif().get(_ORIENTATION_TAG))
        return image if method is None else image.transpose(method)


def _to_srgb(image: Image.Image, icc: bytes | None) -> Image.Image:
    """The pixels in sRGB when an ICC profile says they are in another colour space.

    Every signature and tile is computed as sRGB: Display P3 or Adobe RGB values read as
    sRGB come out dull (Adobe RGB's pure green reads as olive, (0, 200, 0) as (113, 199, 48)).
    An sRGB profile, a mode the conversion does not cover (grey, 16-bit) or a profile LittleCMS
    cannot read leaves the pixels as they are, as a browser would show them.
    """
    if not icc or image.mode not in _ICC_MODES:
        return image
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        if "srgb" in ImageCms.getProfileDescription(profile).lower():
            return image  # already sRGB: skip a transform of every pixel that would change nothing
        return ImageCms.profileToProfile(image, profile, _SRGB, outputMode=_ICC_MODES[image.mode])
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
        return image


def probe_size(data: bytes) -> tuple[int, int]:
    """The upright (EXIF-oriented) size of an image from its header, without decoding pixels."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if image.getexif().get(_ORIENTATION_TAG) in _SIDEWAYS:
                width, height = height, width
            return width, height
    except UnidentifiedImageError:
        raise ImageDecodeError("not an image Pillow can identify") from None
    except (OSError, SyntaxError, ValueError, struct.error) as exc:
        raise ImageDecodeError(f"cannot read image header: {exc}") from exc


def to_rgb(image: Image.Image) -> Image.Image:
    """Map any Pillow mode to 8-bit RGB; transparent areas become white, wide ranges are scaled."""
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
        if mode == "F" and values.max(initial=0) <= 1.0:
            top = 1.0
        grey = np.clip(np.rint(values * (255.0 / top)), 0, 255).astype(np.uint8)
        return Image.fromarray(grey).convert("RGB")
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif mode in ("LA", "PA", "La", "RGBa"):
        image = image.convert("RGBA")
    if image.mode == "RGBA":
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.getchannel("A"))
        return background
    return image.convert("RGB")
