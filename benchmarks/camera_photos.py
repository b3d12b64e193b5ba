"""Camera-like photos for the library benchmark: 12 MP JPEGs of 3-5 MB, made fast and cached.

A phone's photo is 4032 x 3024, textured (JPEG at quality 90 keeps 3-5 MB of it), often
rotated by an EXIF orientation tag, sometimes portrait, and a burst gives several nearly the
same. Making 1,000 of them from scratch would take longer than indexing them, so a few **bases**
are built once (a smooth colour field, mid-scale blotches and fine grain, blended) and every
photo is a cheap variation of one: a wrap-around shift (``ImageChops.offset``) and per-channel
gains (a lookup table), then a JPEG encode (about 0.1 s of CPU each). Everything is
deterministic in the photo's number, so a rerun finds the files it made in the cache folder
and makes only the missing ones.

- every 10th photo (from 3) has EXIF orientation 6, from 6 orientation 8, from 9 orientation 3;
- every 7th is stored portrait (3024 x 4032);
- photos 20k+1 and 20k+2 are burst shots of 20k (a shift of a few pixels, the same gains);
- ``giant_photo``: one 100 MP photo (11548 x 8661, smoother, under the 50 MiB upload limit).
"""

from __future__ import annotations

import functools
import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageChops

SIZE = (4032, 3024)
GIANT_SIZE = (11548, 8661)  # 100.0 MP
BASES = 8
QUALITY = 90
ORIENTATION = 0x0112


@functools.cache
def _base(index: int) -> Image.Image:
    return textured(
        1000 + index, SIZE, (6 + index % 5, 8 + index % 7), (60 + 7 * index, 80 + 9 * index), grain=(2, 0.25)
    )


def textured(
    seed: int, size: tuple[int, int], low: tuple[int, int], mid: tuple[int, int], *, grain: tuple[int, float]
) -> Image.Image:
    """A camera-like texture of ``size``: random colour fields of ``low`` and ``mid`` (rows, cols)
    cells blown up and blended, with a grain at 1/``grain[0]`` of the size, weighted ``grain[1]``."""
    rng = np.random.default_rng(seed)
    width, height = size

    def field(rows: int, cols: int, resample: Image.Resampling) -> Image.Image:
        return Image.fromarray(rng.integers(0, 256, (rows, cols, 3), dtype=np.uint8)).resize((width, height), resample)

    blurred = field(*low, Image.Resampling.BICUBIC)
    detail = field(*mid, Image.Resampling.BILINEAR)
    fine = field(height // grain[0], width // grain[0], Image.Resampling.BILINEAR)
    return Image.blend(Image.blend(blurred, detail, 0.35), fine, grain[1])


def _params(number: int) -> tuple[int, int, int, tuple[float, float, float]]:
    """(base, dx, dy, gains) of photo ``number``; a burst shot is its leader's, shifted a little."""
    leader = number - number % 20 if number % 20 in (1, 2) else number
    rng = np.random.default_rng(leader)
    base = int(rng.integers(0, BASES))
    dx, dy = int(rng.integers(0, SIZE[0])), int(rng.integers(0, SIZE[1]))
    gains = tuple(float(g) for g in rng.uniform(0.7, 1.3, 3))
    if leader != number:
        dx, dy = dx + 6 * (number - leader), dy + 4 * (number - leader)
    return base, dx, dy, (gains[0], gains[1], gains[2])


def orientation(number: int) -> int:
    return {3: 6, 6: 8, 9: 3}.get(number % 10, 1)


def photo(number: int) -> bytes:
    """Photo ``number`` as JPEG bytes (see the module docstring)."""
    base, dx, dy, gains = _params(number)
    image = ImageChops.offset(_base(base), dx, dy)
    image = image.point([min(255, int(v * g)) for g in gains for v in range(256)])
    if number % 7 == 0:
        image = image.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    if orientation(number) != 1:
        exif[ORIENTATION] = orientation(number)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=QUALITY, exif=exif.tobytes())
    return out.getvalue()


def giant_photo() -> bytes:
    """One 100 MP photo, smoother than the others so that it stays under the upload limit."""
    image = _base(0).resize(GIANT_SIZE, Image.Resampling.BILINEAR)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=80)
    return out.getvalue()


def ensure(folder: Path, count: int, *, giant: bool = True) -> list[Path]:
    """Photos 0..count-1 (and the giant one) in ``folder``, made only when missing; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number in range(count):
        path = folder / f"IMG_{number:05d}.jpg"
        if not path.exists():
            partial = path.with_suffix(".part")
            partial.write_bytes(photo(number))
            partial.replace(path)
        paths.append(path)
    if giant:
        path = folder / "IMG_GIANT_100MP.jpg"
        if not path.exists():
            partial = path.with_suffix(".part")
            partial.write_bytes(giant_photo())
            partial.replace(path)
        paths.append(path)
    return paths
