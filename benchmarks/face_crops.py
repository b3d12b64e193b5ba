"""Faces near the edge: does the indexer's square tile hold the whole face where a square can?

scikit-image's ``data.astronaut()`` (512 x 512) has one frontal face; its box is found once on
the original (OpenCV's cascade, checked against where the face is: the upper middle of the
picture). The head, with a margin, is pasted on camera-like backgrounds (``camera_photos``
bases) of five aspect ratios, at a scale of 10-30 % of the shorter side, near one end of the
long axis (the first or last quarter: where a centre crop cuts), anywhere across. Each photo
goes through ``mosaic.photo_index.index_photo`` as JPEG bytes, as the indexer gets them, and
the known box, in the reduced image's pixels, is checked against the square it kept and
against the centre square. A square can always hold the face here (the face is shorter than
the short side), so every photo counts. The same photos are also cut as a library built in one
go cuts them (``mosaic.library.build_library``: ``render -l``, ``library create``): decoded to
``decode_size`` and squared by ``mosaic.subject_crop.subject_square``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image

ASPECTS = ((4, 3), (3, 4), (16, 9), (9, 16), (3, 2))
LONG_SIDE = 1600
TOLERANCE = 2  # pixels of the reduced image: rounding of the scale


@dataclass(frozen=True)
class FaceResult:
    photos: int
    kept: int  # the indexer's square holds the whole face box
    library_kept: int  # so does the square of a library built in one go (build_library)
    centre: int  # the centre square would have
    detected: int  # photos where OpenCV found at least one face


def _astronaut() -> tuple[Image.Image, tuple[int, int, int, int]]:
    from skimage import data

    from mosaic.subject_crop import detect_faces

    image = Image.fromarray(data.astronaut())
    faces = detect_faces(image)
    if not faces:
        raise RuntimeError("OpenCV does not find the astronaut's face")
    x, y, w, h = faces[0]
    if not (100 < x + w / 2 < 400 and y + h / 2 < 300):  # the face is in the upper middle
        raise RuntimeError(f"unexpected face box {faces[0]} on the astronaut")
    return image, (x, y, w, h)


def _case(number: int, head: Image.Image, box: tuple[int, int, int, int]) -> tuple[bytes, tuple[float, ...], int]:
    """JPEG bytes, the face box (x0, y0, x1, y1) on the canvas, and the canvas' shorter side."""
    from benchmarks.camera_photos import _base

    rng = np.random.default_rng(5000 + number)
    aw, ah = ASPECTS[number % len(ASPECTS)]
    scale = LONG_SIDE / max(aw, ah)
    width, height = round(aw * scale), round(ah * scale)
    short = min(width, height)
    background = _base(number % 8).crop((0, 0, width, height)).copy()
    face_side = short * rng.uniform(0.10, 0.30)  # the face box's width on the canvas
    k = face_side / box[2]
    pasted = head.resize((max(1, round(head.width * k)), max(1, round(head.height * k))), Image.Resampling.LANCZOS)
    along_x = width > height
    long_len, across_len = (width, height) if along_x else (height, width)
    p_long, p_across = (pasted.width, pasted.height) if along_x else (pasted.height, pasted.width)
    near_start = number % 2 == 0
    span = max(1, long_len // 4 - p_long // 2)
    start = int(rng.integers(0, span)) if near_start else long_len - p_long - int(rng.integers(0, span))
    across = int(rng.integers(0, max(1, across_len - p_across)))
    left, top = (start, across) if along_x else (across, start)
    background.paste(pasted, (left, top))
    face = (left + box[0] * k, top + box[1] * k, left + (box[0] + box[2]) * k, top + (box[1] + box[3]) * k)
    out = io.BytesIO()
    background.save(out, "JPEG", quality=90)
    return out.getvalue(), face, short


def _holds(square: tuple[int, int, int], face: tuple[float, ...]) -> bool:
    left, top, side = square
    x0, y0, x1, y1 = face
    return (
        x0 >= left - TOLERANCE
        and y0 >= top - TOLERANCE
        and x1 <= left + side + TOLERANCE
        and y1 <= top + side + TOLERANCE
    )


def measure(count: int = 60) -> FaceResult:
    from mosaic.images import open_image
    from mosaic.library import decode_size
    from mosaic.photo_index import index_photo
    from mosaic.subject_crop import subject_square

    astronaut, box = _astronaut()
    x, y, w, h = box
    margin = w // 3  # some hair, neck and background around the face, as in a photo
    head = astronaut.crop((max(0, x - margin), max(0, y - margin), min(512, x + w + margin), min(512, y + h + margin)))
    box = (x - max(0, x - margin), y - max(0, y - margin), w, h)
    kept = centre = detected = library_kept = 0
    for number in range(count):
        data, face, short = _case(number, head, box)
        indexed = index_photo(data)
        work_w, work_h = indexed.work_size
        s = min(work_w, work_h) / short
        scaled = tuple(v * s for v in face)
        kept += _holds(indexed.box, scaled)
        side = min(work_w, work_h)
        centre += _holds(((work_w - side) // 2, (work_h - side) // 2, side), scaled)
        detected += indexed.faces > 0
        image = open_image(data, min_size=decode_size(data))  # as build_library decodes it
        s = min(image.size) / short
        library_kept += _holds(subject_square(image), tuple(v * s for v in face))
    return FaceResult(photos=count, kept=kept, centre=centre, detected=detected, library_kept=library_kept)
