"""Cutting a job into bands and putting the rendered bands back together.

The JobController resamples the photo to its cell image (``mosaic.cell_image``),
cuts it into bands of whole cell rows and stores each band as a PNG in ``slicerequest``.
The band PNG carries, in text chunks, where it sits in the job's grid (first cell row, row
count, grid size), so an ImageProcessor needs nothing but the blob and the message to render
it exactly as the in-process ``render`` would: ``render_band(..., row_offset=first_row)``.
A fair-use job (``max_uses``) is assigned once for the whole grid by the controller, and each
band PNG also carries its rows of that choice (a ``choice`` text chunk: zlib-compressed,
base64 int32), which the processor renders as given: the bands together never exceed N.

A band of at most ``INLINE_BAND_MAX_BYTES`` of PNG travels inside its SliceRequest message
(``band``, Base64: ``inline_band``) instead of as a blob: a small job's bands are ~20 KB,
and a blob costs the controller a write and the processor a read per slice, two storage
transactions and two round trips, for bytes that fit in the message it sends anyway. A
bigger band (a 40 MP job's is megabytes) stays a blob; ``band_bytes`` reads either.

Between the roles everything is lossless, so the distributed result is pixel-identical to the
in-process render. Bands (cell images, small) are PNG. A rendered slice is as big as its part
of the mosaic (a 40 MP job is 120 MB of pixels), so it travels as a raw NumPy ``.npy`` array
(``encode_rendered``): writing and reading it is a memory copy, where PNG cost seconds of
zlib on both sides for photo tiles that barely compress. ``decode_rendered`` reads both
formats by their magic bytes, so slices written as PNG by an older processor still stitch
(``dal.blobs.rendered``, re-exported here: the web app previews these blobs too).
A giant job's bands carry a pieces plan (``Band.plan``, a ``pieces`` text chunk:
``mosaic.pieces``): their cell rows overlap by the few rows both neighbours render, and their
processors send back final pieces instead of pixels (``workers.imaging.band_pieces``).
A job of one slice needs no stitch at all: its processor encodes the final output itself
(``ImageProcessor``). Only the final mosaic is encoded, once, as JPEG, by ``encode_output``
(one function, so tests can encode the in-process render the same way).
"""

from __future__ import annotations

import base64
import io
import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image, PngImagePlugin

from dal.errors import PhotoMosaicsError
from mosaic.pieces import Piece, PiecePlan
from workers.imaging.stitching import encode_jpeg, from_pixels

__all__ = [
    "INLINE_BAND_MAX_BYTES",
    "OUTPUT_CONTENT_TYPE",
    "Band",
    "BandFormatError",
    "band_bytes",
    "cut_bands",
    "decode_band",
    "decode_png",
    "encode_band",
    "encode_output",
    "encode_png",
    "inline_band",
    "stitch",
]

OUTPUT_CONTENT_TYPE = "image/jpeg"
_PREFIX = "photomosaics:"
# 32 KiB of PNG is 42.7 KiB of Base64 in the message and 56.9 KiB after the wire's own Base64,
# under the queue's 64 KiB with the other fields (dal.queues.message_fields.MAX_INLINE_BAND_CHARS). A small
# job's bands (60 tiles across, 4 slices: 48 x 240 px of cells) are 18-23 KB.
INLINE_BAND_MAX_BYTES = 32 * 1024
# Bands up to this many pixels are encoded for size (they may fit INLINE_BAND_MAX_BYTES), bigger
# ones for speed (``encode_png``): 256 K pixels is 768 KB raw, far past what could ride inline.
COMPACT_PNG_MAX_PIXELS = 256 * 1024


class BandFormatError(PhotoMosaicsError, ValueError):
    """A band blob that is not a PNG this controller wrote (undecodable or missing its grid)."""


@dataclass(frozen=True, kw_only=True)
class Band:
    """One slice of a job: cell rows ``first_row .. first_row + rows`` of the cell image.

    ``cells`` is the part of the cell image for those rows, ``(rows * k, tiles_across * k, 3)
    uint8`` where ``k`` is the engine's pixels per cell (usually 1).
    """

    sequence: int
    first_row: int
    rows: int
    tiles_across: int
    tiles_down: int
    cells: np.ndarray
    choice: np.ndarray | None = None  # (rows, tiles_across) int32: the tiles chosen for the whole job
    # A giant job's bands lie on pyramid units (``mosaic.pieces``): the band makes final pieces.
    plan: PiecePlan | None = None

    @property
    def piece(self) -> Piece | None:
        """What this band makes besides its pixels (None: an ordinary band, stitched by the controller)."""
        return None if self.plan is None else self.plan.piece(self.sequence)


