"""Checks on what a client sends, done before anything is stored or enqueued.

An uploaded photo must decode completely as one of the allowed formats, within the byte
and pixel limits of ``dal.config.Settings``. Pillow's decompression-bomb guard stays on
(``Image.MAX_IMAGE_PIXELS`` is never lifted) and its warning is turned into a rejection;
our own pixel limit is checked from the header, before the pixels are decoded, so a small
file that claims a huge image costs nothing. Before Pillow reads even the header,
``mosaic.image_structure`` bounds what reading it costs (JPEG segments, TIFF strips and
tags, PNG and GIF chunks): a small file padded with header elements is 400 ``image_too_complex``.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

from flask import Flask, request
from PIL import Image, UnidentifiedImageError

from mosaic.image_structure import ImageStructureError, check_structure
from mosaic.images import DECODE_FAILURES, FORMAT_NAMES, bomb_pixels, decoder_said, heif_brands, pillow_formats
from webapp.decode_budget import DECODES, decode_cost
from webapp.errors import ApiError

# Pillow format name -> (file extension, content type).
ALLOWED_FORMATS: dict[str, tuple[str, str]] = {
    "JPEG": ("jpg", "image/jpeg"),
    # A JPEG with more pictures after the first (a phone's depth map or preview, a 3D camera's
    # second eye: CIPA Multi-Picture Format) is what Pillow calls MPO; the photo is the first.
    "MPO": ("jpg", "image/jpeg"),
    "PNG": ("png", "image/png"),
    "WEBP": ("webp", "image/webp"),
    "GIF": ("gif", "image/gif"),
    "BMP": ("bmp", "image/bmp"),
    "TIFF": ("tif", "image/tiff"),
    # An iPhone's photo (HEVC in HEIF) and AV1 in the same container; the stored photo keeps its bytes.
    "HEIF": ("heic", "image/heic"),
    "AVIF": ("avif", "image/avif"),
}
# An integer field as its text (form or query), at most MAX_DIGITS digits: the pattern refuses
# a longer one before int() sees it (int() of 5,000 digits raises past Python's own limit).
MAX_DIGITS = 18
WHOLE_NUMBER = re.compile(rf"[+-]?[0-9]{{1,{MAX_DIGITS}}}")
_FORMAT_NAMES = FORMAT_NAMES
_SWAPS_AXES = {5, 6, 7, 8}  # EXIF orientations that rotate by 90 degrees
# Form fields a client may send more than once: a library's files. Any other field sent twice
# (a correction as [10, 90]) is 400, not "the first one wins".
LIST_FIELDS = frozenset({"files"})
# Every form field an endpoint reads (POST /api/jobs, POST /api/libraries): one of these sent twice
# would leave "which one counts" to chance, so it is refused. A field no endpoint reads is ignored
# however often it comes (the spec allows other fields), so its repeats are ignored too.
READ_FIELDS = frozenset(
    {
        "image",
        "library",
        "tile_size",
        "slices",
        "tiles_across",
        "max_uses",
        "correction",
        "use_every_photo",
        "cell_sizes",
        "split",
        "name",
        "description",
    }
)
SHOWN_CHARACTERS = 40  # a field's value is echoed in an error up to this long, else its length only
_EXIF_ORIENTATION = 0x0112


@dataclass(frozen=True)
class ValidImage:
    """A photo that passed every check; width and height are as displayed (EXIF applied)."""

    data: bytes
    format: str
    extension: str
    content_type: str
    width: int
    height: int


def validate_image(data: bytes, *, max_bytes: int, max_pixels: int, what: str = "photo") -> ValidImage:
    """Return the photo's facts, or raise ApiError 400/413/415 saying what is wrong."""
    if not data:
        raise ApiError(400, "empty_file", f"the {what} is empty")
    if len(data) > max_bytes:
        raise ApiError(413, "too_large", f"the {what} is {len(data):,} bytes; the limit is {max_bytes:,}")
    try:
        check_structure(data)
    except ImageStructureError as exc:
        raise ApiError(400, "image_too_complex", f"the {what} cannot be opened safely: {exc}") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=pillow_formats(data)) as image:
                if image.format not in ALLOWED_FORMATS:
                    raise ApiError(
                        415,
                        "unsupported_media_type",
                        f"{image.format} images are not accepted; use {_FORMAT_NAMES}",
                    )
                width, height = image.size
                if width * height > max_pixels:
                    raise ApiError(
                        413,
                        "too_many_pixels",
                        f"the {what} is {width}×{height} = {width * height:,} pixels; the limit is {max_pixels:,}",
                    )
                with DECODES.reserve(decode_cost(data, width * height)):  # 503 + Retry-After when full
                    image.load()
                orientation = image.getexif().get(_EXIF_ORIENTATION)
                image_format = image.format
    except ApiError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:  # Pillow's own limit, past ours
        pixels = bomb_pixels(exc)
        size = f"{pixels:,} pixels" if pixels else "more pixels than Pillow decodes"
        raise ApiError(413, "too_many_pixels", f"the {what} is {size}; the limit is {max_pixels:,}") from None
    except UnidentifiedImageError:
        if heif_brands(data):  # the container says HEIC or AVIF: its decoder could not read it
            raise ApiError(
                400, "corrupt_image", f"the {what} is a HEIF or AVIF file that is damaged or cut short"
            ) from None
        raise ApiError(
            415, "unsupported_media_type", f"the {what} is not an image in a known format ({_FORMAT_NAMES})"
        ) from None
    except DECODE_FAILURES as exc:
        raise ApiError(400, "corrupt_image", f"the {what} could not be decoded: {decoder_said(exc)}") from None
    if orientation in _SWAPS_AXES:
        width, height = height, width
    extension, content_type = ALLOWED_FORMATS[image_format]
    return ValidImage(data, image_format, extension, content_type, width, height)


