"""The web process's decoding budget: how many megapixels may be decoded at once.

A decoded photo costs 3 to 4 bytes a pixel (more while it is turned or converted), so a
process that decodes whatever arrives at once grows with the number of concurrent uploads:
four 60 MP photos are about a gigabyte. Every decode in the web app (an uploaded photo, each
library file, a preview of a stored photo) reserves its pixels here first, read from the
image's header. When the budget is full a request waits a moment (``wait_seconds``) for
another decode to finish, then answers 503 with ``Retry-After``: the client comes back, the
process stays inside its memory. A decode larger than the whole budget waits until it is
alone. The budget is per process: a pod running N gunicorn workers holds N of them.

A progressive JPEG costs more than its pixels: libjpeg holds every DCT coefficient of the image
while it decodes, at any scale (``mosaic.jpeg_memory``: 6 bytes a pixel with full-resolution
colour), so ``decode_cost`` adds those bytes, at the budget's 4 a pixel, to what such a decode
reserves. A flat 60 MP progressive JPEG of a few hundred KB (150 MP of budget) then runs alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from mosaic.jpeg_memory import progressive_frame
from webapp.errors import ApiError

DEFAULT_BUDGET_MEGAPIXELS = 100  # one photo at the 60 MP input limit, and room beside it
DEFAULT_WAIT_SECONDS = 2.0
RETRY_AFTER_SECONDS = 5


class DecodeBudget:
    """A weighted semaphore counted in pixels, shared by every thread of the process."""

    def __init__(
        self, megapixels: int = DEFAULT_BUDGET_MEGAPIXELS, *, wait_seconds: float = DEFAULT_WAIT_SECONDS
    ) -> None:
        self._condition = threading.Condition()
        self._in_use = 0
        self._granted = 0
        self.configure(megapixels, wait_seconds=wait_seconds)

    def configure(self, megapixels: int, *, wait_seconds: float = DEFAULT_WAIT_SECONDS) -> None:
        with self._condition:
            self.capacity = max(1, int(megapixels)) * 1_000_000
            self.wait_seconds = max(0.0, float(wait_seconds))
            self._condition.notify_all()

    @property
    def in_use(self) -> int:
        with self._condition:
            return self._in_use

    @property
    def granted(self) -> int:
        """How many reservations were ever granted: a request that decoded nothing leaves it unchanged."""
        with self._condition:
            return self._granted

    @contextmanager
    def reserve(self, pixels: int) -> Iterator[None]:
        """Hold ``pixels`` of the budget for the ``with`` block; 503 when it does not free in time."""
        need = min(max(1, int(pixels)), self.capacity)
        deadline = time.monotonic() + self.wait_seconds
        with self._condition:
            while self._in_use + need > self.capacity:
                left = deadline - time.monotonic()
                if left <= 0 or not self._condition.wait(left):
                    if self._in_use + need <= self.capacity:
                        break
                    raise ApiError(
                        503,
                        "busy_decoding",
                        "this server is decoding as many images as its memory allows; try again shortly",
                        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
                    )
            self._in_use += need
            self._granted += 1
        try:
            yield
        finally:
            with self._condition:
                self._in_use -= need
                self._condition.notify_all()


def decode_cost(data: bytes, pixels: int) -> int:
    """What decoding ``data`` to ``pixels`` output pixels reserves: those pixels, plus a progressive
    JPEG's coefficients at 4 bytes a pixel (the module docstring). A HEIC or AVIF photo (an ISO
    base media file) costs three times its pixels: libheif and libavif hold the picture's planes
    and their RGB beside Pillow's (measured 9 to 12 bytes a pixel, ``mosaic.photo_index``)."""
    if data[4:8] == b"ftyp":
        return 3 * pixels
    frame = progressive_frame(data)
    return pixels + (frame.coefficient_bytes // 4 if frame is not None else 0)


# The process's budget; ``webapp.create_app`` sizes it from the settings.
DECODES = DecodeBudget()