def cut_bands(
    cells: np.ndarray,
    *,
    tiles_down: int,
    tiles_across: int,
    rows: Sequence[range],
    choice: np.ndarray | None = None,
    plan: PiecePlan | None = None,
) -> list[Band]:
    """Split the cell image (and a whole-grid ``choice``) into the bands ``rows`` (from ``plan_bands``,
    or the cell rows of a ``plan``'s pieces, which overlap by their margins)."""
    if cells.ndim != 3 or cells.shape[0] % tiles_down or cells.shape[1] % tiles_across:
        raise ValueError(f"cell image of shape {cells.shape} does not fit a {tiles_across}x{tiles_down} grid")
    per_row = cells.shape[0] // tiles_down
    return [
        Band(
            sequence=seq,
            first_row=r.start,
            rows=len(r),
            tiles_across=tiles_across,
            tiles_down=tiles_down,
            cells=np.ascontiguousarray(cells[r.start * per_row : r.stop * per_row]),
            choice=None if choice is None else np.ascontiguousarray(choice[r.start : r.stop], dtype=np.int32),
            plan=plan,
        )
        for seq, r in enumerate(rows)
    ]


def encode_png(pixels: np.ndarray, *, text: dict[str, str] | None = None) -> bytes:
    """Lossless PNG of an ``(H, W, 3) uint8`` array, with optional text chunks.

    Up to ``COMPACT_PNG_MAX_PIXELS`` (a band that may ride inline in its message): Pillow's
    adaptive row filters, the smaller file. Above (a blob anyway): libvips with no filter,
    3x as fast to write and 1.7x to read for twice the bytes (a 40 MP job's 2.5 MP band:
    102 -> 34 ms, 45 -> 27 ms to decode, 1.6 -> 3.2 MB), cheaper than the bytes on any
    network a queue job crosses. Both are plain PNGs with tEXt chunks: ``decode_png`` reads either."""
    pixels = np.asarray(pixels, dtype=np.uint8)
    if pixels.shape[0] * pixels.shape[1] > COMPACT_PNG_MAX_PIXELS:
        return _encode_png_fast(pixels, text or {})
    info = PngImagePlugin.PngInfo()
    for key, value in (text or {}).items():
        info.add_text(key, value)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="PNG", pnginfo=info, compress_level=1)
    return out.getvalue()


def _encode_png_fast(pixels: np.ndarray, text: dict[str, str]) -> bytes:
    import pyvips  # a dependency (pyvips[binary]), imported where it is used, as in workers.imaging.stitching

    image = from_pixels(pixels).copy()  # a copy: the metadata below must not touch a shared image
    for i, (key, value) in enumerate(text.items()):  # libvips writes png-comment-<i>-<key> as tEXt
        image.set_type(pyvips.GValue.gstr_type, f"png-comment-{i}-{key}", value)
    return bytes(image.pngsave_buffer(compression=1, filter="none"))


def decode_png(data: bytes) -> tuple[np.ndarray, dict[str, str]]:
    """The RGB pixels and text chunks of a PNG; BandFormatError when it is not one."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format != "PNG":
                raise BandFormatError(f"expected a PNG, got {image.format or 'an unknown format'}")
            image.load()
            text = dict(getattr(image, "text", {}) or {})
            pixels = np.asarray(image.convert("RGB"))
    except BandFormatError:
        raise
    except Exception as exc:  # Pillow raises many types for broken files
        raise BandFormatError(f"not a readable PNG: {exc}") from None
    return pixels, text


def encode_band(band: Band) -> bytes:
    """The band's PNG, its place in the grid (and a fair-use choice) in text chunks."""
    text = {
        f"{_PREFIX}sequence": str(band.sequence),
        f"{_PREFIX}first_row": str(band.first_row),
        f"{_PREFIX}rows": str(band.rows),
        f"{_PREFIX}tiles_across": str(band.tiles_across),
        f"{_PREFIX}tiles_down": str(band.tiles_down),
    }
    if band.plan is not None:
        plan = band.plan
        text[f"{_PREFIX}pieces"] = json.dumps(
            {
                "width": plan.width,
                "height": plan.height,
                "tile_size": plan.tile_size,
                "levels": plan.levels,
                "splits": list(plan.splits),
            }
        )
    if band.choice is not None:
        raw = np.ascontiguousarray(band.choice, dtype="<i4").tobytes()
        text[f"{_PREFIX}choice"] = base64.b64encode(zlib.compress(raw, 6)).decode("ascii")
    return encode_png(band.cells, text=text)


