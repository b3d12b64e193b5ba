"""One library photo to one tile: decode small, keep the faces, hash for near-duplicates.

What the indexer (``workers.indexer``) does to every photo a person uploads, as pure functions
(bytes in, arrays out; OpenCV and pillow-heif are imported only here and only when used):

- ``decode_photo``: the bounded-opening checks first (``mosaic.image_structure`` through
  ``mosaic.images.open_image``), the pixel count from the header against ``MAX_PHOTO_PIXELS``,
  then a **reduced decode**: a JPEG is decoded by libjpeg's DCT scaling (Pillow's ``draft``)
  straight to 1/2, 1/4 or 1/8 of its size, the smallest that keeps ``WORK_SIDE`` pixels on the
  shorter side, so a 12 MP photo is never decoded whole (a panorama past 11:1 is worked at
  ``MAX_WORK_LONG`` on its longer side instead, a sliver past 256:1 refused); EXIF orientation is
  applied and the colours are brought to sRGB. HEIC/HEIF (an iPhone's default) is read by pillow-heif, which
  applies the file's own rotation, its colours brought to sRGB too (an iPhone's Display P3
  profile, or CICP primaries alone: ``mosaic.images.to_srgb``); HEVC has no reduced decode, so the photo's embedded thumbnail
  is decoded instead when it is a scaled copy at least ``HEIF_THUMBNAIL_SIDE`` on both sides
  (an iPhone's 320 x 240 is), else the photo is decoded once and reduced, up to ``MAX_HEIF_PIXELS``.
  AVIF (the same container around AV1, which some Android phones and most web exports write) is decoded whole
  by Pillow's libavif, up to ``MAX_AVIF_PIXELS``. A PNG, WebP, TIFF or GIF over 16 MP is decoded
  small by libvips (``mosaic.shrink_on_load``), a smaller one by Pillow. Anything else is refused
  with the reason (``PhotoRefused``): zero bytes, not an image of ``PHOTO_FORMAT_NAMES``,
  truncated, a bomb, over the pixel budget, a progressive JPEG whose decoding would hold more
  than ``MAX_PROGRESSIVE_BYTES`` (``mosaic.jpeg_memory``).
- the square the tile is cut from: ``mosaic.subject_crop.square_box`` on the work image (the faces
  kept, else the detail), as every library's tiles are cut.
- ``perceptual_hash``: a 64-bit DCT hash (the pHash construction: 32 × 32 grey, the 8 × 8
  lowest frequencies against their median), so burst shots and the same scene twice are a few
  bits apart, followed by the photo's mean colour in CIELAB (3 bytes): a layout hash alone
  cannot tell a red card from a blue one (flat photos have no layout, every one hashes alike),
  nor a scene from its black-and-white print. ``dal.blobs.indexed.group_photos`` groups photos
  close in both.
"""

from __future__ import annotations

import functools
import io
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image

from .decode_gate import DecodeGate
from .errors import ImageDecodeError, UnknownImageFormat
from .images import (
    AV1_BRANDS,
    DECODE_FAILURES,
    FORMAT_NAMES,
    HEIF_THUMBNAIL_SIDE,
    HEVC_BRANDS,
    check_pixels,
    heif_brands,
    open_image,
    probe_image,
    to_rgb,
    to_srgb,
)
from .jpeg_memory import progressive_frame
from .library import ATLAS_SIZE
from .shrink_on_load import LIBVIPS_FORMATS, decode_shrunk
from .signatures import srgb_to_lab
from .subject_crop import SEARCH_SIDE, detect_faces, square_box

__all__ = [
    "MAX_AVIF_PIXELS",
    "MAX_HEIF_PIXELS",
    "MAX_PHOTO_PIXELS",
    "MAX_PROGRESSIVE_BYTES",
    "MAX_WORK_LONG",
    "PHOTO_FORMAT_NAMES",
    "WORK_SIDE",
    "IndexedPhoto",
    "PhotoRefused",
    "colour_distance",
    "decode_photo",
    "hamming",
    "index_photo",
    "perceptual_hash",
]

