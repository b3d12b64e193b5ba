"""Decoding uploaded and library images into RGB, the one way every role does it.

Every image that enters the application (a target photo, a tile, a slice) goes through
``open_image``: it refuses a file whose header alone would be costly to read before Pillow
opens it (``mosaic.image_structure``), oversized images before decoding them (decompression bombs),
applies the EXIF orientation (phones store portrait photos sideways), converts the colours of
an embedded ICC profile other than sRGB (an iPhone's Display P3, a camera's Adobe RGB, a
CMYK press profile) to sRGB, or of an HEIF photo's CICP primaries when it has no profile (the
``nclx`` colour box some Android phones write: ``to_srgb``), flattens transparency onto white and maps every Pillow mode —
palette, grey, 16-bit, CMYK — to 8-bit RGB. Only the
formats of ``DECODER_FORMATS`` are opened; anything else, and anything Pillow cannot decode
(truncated files included), raises ``ImageDecodeError``.
"""

from __future__ import annotations

import functools
import io
import re
import struct
import warnings
from pathlib import Path
from typing import cast

import numpy as np
from PIL import Image, ImageCms, ImageOps, UnidentifiedImageError

from .errors import ImageDecodeError, UnknownImageFormat
from .image_structure import check_structure
from .limits import DEFAULT_MAX_INPUT_PIXELS as DEFAULT_MAX_PIXELS
from .signatures import linear_to_srgb, srgb_to_linear

# The one decoder allowlist (photos, library files, slices): Pillow tries no other plugin, so an
# EPS never reaches Ghostscript and an SGI, PSD or ICO file is "not an image". (A JPEG with
# more pictures after the first, a phone's depth map, opens through JPEG as Pillow's MPO.)
# HEIF is an iPhone's photo (HEIC), read by pillow-heif's opener; AVIF by Pillow's own libavif.
DECODER_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF", "HEIF", "AVIF")
_LABELS = {"WEBP": "WebP", "HEIF": "HEIC"}


def format_names(formats: tuple[str, ...]) -> str:
    """``("JPEG", "PNG", "WEBP")`` as a person reads it: "JPEG, PNG or WebP"."""
    labels = [_LABELS.get(name, name) for name in formats]
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} or {labels[-1]}"


FORMAT_NAMES = format_names(DECODER_FORMATS)


@functools.cache
def _register_heif() -> None:
    from pillow_heif import register_heif_opener

    register_heif_opener()  # it applies the file's rotation and leaves EXIF orientation at 1


# ISO base media files (the "ftyp" box's brands): HEVC pictures (HEIC) go to pillow-heif, AV1 ones
# (AVIF) to Pillow's AVIF plugin; a bare "mif1" (HEIF of no declared codec) to pillow-heif, which says why.
HEVC_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx"})
AV1_BRANDS = frozenset({b"avif", b"avis"})
HEIF_BRANDS = frozenset({b"mif1", b"msf1"}) | HEVC_BRANDS | AV1_BRANDS
# An iPhone's HEIC (its camera's default) carries a 320 x 240 thumbnail, decoded in about 1/100
# of the photo's time (a 12 MP HEVC picture costs about a second of CPU, and HEVC has no reduced
# decode). That is ample for a 64 px tile and the hash; faces are then searched for (``mosaic.subject_crop``) from a fifth
# of the shorter side up instead of an eighth.
HEIF_THUMBNAIL_SIDE = 240


def heif_brands(data: bytes) -> frozenset[bytes]:
    """The HEIF brands among an ISO base media file's major and compatible brands (its ``ftyp``
    box), else none (not such a file, or another kind of it: an MP4 video)."""
    if data[4:8] != b"ftyp":
        return frozenset()
    end = min(int.from_bytes(data[:4], "big"), len(data), 4096)
    return frozenset([data[8:12], *(data[at : at + 4] for at in range(16, end - 3, 4))]) & HEIF_BRANDS


def _unidentified(data: bytes, formats: tuple[str, ...]) -> ImageDecodeError:
    """No plugin of ``formats`` knows ``data``. A file whose container says HEIF or AVIF is one
    its decoder could not read (libavif: "BMFF parsing failed"), not an unknown format."""
    brands = heif_brands(data)
    if brands:
        kind = "AVIF" if brands & AV1_BRANDS and not brands & HEVC_BRANDS else "HEIF"
        return ImageDecodeError(f"cannot decode {kind} image: the file is damaged or cut short")
    return UnknownImageFormat(f"not an image in an accepted format ({format_names(formats)})")


