"""Downscaled JPEG previews of stored images, cached in memory.

The page shows each slice's mosaic as soon as it is rendered, a thumbnail per job in the
gallery and the source photo behind the progress bands. The originals are PNG bands of up
to tens of megapixels; a browser needs a JPEG of screen size. Previews are deterministic
(rendered slices never change), so they are cached per process, bounded by total bytes.
Each preview is made once however many ask for it at the same moment (single-flight: the
others wait for the first one's result), and only in a few sizes (``PREVIEW_SIDES``: a
request's ``size`` is snapped up to one of them), so a client cannot make every request a
miss. Every decode here reserves its pixels in the process's budget (``webapp.decode_budget``).

A finished mosaic's preview comes from its Deep Zoom pyramid (``pyramid_preview``): the
smallest level at least as big as the preview, a few dozen tiles read by range
(``PYRAMIDS``, ``dal.blobs.pyramid``), so it costs the same for a 400 MP mosaic as for a small
one, and a mosaic too big for a JPEG (over 65,500 px a side: only its pyramid exists) has
one too. Decoding the full-resolution JPEG instead would download it whole (100 MB and more)
into the web process.
"""

from __future__ import annotations

import bisect
import io
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from PIL import Image, ImageOps

from dal.blobs.pyramid import DZI_NAME, PyramidReader, tile_name
from mosaic.deepzoom import level_covering, level_size, level_tiles, read_descriptor, tile_origin
from mosaic.image_structure import check_structure
from mosaic.images import pillow_formats
from webapp.decode_budget import DECODES, decode_cost

_CACHE_BYTES = 64 * 1024 * 1024
# The sides (px, the longer side) previews are made at: a thumbnail, the page's card, the
# stage and the reduced download. Any other size from 64 to the largest snaps up to the next.
PREVIEW_SIDES = (240, 480, 960, 1600)


def snap_side(side: int) -> int:
    """The preview side that serves a request for ``side`` px: the next in ``PREVIEW_SIDES``."""
    return PREVIEW_SIDES[min(bisect.bisect_left(PREVIEW_SIDES, side), len(PREVIEW_SIDES) - 1)]


class PreviewCache:
    """A byte-bounded LRU of encoded previews, safe across gthread worker threads."""

    def __init__(self, *, max_bytes: int = _CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, ...], bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self._flights: dict[tuple[str, ...], Future[bytes]] = {}
        self.made = 0  # how many times ``make`` ran (single-flight is tested on it)

    def get(self, key: tuple[str, ...], make: Callable[[], bytes]) -> bytes:
        """The cached preview, or ``make()``'s, run once for all the callers waiting on ``key``."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = Future()
        if not leader:
            return flight.result()  # the first caller's preview, or its exception
        try:
            self.made += 1
            value = make()
        except BaseException as exc:
            with self._lock:
                self._flights.pop(key, None)
            flight.set_exception(exc)
            raise
        with self._lock:
            self._keep(key, value)
            self._flights.pop(key, None)
        flight.set_result(value)
        return value

    def _keep(self, key: tuple[str, ...], value: bytes) -> None:
        if key not in self._items and len(value) <= self.max_bytes:
            self._items[key] = value
            self._size += len(value)
            while self._size > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self._size -= len(dropped)

    def drop(self, prefix: str) -> None:
        """Forget every preview of one job (after it is deleted)."""
        with self._lock:
            for key in [k for k in self._items if k[0] == prefix]:
                self._size -= len(self._items.pop(key))


def jpeg_preview(data: bytes, *, max_side: int, quality: int = 85) -> bytes:
    """The image scaled down to fit ``max_side`` (never up), EXIF-oriented, as JPEG."""
    check_structure(data)  # a stored photo passed it at upload; checked again, it costs nothing
    with Image.open(io.BytesIO(data), formats=pillow_formats(data)) as image:
        image.draft("RGB", (max_side, max_side))  # a JPEG decodes at a reduced scale, a HEIC from its thumbnail
        with DECODES.reserve(decode_cost(data, image.width * image.height)):
            upright = ImageOps.exif_transpose(image)
            return _thumbnail(upright.convert("RGB"), max_side=max_side, quality=quality)


def rendered_preview(data: bytes, decode: Callable[[bytes], np.ndarray], *, max_side: int) -> bytes:
    """A rendered slice's preview: ``decode`` turns its ``.npy`` bytes (3 per pixel) into pixels."""
    with DECODES.reserve(len(data) // 3):
        return pixels_preview(decode(data), max_side=max_side)


def pixels_preview(pixels: np.ndarray, *, max_side: int, quality: int = 85) -> bytes:
    """The same for an ``(H, W, 3) uint8`` array (a rendered slice, ``dal.blobs.rendered``)."""
    return _thumbnail(Image.fromarray(pixels, "RGB"), max_side=max_side, quality=quality)


def pyramid_preview(read: Callable[[str], bytes], *, max_side: int, quality: int = 85, threads: int = 8) -> bytes:
    """A mosaic scaled to fit ``max_side``, from its pyramid's tiles.

    ``read(member)`` returns one member of the pyramid zip. The descriptor gives the size and
    the tiles' cut (older pyramids have 254 px tiles, newer 510). The level read is the
    smallest whose longer side reaches ``max_side`` (under twice that: at most 4 x 4 tiles of
    510 px for 1600 px)."""
    dzi = read_descriptor(read(DZI_NAME))
    width, height, cut = dzi.width, dzi.height, {"tile_size": dzi.tile_size}
    level = level_covering(width, height, max_side)
    columns, rows = level_tiles(width, height, level, **cut)
    size = level_size(width, height, level)
    places = [(c, r) for r in range(rows) for c in range(columns)]
    with DECODES.reserve(size[0] * size[1]), ThreadPoolExecutor(max_workers=min(threads, len(places))) as pool:
        canvas = Image.new("RGB", size)
        for (column, row), data in zip(places, pool.map(lambda p: read(tile_name(level, *p)), places), strict=True):
            with Image.open(io.BytesIO(data), formats=pillow_formats(data)) as tile:
                canvas.paste(tile.convert("RGB"), tile_origin(column, row, **cut, overlap=dzi.overlap))
        return _thumbnail(canvas, max_side=max_side, quality=quality)


def _thumbnail(image: Image.Image, *, max_side: int, quality: int) -> bytes:
    image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality, optimize=True)
    return out.getvalue()


PREVIEWS = PreviewCache()
# The indexes of the pyramids read lately (tiles for the viewer, previews), per process.
PYRAMIDS = PyramidReader()