# The shorter side the crop, the face search and the hash work at: 360 lets libjpeg decode a
# 12 MP phone photo (3024 px high) at 1/8 of its size, the cheapest reduced decode.
WORK_SIDE = SEARCH_SIDE  # 360: the faces are searched on the work image as it is
_WORK_SLACK = 1.25  # a reduced decode up to this much larger is worked at as it is
# The longest side worked at. A panorama of up to 11:1 keeps its 360 px height; a longer sliver
# is shrunk further (the square is a small part of it anyway), so neither the face search (whose
# cost grows with the pixels) nor the edge measure (float arrays of the whole image) holds more
# than a phone photo's few: 34,000 x 300 px took 3.5 s and 300 MB before.
MAX_WORK_LONG = 4096
MAX_PHOTO_PIXELS = 120_000_000  # a 100 MP camera photo passes; more is refused before decoding
# What one decode may hold, beside the indexer's own 122 MiB (its libraries and the face model)
# and another thread's photo (its bytes, at most 50 MiB, and its work): within its 400 MB. A
# progressive JPEG is decoded holding every coefficient of the image (mosaic.jpeg_memory): a
# 60 MP one with half-resolution colour (172 MiB) passes, a 100 MP one (287 MiB; it took the
# indexer to 418 MiB) is refused. A PNG, WebP, TIFF or GIF whose pixels would pass _ALONE_BYTES is
# decoded small by libvips (mosaic.shrink_on_load). A decode over _ALONE_BYTES runs with no other
# decode beside it (mosaic.decode_gate): a lock among the large ones still let a 16 MP PNG run
# beside a 100 MP progressive JPEG, 494 MiB.
MAX_PROGRESSIVE_BYTES = 192 * 2**20
_ALONE_BYTES = 64 * 2**20
_GATE = DecodeGate()
# libavif has no reduced decode: Pillow holds the YUV planes, libavif's RGB and its own copy,
# measured 9.4 bytes a pixel (8 bits, 4:2:0) and 11.1 (4:4:4); 10 bits widen the planes to 14.
_AVIF_BYTES_PER_PIXEL = 14
MAX_AVIF_PIXELS = MAX_PROGRESSIVE_BYTES // _AVIF_BYTES_PER_PIXEL  # 14 MP: a 12 MP phone's AVIF passes
# A HEIF photo without a thumbnail large enough is decoded whole (HEVC has no reduced decode):
# libheif's planes and pillow-heif's RGB, measured 8.1 bytes a pixel (8 bits) and 8.3 (10 bits) at
# 12 MP, 7.6 at 24 MP. A 48 MP one would take the indexer past its 400 MB.
_HEIF_BYTES_PER_PIXEL = 8
MAX_HEIF_PIXELS = MAX_PROGRESSIVE_BYTES // _HEIF_BYTES_PER_PIXEL  # 25 MP: with an iPhone's thumbnail, any size
PHOTO_FORMAT_NAMES = FORMAT_NAMES  # every format the engine decodes, HEIC and AVIF among them
_HASH_SIDE = 32
_FLAT = 1.0  # the largest low-frequency coefficient (grey levels) of a photo with no layout


class PhotoRefused(ImageDecodeError):
    """A photo the indexer does not make a tile of; ``str()`` is the reason recorded for it."""


@dataclass(frozen=True)
class IndexedPhoto:
    tile: np.ndarray  # (ATLAS_SIZE, ATLAS_SIZE, 3) uint8
    hash: str  # 22 hex digits: layout hash, then mean colour
    faces: int  # faces found
    box: tuple[int, int, int]  # (left, top, side) of the square in the work image
    work_size: tuple[int, int]  # the decoded (reduced) size


def decode_photo(data: bytes, *, work_side: int = WORK_SIDE, max_pixels: int = MAX_PHOTO_PIXELS) -> Image.Image:
    """An upright sRGB image whose shorter side is ``work_side`` to 1.25 times it, or an HEIF
    photo's embedded thumbnail (see the module docstring)."""
    if not data:
        raise PhotoRefused("zero bytes: an empty file is not a photo")
    brands = heif_brands(data)  # which decoder: libavif (AVIF) or pillow-heif (HEIC and plain HEIF)
    try:
        if brands & AV1_BRANDS and not brands & HEVC_BRANDS:
            return _decode_avif(data, work_side, max_pixels)
        if brands:
            return _decode_heif(data, work_side, max_pixels)
        return _decode(data, work_side, max_pixels)
    except UnknownImageFormat:
        raise PhotoRefused(f"not an image in an accepted format ({PHOTO_FORMAT_NAMES})") from None
    except PhotoRefused:
        raise
    except ImageDecodeError as exc:
        raise PhotoRefused(str(exc)) from None


def _worked(image: Image.Image, work_side: int) -> Image.Image:
    """The decoded image reduced to its work size, inside the decode's gate (its pixels are what
    the gate accounts for), or ``PhotoRefused`` when no square tile can be cut from it."""
    shorter, longer = min(image.size), max(image.size)
    if shorter < 16:
        raise PhotoRefused(f"too small for a tile: {image.width}x{image.height} pixels")
    scale = _work_scale(shorter, longer, work_side)
    if scale < 1.0:
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        if min(size) < 16:
            raise _too_thin(image.width, image.height)
        image = image.resize(size, Image.Resampling.LANCZOS, reducing_gap=2.0)
    return image