def int_field(form: Mapping[str, str], name: str, *, low: int, high: int, default: int | None = None) -> int:
    """An integer form field within [low, high]; 400 with the field's name otherwise."""
    raw = form.get(name)
    if raw is None and default is not None:
        return default  # only an absent field takes the default: an empty one is not a number
    if raw is None or (default is None and str(raw).strip() == ""):
        raise ApiError(400, "missing_field", f"{name} is required")
    text = str(raw).strip()
    # ASCII digits only, as the spec's `integer` is written: Python's int() also takes "1_000"
    # and other scripts' digits, which no client means and the schema does not allow.
    if not WHOLE_NUMBER.fullmatch(text):
        raise ApiError(
            400, "invalid_field", f"{name} must be a whole number of at most {MAX_DIGITS} digits, got {shown(raw)}"
        )
    value = int(text)
    if not low <= value <= high:
        raise ApiError(400, "invalid_field", f"{name} must be between {low} and {high}, got {value}")
    return value


def optional_int_field(form: Mapping[str, str], name: str, *, low: int, high: int) -> int | None:
    raw = form.get(name)
    if raw is None:  # omitted; an empty or other non-number value is 400, as the spec says
        return None
    if str(raw).strip() == "":  # not "required": the field may be left out, not sent empty
        raise ApiError(
            400, "invalid_field", f"{name} must be a whole number, got {shown(raw)}; omit it for the default"
        )
    return int_field(form, name, low=low, high=high)


def flag_field(form: Mapping[str, str], name: str) -> bool:
    """A boolean form field, ``true`` or ``false`` as the spec's ``boolean`` is written; absent is
    false; anything else is 400 (a "yes" or "1" is not guessed at)."""
    raw = form.get(name)
    if raw is None:
        return False
    text = str(raw)
    if text not in ("true", "false"):
        raise ApiError(400, "invalid_field", f"{name} must be true or false, got {shown(raw)}")
    return text == "true"


def shown(value: object) -> str:
    """A client's value as an error may repeat it: whole when short, else its start and length."""
    text = str(value)
    if len(text) <= SHOWN_CHARACTERS:
        return repr(text)
    return f"{text[: SHOWN_CHARACTERS // 2]!r}... ({len(text):,} characters)"


def refuse_repeated_fields() -> None:
    """400 ``repeated_field`` for a field the app reads (``READ_FIELDS``) sent more than once."""
    if request.method not in ("POST", "PUT", "PATCH") or request.mimetype not in (
        "multipart/form-data",
        "application/x-www-form-urlencoded",
    ):
        return
    for fields in (request.form, request.files):
        for name in fields:
            if name in READ_FIELDS and len(fields.getlist(name)) > 1:
                raise ApiError(
                    400, "repeated_field", f"{shown(name)} was sent {len(fields.getlist(name))} times; send it once"
                )


def init_app(app: Flask) -> None:
    app.before_request(refuse_repeated_fields)