def pillow_formats(data: bytes, formats: tuple[str, ...] = DECODER_FORMATS) -> tuple[str, ...]:
    """``formats`` as ``Image.open`` may be given them for ``data``: pillow-heif's opener (0.2 s to
    import) is registered only when the bytes are an ISO base media file (HEIC, AVIF), and a
    format this Pillow has no plugin for is left out (Pillow raises KeyError for it)."""
    if "HEIF" in formats and data[4:8] == b"ftyp":
        _register_heif()
    Image.init()  # every plugin Pillow has, as Image.open itself would load them
    return tuple(name for name in formats if name in Image.OPEN)


_ORIENTATION_TAG = 0x0112
_SIDEWAYS = {5, 6, 7, 8}
_TRANSPOSE = {  # EXIF orientation -> the turn that shows it upright (as Pillow's exif_transpose)
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
_WIDE_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")
_SIXTEEN_BIT = np.rint(np.arange(65536) * (255.0 / 65535.0)).astype(np.uint8)  # 16-bit -> 8-bit
_BAND_PIXELS = 1 << 20
_ICC_MODES = {"RGB": "RGB", "RGBA": "RGBA", "CMYK": "RGB"}  # mode -> mode after the conversion


# What Pillow's plugins raise on a damaged file, header or pixels: a refusal of the file, never a
# server error. libavif's failures surface as RuntimeError ("Failed to decode frame 0: Decoding of
# color planes failed", "Missing or empty image item"; found by mutating AVIF files).
DECODE_FAILURES = (
    OSError,
    SyntaxError,
    ValueError,
    TypeError,
    EOFError,
    IndexError,
    KeyError,
    RuntimeError,
    struct.error,
)


def check_pixels(width: int, height: int, max_pixels: int) -> None:
    """``ImageDecodeError`` for an image of more than ``max_pixels``, said before decoding it."""
    if width * height > max_pixels:
        raise ImageDecodeError(f"image of {width}x{height} pixels is larger than the maximum of {max_pixels:,} pixels")


def decoder_said(exc: BaseException) -> str:
    """A decoder's failure as a person reads it: a file that ends before its image does (Pillow:
    "image file is truncated (15 bytes not processed)", "Truncated File Read") says so in plain
    words; anything else is the decoder's message."""
    said = str(exc).strip() or type(exc).__name__
    return "the file is cut short: damaged, or not copied whole" if "truncated" in said.lower() else said


# Pillow refuses, as it opens the header, an image of more than twice its MAX_IMAGE_PIXELS, in
# its own words ("Image size (N pixels) exceeds limit of M pixels, could be decompression bomb DOS
# attack."); a person is told what ``check_pixels`` tells them, with the count it read.
_PILLOW_PIXELS = re.compile(r"\((\d+) pixels\)")


def bomb_pixels(exc: Exception) -> int | None:
    """The pixel count Pillow's refusal (``DecompressionBombError`` or its warning) names."""
    found = _PILLOW_PIXELS.search(str(exc))
    return int(found[1]) if found else None


def _too_many_pixels(exc: Exception, max_pixels: int) -> ImageDecodeError:
    pixels = bomb_pixels(exc)
    size = f"{pixels:,} pixels" if pixels else "too many pixels"
    return ImageDecodeError(f"image of {size} is larger than the maximum of {max_pixels:,} pixels")


def open_image(
    data: bytes,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    min_size: tuple[int, int] | None = None,
    formats: tuple[str, ...] = DECODER_FORMATS,
) -> Image.Image:
    """Decode ``data`` into an upright RGB image.

    ``min_size`` (width, height of the upright image) lets a JPEG decode at a reduced scale
    (libjpeg's DCT scaling) when the caller needs no more than that: several times faster
    for a 12 MP photo that is about to be reduced to a few pixels per cell. ``formats``: the
    Pillow plugins tried (a subset of those Pillow has; the indexer adds AVIF); bytes in none
    of them raise ``UnknownImageFormat``.
    """
    check_structure(data)  # what opening it costs, bounded before Pillow reads its header
    try:
        with warnings.catch_warnings():
            # Pillow's bomb warning (over MAX_IMAGE_PIXELS, 89.5 MP) is a refusal, unless the caller
            # set a larger budget (the indexer's 120 MP: a 100 MP camera photo), checked just below.
            if max_pixels <= (Image.MAX_IMAGE_PIXELS or 0):
                warnings.simplefilter("error", Image.DecompressionBombWarning)
            else:
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=pillow_formats(data, formats))
            check_pixels(image.width, image.height, max_pixels)
            if min_size is not None and image.format in ("JPEG", "MPO"):  # MPO: the first picture is a JPEG
                width, height = min_size
                if image.getexif().get(_ORIENTATION_TAG) in _SIDEWAYS:
                    width, height = height, width
                image.draft("RGB", (max(1, width), max(1, height)))
            elif min_size is not None and image.format == "HEIF":  # its thumbnail, when one is large enough
                image.draft("RGB", min_size)
            icc, nclx = image.info.get("icc_profile"), image.info.get("nclx_profile")
            upright = _upright(image)
            upright.load()
            return to_rgb(to_srgb(upright, icc, nclx))
    except ImageDecodeError:
        raise
    except UnidentifiedImageError:
        raise _unidentified(data, formats) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _too_many_pixels(exc, max_pixels) from None
    except DECODE_FAILURES as exc:
        raise ImageDecodeError(f"cannot decode image: {decoder_said(exc)}") from exc


