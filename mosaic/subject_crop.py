"""The square a tile is cut from: the photo's faces kept, else its detail, not its centre.

Every way a photo becomes a tile cuts its square here: the indexer (``mosaic.photo_index``, a
person's uploads) and every library built in one go (``mosaic.library.build_library``: a folder or
zip given to ``photomosaics render -l`` or ``library create``, ``POST /api/libraries``). A face near
the edge of a portrait is not cut off by a centre crop anywhere.

- ``square_box``: the square of an image. Faces found by OpenCV's cascade detector are kept: the
  square holds the box around every face when it can, else the largest face; with no face the
  square goes where the edges are (a gradient-energy measure), the centre winning ties. The model
  is the LBP frontal-face cascade of Puttemans, Ergun and Goedemé (VISAPP 2017,
  ``models/lbpcascade_frontalface_improved.xml``, BSD licence in its header, from OpenCV's data):
  on the libraries benchmark's photos it costs a twentieth of the Haar cascade inside the wheel
  at the same size, and it saw no face in their grain, where the Haar cascade saw one in 5 of 10.
  Its window is 45 px: at ``SEARCH_SIDE`` it finds faces from an eighth of the shorter side up; a
  smaller face is a few pixels of a 64 px tile, and the edge measure places the square.
- ``subject_square``: ``square_box`` of an image of any size, searched on a copy of at most
  ``SEARCH_SIDE`` pixels on its shorter side (the face search costs by the pixel). A square
  image is its own square, searched for nothing.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

__all__ = ["SEARCH_SIDE", "detect_faces", "square_box", "subject_square"]

SEARCH_SIDE = 360  # the indexer's work side: a 12 MP photo's 1/8 reduced decode is searched as it is
_FACE_MIN = 24  # the smallest face searched for, in work pixels (the model's window)
_FACE_SCALE_STEP = 1.25  # between the sizes searched; 1.1 found no more faces here, at twice the CPU
_FACE_MODEL = Path(__file__).with_name("models") / "lbpcascade_frontalface_improved.xml"


_THREAD = threading.local()


def _face_cascade() -> Any:
    """This thread's face detector. An OpenCV detector keeps the image it works on inside itself,
    so one shared by threads races: the indexer's two threads got wrong boxes and "Assertion
    failed ... setWindow" errors (as OpenCV says: one algorithm object per thread)."""
    cascade = getattr(_THREAD, "cascade", None)
    if cascade is None:
        import cv2

        # One thread each: the indexer scales by processes, and OpenCV's pool only added CPU time.
        cv2.setNumThreads(1)
        cascade = cv2.CascadeClassifier(str(_FACE_MODEL))
        if cascade.empty():  # pragma: no cover - the package ships it
            raise RuntimeError(f"the face model {_FACE_MODEL} is missing or unreadable")
        _THREAD.cascade = cascade
    return cascade


def detect_faces(image: Image.Image) -> list[tuple[int, int, int, int]]:
    """Face boxes ``(x, y, w, h)`` in the image's pixels, largest first."""
    # No histogram equalisation: local binary patterns compare neighbours, so a monotonic
    # change of brightness or contrast does not change them.
    grey = np.ascontiguousarray(np.asarray(image.convert("L")))
    found = _face_cascade().detectMultiScale(
        grey, scaleFactor=_FACE_SCALE_STEP, minNeighbors=3, minSize=(_FACE_MIN, _FACE_MIN)
    )
    boxes = [(int(x), int(y), int(w), int(h)) for x, y, w, h in (found if len(found) else [])]
    return sorted(boxes, key=lambda b: -b[2] * b[3])


def _fit(low: int, high: int, side: int, length: int) -> int | None:
    """The start of a window of ``side`` in ``[0, length)`` holding ``[low, high)``, centred on it; None
    when it cannot hold it."""
    if high - low > side:
        return None
    centre = (low + high) / 2
    return int(min(max(round(centre - side / 2), 0), length - side))


def square_box(image: Image.Image, faces: list[tuple[int, int, int, int]]) -> tuple[int, int, int]:
    """``(left, top, side)`` of the square to keep (see the module docstring)."""
    width, height = image.size
    side = min(width, height)
    length = max(width, height)
    along_x = width > height
    if length == side:
        return 0, 0, side
    start: int | None = None
    if faces:
        lows = [x if along_x else y for x, y, w, h in faces]
        highs = [(x + w) if along_x else (y + h) for x, y, w, h in faces]
        start = _fit(min(lows), max(highs), side, length)
        if start is None:  # every face cannot fit: the largest one (faces are largest first)
            start = _fit(lows[0], highs[0], side, length)
    if start is None:
        start = _energy_start(image, side, along_x)
    return (start, 0, side) if along_x else (0, start, side)


def _energy_start(image: Image.Image, side: int, along_x: bool) -> int:
    """Where a window of ``side`` holds the most edge energy along the long axis (centre on ties)."""
    grey = np.asarray(image.convert("L"), dtype=np.float32)
    energy = np.abs(np.diff(grey, axis=0))[:, :-1] + np.abs(np.diff(grey, axis=1))[:-1, :]
    profile = energy.sum(axis=0 if along_x else 1)
    profile = np.concatenate([profile, [0.0]])
    sums = np.convolve(profile, np.ones(side, dtype=np.float64), mode="valid")
    positions = np.arange(len(sums))
    centre = (len(sums) - 1) / 2
    prior = 1.0 - 0.15 * np.abs(positions - centre) / max(1.0, centre)  # a mild preference for the centre
    return int(np.argmax(sums * prior))


def subject_square(image: Image.Image, search_side: int = SEARCH_SIDE) -> tuple[int, int, int]:
    """``(left, top, side)`` of ``square_box`` in ``image``'s pixels, found on a copy whose shorter
    side is at most ``search_side``."""
    width, height = image.size
    side = min(width, height)
    if width == height:
        return 0, 0, side
    scale = min(1.0, search_side / side)
    small = image
    if scale < 1.0:
        small = image.resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.Resampling.BOX)
    left, top, _ = square_box(small, detect_faces(small))
    along_x = width > height
    start = left * width / small.width if along_x else top * height / small.height
    start = min(max(round(start), 0), max(width, height) - side)
    return (start, 0, side) if along_x else (0, start, side)
