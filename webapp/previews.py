"""Downscaled JPEG previews of stored images, cached in memory.

The page shows each slice's mosaic as soon as it is rendered, a thumbnail per job in the
gallery and the source photo behind the progress bands. The originals are PNG bands of up
to tens of megapixels; a browser needs a JPEG of screen size. Previews are deterministic
(rendered slices never change), so they are cached per process, bounded by total bytes.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageOps

_CACHE_BYTES = 64 * 1024 * 1024


class PreviewCache:
    """A byte-bounded LRU of encoded previews, safe across gthread worker threads."""

    def __init__(self, *, max_bytes: int = _CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, ...], bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...], make: Callable[[], bytes]) -> bytes:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make()
        with self._lock:
            if key not in self._items and len(value) <= self.max_bytes:
                self._items[key] = value
                self._size += len(value)
                while self._size > self.max_bytes:
                    _, dropped = self._items.popitem(last=False)
                    self._size -= len(dropped)
        return value

    def drop(self, prefix: str) -> None:
        """Forget every preview of one job (after it is deleted)."""
        with self._lock:
            for key in [k for k in self._items if k[0] == prefix]:
                self._size -= len(self._items.pop(key))


def jpeg_preview(data: bytes, *, max_side: int, quality: int = 85) -> bytes:
    """The image scaled down to fit ``max_side`` (never up), EXIF-oriented, as JPEG."""
    with Image.open(io.BytesIO(data)) as image:
        image = ImageOps.exif_transpose(image)
        image.draft("RGB", (max_side, max_side))
        return _thumbnail(image.convert("RGB"), max_side=max_side, quality=quality)


def pixels_preview(pixels: np.ndarray, *, max_side: int, quality: int = 85) -> bytes:
    """The same for an ``(H, W, 3) uint8`` array (a rendered slice, ``dal.rendered``)."""
    return _thumbnail(Image.fromarray(pixels, "RGB"), max_side=max_side, quality=quality)


def _thumbnail(image: Image.Image, *, max_side: int, quality: int) -> bytes:
    image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality, optimize=True)
    return out.getvalue()


PREVIEWS = PreviewCache()