def _too_thin(width: int, height: int) -> PhotoRefused:
    return PhotoRefused(
        f"too long and thin for a tile: {width}x{height} pixels, more than {MAX_WORK_LONG // 16}:1 "
        f"(the square would be a few pixels of it)"
    )


def _work_scale(shorter: int, longer: int, work_side: int) -> float:
    """How much to shrink an image of these sides to work on: the shorter side to ``work_side``
    (not for the slack's worth: a 12 MP photo's 1/8 is 378), and the longer to ``MAX_WORK_LONG``."""
    scale = work_side / shorter if shorter > work_side * _WORK_SLACK else 1.0
    return min(scale, MAX_WORK_LONG / longer)


def _decode(data: bytes, work_side: int, max_pixels: int) -> Image.Image:
    """A JPEG by libjpeg's reduced decode; a large PNG, WebP, TIFF or GIF by libvips' (which has
    none of its own to offer: ``mosaic.shrink_on_load``); anything else whole, by Pillow."""
    if data[:3] != b"\xff\xd8\xff":  # not a JPEG (whose header open_image reads once): which, and how large
        image_format, width, height = probe_image(data, max_pixels=max_pixels)
        if image_format in LIBVIPS_FORMATS and max_pixels >= width * height > _ALONE_BYTES // 4:
            scale = min(1.0, _work_scale(min(width, height), max(width, height), work_side))
            if min(width, height) * scale < 16:  # said of the photo, before libvips shrinks it to a sliver
                raise _too_thin(width, height)
            with _GATE.hold(heavy=True):
                return _worked(decode_shrunk(data, round(max(width, height) * scale)), work_side)
    held = _progressive_bytes(data, max_pixels)
    with _GATE.hold(heavy=held > _ALONE_BYTES):
        return _worked(open_image(data, max_pixels=max_pixels, min_size=(work_side, work_side)), work_side)


def _progressive_bytes(data: bytes, max_pixels: int) -> int:
    """What decoding ``data`` holds when it is a progressive JPEG (``mosaic.jpeg_memory``), else 0;
    ``PhotoRefused`` over ``MAX_PROGRESSIVE_BYTES``. Too many pixels is left to ``open_image``."""
    frame = progressive_frame(data)
    if frame is None or frame.width * frame.height > max_pixels:
        return 0
    if frame.coefficient_bytes > MAX_PROGRESSIVE_BYTES:
        raise PhotoRefused(
            f"a progressive JPEG of {frame.width}x{frame.height} pixels: decoding it holds "
            f"{frame.coefficient_bytes / 2**20:,.0f} MiB whatever the scale, more than the "
            f"{MAX_PROGRESSIVE_BYTES // 2**20} MiB allowed; saved as a baseline JPEG it is decoded in a fraction"
        )
    return frame.coefficient_bytes


def _too_heavy_whole(photo: str, codec: str, held: float, most_pixels: int) -> PhotoRefused:
    """A photo of a codec with no reduced decode, whose whole decode would pass the budget."""
    return PhotoRefused(
        f"{photo}: {codec} has no reduced decode, and decoding it would hold about {held / 2**20:,.0f} MiB, "
        f"more than the {MAX_PROGRESSIVE_BYTES // 2**20} MiB allowed ({most_pixels / 1e6:.0f} MP); saved as JPEG "
        "it is decoded in a fraction"
    )


def _decode_avif(data: bytes, work_side: int, max_pixels: int) -> Image.Image:
    """An AVIF photo decoded whole (libavif has no reduced decode), alone when it is large."""
    from PIL import features

    if not features.check("avif"):  # pragma: no cover - the locked Pillow wheels carry libavif
        raise PhotoRefused("AVIF cannot be decoded here: this Pillow was built without libavif")
    _, width, height = probe_image(data, formats=("AVIF",), max_pixels=max_pixels)
    check_pixels(width, height, max_pixels)  # ImageDecodeError: refused by decode_photo
    held = width * height * _AVIF_BYTES_PER_PIXEL
    if width * height > MAX_AVIF_PIXELS:
        raise _too_heavy_whole(f"an AVIF photo of {width}x{height} pixels", "AVIF", held, MAX_AVIF_PIXELS)
    with _GATE.hold(heavy=held > _ALONE_BYTES):
        return _worked(open_image(data, max_pixels=max_pixels, formats=("AVIF",)), work_side)