def _header_orientation(image: Image.Image) -> object:
    """The EXIF orientation known from the header. A PNG's ``getexif()`` decodes every pixel to
    look for an eXIf chunk after them (380 MiB for 100 MP); one before them is already read."""
    if image.format != "PNG":
        return image.getexif().get(_ORIENTATION_TAG)
    raw = image.info.get("exif")
    if not isinstance(raw, bytes):
        return None
    exif = Image.Exif()
    exif.load(raw)
    return exif.get(_ORIENTATION_TAG)


def _upright(image: Image.Image) -> Image.Image:
    """The image turned as its EXIF orientation says.

    ``ImageOps.exif_transpose`` also rewrites the copy's EXIF, and raises on a tag it cannot
    rewrite (a resolution stored as text by some editor): such a photo passes the web app's
    checks and was then failed by the controller. Its orientation alone is enough to turn it.
    An upright image is returned as it is: ``exif_transpose`` would copy every pixel.
    """
    if image.getexif().get(_ORIENTATION_TAG) not in _TRANSPOSE:
        return image
    try:
        return ImageOps.exif_transpose(image)
    except (TypeError, ValueError, KeyError, IndexError, struct.error):
        orientation = image.getexif().get(_ORIENTATION_TAG)
        method = _TRANSPOSE.get(orientation) if isinstance(orientation, int) else None
        return image if method is None else image.transpose(method)


def to_srgb(image: Image.Image, icc: bytes | None, nclx: object = None) -> Image.Image:
    """The pixels in sRGB: by the ICC profile when there is one (``_to_srgb``), else by an HEIF
    photo's CICP colour description (``nclx``, pillow-heif's ``info["nclx_profile"]``)."""
    return _to_srgb(image, icc) if icc else _cicp_to_srgb(image, nclx)


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
        converted = ImageCms.profileToProfile(image, profile, _SRGB, outputMode=_ICC_MODES[image.mode])
        return image if converted is None else converted  # None only for inPlace=True
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
        return image


def _xyz_from_rgb(xy: list[tuple[float, float]]) -> np.ndarray:
    """The RGB -> XYZ matrix of primaries and a white given as chromaticities (red, green, blue, white)."""
    columns = np.array([[x / y, 1.0, (1.0 - x - y) / y] for x, y in xy[:3]]).T
    wx, wy = xy[3]
    white = np.array([wx / wy, 1.0, (1.0 - wx - wy) / wy])
    return columns * np.linalg.solve(columns, white)


_D65 = (0.3127, 0.3290)
_SRGB_PRIMARIES = [(0.64, 0.33), (0.30, 0.60), (0.15, 0.06), _D65]
_SRGB_FROM_XYZ = np.linalg.inv(_xyz_from_rgb(_SRGB_PRIMARIES))
_HDR_TRANSFERS = {16, 18}  # CICP transfer characteristics PQ and HLG: HDR, not mapped here