def inline_band(encoded: bytes, limit: int = INLINE_BAND_MAX_BYTES) -> str | None:
    """The band PNG as the SliceRequest's ``band`` field, or None when it must be a blob
    (over ``limit``, the setting ``inline_band_bytes``, never over ``INLINE_BAND_MAX_BYTES``)."""
    fits = len(encoded) <= min(limit, INLINE_BAND_MAX_BYTES)
    return base64.b64encode(encoded).decode("ascii") if fits else None


def band_bytes(band: str | None, download: Callable[[], bytes]) -> bytes:
    """A SliceRequest's band PNG: the inline ``band`` when the message carries it, else ``download()``."""
    if band is None:
        return download()
    try:
        return base64.b64decode(band, validate=True)
    except ValueError as exc:  # the message checks the alphabet; this is the last word
        raise BandFormatError(f"the inline band is not Base64: {exc}") from None


def _decode_choice(text: str, rows: int, across: int) -> np.ndarray:
    try:
        raw = zlib.decompress(base64.b64decode(text, validate=True))
    except (ValueError, zlib.error) as exc:
        raise BandFormatError(f"the band's tile choice is unreadable: {exc}") from None
    if len(raw) != rows * across * 4:
        raise BandFormatError(f"the band's tile choice has {len(raw) // 4} cells, the band {rows * across}")
    choice = np.frombuffer(raw, "<i4").astype(np.int32).reshape(rows, across)
    if (choice < 0).any():
        raise BandFormatError("the band's tile choice holds negative tile numbers")
    return choice


def decode_band(data: bytes) -> Band:
    """Read a band PNG back; BandFormatError says what is wrong with it."""
    pixels, text = decode_png(data)
    try:
        fields = {
            k: int(text[f"{_PREFIX}{k}"]) for k in ("sequence", "first_row", "rows", "tiles_across", "tiles_down")
        }
    except (KeyError, ValueError):
        raise BandFormatError("the PNG does not say where it sits in the job's grid (missing text chunks)") from None
    rows, across = fields["rows"], fields["tiles_across"]
    if rows < 1 or across < 1 or pixels.shape[0] % rows or pixels.shape[1] % across:
        raise BandFormatError(f"band of {pixels.shape[1]}x{pixels.shape[0]} px does not hold {across}x{rows} cells")
    if fields["first_row"] < 0 or fields["first_row"] + rows > fields["tiles_down"]:
        raise BandFormatError("band rows lie outside the grid")
    chosen = text.get(f"{_PREFIX}choice")
    choice = None if chosen is None else _decode_choice(chosen, rows, across)
    planned = text.get(f"{_PREFIX}pieces")
    plan = None if planned is None else _decode_plan(planned, fields)
    return Band(cells=pixels, choice=choice, plan=plan, **fields)


def _decode_plan(text: str, fields: dict[str, int]) -> PiecePlan:
    """The band's piece plan, checked against the band it came with."""
    try:
        raw = json.loads(text)
        plan = PiecePlan(
            int(raw["width"]),
            int(raw["height"]),
            int(raw["tile_size"]),
            int(raw["levels"]),
            tuple(int(s) for s in raw["splits"]),
        )
        piece = plan.piece(fields["sequence"])
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise BandFormatError(f"the band's piece plan is unreadable: {exc}") from None
    expected = range(fields["first_row"], fields["first_row"] + fields["rows"])
    if piece.cells != expected or plan.height != fields["tiles_down"] * plan.tile_size or plan.levels < 1:
        raise BandFormatError("the band's piece plan does not match its rows")
    return plan


def stitch(bands: Sequence[np.ndarray], *, width: int, height: int) -> np.ndarray:
    """Stack the rendered bands top to bottom; refuse anything that does not add up."""
    if not bands:
        raise ValueError("nothing to stitch")
    for i, band in enumerate(bands):
        if band.ndim != 3 or band.shape[1] != width or band.shape[2] != 3:
            raise ValueError(f"band {i} is {band.shape}, expected width {width} and 3 channels")
    mosaic = np.concatenate(bands, axis=0)
    if mosaic.shape[0] != height:
        raise ValueError(f"bands add up to {mosaic.shape[0]} rows, expected {height}")
    return mosaic


def encode_output(mosaic: np.ndarray) -> bytes:
    """The final mosaic as JPEG; deterministic, and the same bytes the streaming stitch writes
    for the same pixels (one encoder and one set of options: ``workers.imaging.stitching``)."""

    return encode_jpeg(mosaic)