def _decode_heif(data: bytes, work_side: int, max_pixels: int) -> Image.Image:
    try:
        from pillow_heif import HeifImageFile

        image = HeifImageFile(io.BytesIO(data))  # the primary picture; nothing decoded yet
        width, height = image.size
        check_pixels(width, height, max_pixels)  # ImageDecodeError: refused by decode_photo
        # pillow-heif's draft picks the smallest embedded thumbnail at least this large that is a
        # scaled copy of the photo (same aspect, rotation, crop and colours), else nothing.
        image.draft("RGB", (HEIF_THUMBNAIL_SIDE, HEIF_THUMBNAIL_SIDE))
        held = 0 if image.size != (width, height) else width * height * _HEIF_BYTES_PER_PIXEL  # no thumbnail taken
        if held > MAX_PROGRESSIVE_BYTES:
            photo = f"a HEIF photo of {width}x{height} pixels without a thumbnail to read instead"
            raise _too_heavy_whole(photo, "HEVC", held, MAX_HEIF_PIXELS)
        with _GATE.hold(heavy=held > _ALONE_BYTES):
            image.load()  # the file's own rotation (irot/imir) applied
            # An iPhone's HEIC is Display P3 (an ICC profile); read as sRGB its tiles come out dull. The
            # draft takes no thumbnail of another colour profile, so the photo's describes either.
            srgb = to_rgb(to_srgb(image, image.info.get("icc_profile"), image.info.get("nclx_profile")))
            return _worked(srgb, work_side)
    except PhotoRefused:
        raise
    except DECODE_FAILURES as exc:
        raise PhotoRefused(f"cannot decode HEIF image: {exc}") from None


@functools.cache
def _dct_matrix(n: int) -> np.ndarray:
    k = np.arange(n)[:, None]
    x = np.arange(n)[None, :]
    matrix = np.cos(math.pi * (2 * x + 1) * k / (2 * n)) * math.sqrt(2.0 / n)
    matrix[0] /= math.sqrt(2.0)
    return matrix


def perceptual_hash(image: Image.Image) -> str:
    """22 hex digits: the 64-bit DCT hash of the layout, then the mean colour (module docstring)."""
    small = image.convert("RGB").resize((_HASH_SIDE, _HASH_SIDE), Image.Resampling.BOX)
    pixels = np.asarray(small.convert("L"), dtype=np.float64)
    dct = _dct_matrix(_HASH_SIDE)
    low = (dct @ pixels @ dct.T)[:8, :8]
    bits = (low > np.median(low)).ravel()
    if np.abs(low.ravel()[1:]).max() < _FLAT:  # no layout at all: rounding noise would pick the bits
        bits[:] = False
    lab = srgb_to_lab(np.asarray(small, dtype=np.uint8)).reshape(-1, 3).mean(axis=0)
    colour = (round(lab[0] * 2.55), round(lab[1]) + 128, round(lab[2]) + 128)
    return f"{int(''.join('1' if b else '0' for b in bits), 2):016x}" + "".join(
        f"{min(255, max(0, c)):02x}" for c in colour
    )


def hamming(a: str, b: str) -> int:
    """Bits apart of two hashes' layouts (their first 16 hex digits)."""
    return (int(a[:16], 16) ^ int(b[:16], 16)).bit_count()


def colour_distance(a: str, b: str) -> float | None:
    """ΔE76 between two hashes' mean colours, or None when either has none (an older hash)."""
    if len(a) < 22 or len(b) < 22:
        return None
    la, lb = (np.array([int(h[i : i + 2], 16) for i in (16, 18, 20)], dtype=np.float64) for h in (a, b))
    la[0], lb[0] = la[0] / 2.55, lb[0] / 2.55
    return float(np.linalg.norm(la - lb))


def index_photo(data: bytes, *, max_pixels: int = MAX_PHOTO_PIXELS) -> IndexedPhoto:
    """A photo's tile, hash and crop, or ``PhotoRefused`` with the reason."""
    image = decode_photo(data, max_pixels=max_pixels)
    faces = detect_faces(image)
    left, top, side = square_box(image, faces)
    square = image.crop((left, top, left + side, top + side))
    tile = np.asarray(square.resize((ATLAS_SIZE, ATLAS_SIZE), Image.Resampling.LANCZOS), np.uint8)
    return IndexedPhoto(
        tile=tile,
        hash=perceptual_hash(image),
        faces=len(faces),
        box=(left, top, side),
        work_size=image.size,
    )