def _cicp_to_srgb(image: Image.Image, nclx: object) -> Image.Image:
    """An HEIF photo with no ICC profile whose CICP colour primaries are not sRGB's (Display P3 is
    code 12: what a phone that writes ``nclx`` in wide colour gives), its pixels moved to sRGB's
    primaries. Read as sRGB such pixels come out dull. The transfer curve is taken as sRGB's
    (Display P3's own); a white other than D65, an HDR transfer or primaries 1 (sRGB's, BT.709)
    and 2 (unspecified) leave the pixels as they are, as a browser would show them."""
    if not isinstance(nclx, dict) or image.mode not in ("RGB", "RGBA"):
        return image
    if nclx.get("color_primaries") in (None, 1, 2) or nclx.get("transfer_characteristics") in _HDR_TRANSFERS:
        return image
    try:
        xy = [
            (float(nclx[f"color_primary_{c}_x"]), float(nclx[f"color_primary_{c}_y"]))
            for c in ("red", "green", "blue", "white")
        ]
        matrix = _SRGB_FROM_XYZ @ _xyz_from_rgb(xy)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, np.linalg.LinAlgError):
        return image
    if abs(xy[3][0] - _D65[0]) > 0.002 or abs(xy[3][1] - _D65[1]) > 0.002 or np.allclose(matrix, np.eye(3), atol=1e-3):
        return image
    pixels = np.array(image)  # a copy, converted in bands of rows (a 12 MP photo in float64 is 290 MB)
    rows = max(1, _BAND_PIXELS // max(1, image.width))
    for top in range(0, image.height, rows):
        band = pixels[top : top + rows, :, :3]
        band[...] = linear_to_srgb(srgb_to_linear(band) @ matrix.T)
    return Image.fromarray(pixels, image.mode)


def probe_size(data: bytes) -> tuple[int, int]:
    """The upright (EXIF-oriented) size of an image from its header, without decoding pixels."""
    return probe_image(data)[1:]


def probe_image(
    data: bytes, *, formats: tuple[str, ...] = DECODER_FORMATS, max_pixels: int | None = None
) -> tuple[str, int, int]:
    """Pillow's format name and the upright (EXIF-oriented) size, from the header alone.
    ``max_pixels``: the caller's budget, named when Pillow refuses the header (past twice its
    ``MAX_IMAGE_PIXELS``, more than any budget); the size returned is the caller's to check."""
    check_structure(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # nothing is decoded here
            with Image.open(io.BytesIO(data), formats=pillow_formats(data, formats)) as image:
                width, height = image.size
                if _header_orientation(image) in _SIDEWAYS:
                    width, height = height, width
                return str(image.format), width, height
    except Image.DecompressionBombError as exc:
        raise _too_many_pixels(exc, max_pixels or 2 * (Image.MAX_IMAGE_PIXELS or 0)) from None
    except UnidentifiedImageError:
        raise _unidentified(data, formats) from None
    except DECODE_FAILURES as exc:
        raise ImageDecodeError(f"cannot read image header: {decoder_said(exc)}") from exc


def check_image_file(path: Path, *, formats: tuple[str, ...] = DECODER_FORMATS) -> None:
    """Refuse a file no decoder recognises from its header, before its bytes are read: a 4 GB
    video given as the photo was read whole to learn that. Anything else (a damaged image) is
    left to ``open_image``, which says what is wrong with it."""
    with path.open("rb") as stream:
        head = stream.read(16)
        stream.seek(0)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # nothing is decoded here
                Image.open(stream, formats=pillow_formats(head, formats)).close()
        except UnidentifiedImageError:
            raise UnknownImageFormat(f"not an image in an accepted format ({format_names(formats)})") from None
        except (Image.DecompressionBombError, *DECODE_FAILURES):
            pass


def _wide_to_grey(image: Image.Image) -> np.ndarray:
    """A 16-bit, 32-bit or float grey image as ``(H, W) uint8``, a band of rows at a time.

    The range is 0..65535 for 16-bit, 0..255 for integers that stay below 256, 0..1 for floats
    that do; above it clips. Only one band is ever widened (to at most ``_BAND_PIXELS`` float64
    values): a 60 MP 16-bit photo converted whole as float64 would take 480 MB more.
    """
    width, height = image.size
    out = np.empty((height, width), np.uint8)
    high = cast(float, image.getextrema()[1])  # one band: (low, high), not a pair per band
    top = 65535.0 if image.mode.startswith("I;16") or high > 255 else 255.0
    if image.mode == "F" and high <= 1.0:
        top = 1.0
    rows = max(1, _BAND_PIXELS // max(1, width))
    for y in range(0, height, rows):
        band = np.asarray(image.crop((0, y, width, min(height, y + rows))))
        if image.mode.startswith("I;16"):
            out[y : y + rows] = _SIXTEEN_BIT[band]  # exact, and no wider copy at all
        else:
            out[y : y + rows] = np.clip(np.rint(band.astype(np.float64) * (255.0 / top)), 0, 255)
    return out


def to_rgb(image: Image.Image) -> Image.Image:
    """Map any Pillow mode to 8-bit RGB; transparent areas become white, wide ranges are scaled."""
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in _WIDE_MODES:
        return Image.fromarray(_wide_to_grey(image)).convert("RGB")
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif mode in ("LA", "PA", "La", "RGBa"):
        image = image.convert("RGBA")
    if image.mode == "RGBA":
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.getchannel("A"))
        return background
    return image.convert("RGB")
