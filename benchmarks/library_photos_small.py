"""Small camera-like photos for the 5,000-photo library benchmark: 1200 x 900 JPEGs, cached.

``benchmarks.camera_photos`` makes 12 MP photos (3-5 MB each, ~20 GB for 5,000); a 5,000-photo
library that proves the pipeline works end to end needs many distinct photos, not big ones.
Same recipe at a twelfth of the pixels, with more variety so 5,000 are distinct (and only the
bursts group): 24 **bases** (a smooth colour field, mid-scale blotches and fine grain,
blended), each photo one of them shifted with wrap-around, mirrored or not, with per-channel
gains; JPEG quality 90 (a few hundred KB). Deterministic in the photo's number, so a rerun
makes only the missing files.

- EXIF orientation as ``camera_photos.orientation`` (6, 8 or 3 on three photos in ten);
- every 7th stored portrait (900 x 1200);
- photos 20k+1 and 20k+2 are burst shots of 20k (a shift of a few pixels, the same gains).
"""

from __future__ import annotations

import functools
import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageChops

from benchmarks.camera_photos import ORIENTATION, orientation, textured

SIZE = (1200, 900)
BASES = 24
QUALITY = 90


@functools.cache
def _base(index: int) -> Image.Image:
    return textured(
        5000 + index, SIZE, (3 + index % 5, 4 + index % 7), (12 + 3 * index, 16 + 4 * index), grain=(3, 0.2)
    )


def _params(number: int) -> tuple[int, int, int, bool, tuple[float, float, float]]:
    """(base, dx, dy, mirrored, gains) of photo ``number``; a burst shot is its leader's, shifted a little."""
    leader = number - number % 20 if number % 20 in (1, 2) else number
    rng = np.random.default_rng(90_000 + leader)
    base = int(rng.integers(0, BASES))
    dx, dy = int(rng.integers(0, SIZE[0])), int(rng.integers(0, SIZE[1]))
    mirrored = bool(rng.integers(0, 2))
    gains = tuple(float(g) for g in rng.uniform(0.55, 1.45, 3))
    if leader != number:
        dx, dy = dx + 3 * (number - leader), dy + 2 * (number - leader)
    return base, dx, dy, mirrored, (gains[0], gains[1], gains[2])


def photo(number: int) -> bytes:
    """Photo ``number`` as JPEG bytes (see the module docstring)."""
    base, dx, dy, mirrored, gains = _params(number)
    image = ImageChops.offset(_base(base), dx, dy)
    if mirrored:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    image = image.point([min(255, int(v * g)) for g in gains for v in range(256)])
    if number % 7 == 0:
        image = image.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    if orientation(number) != 1:
        exif[ORIENTATION] = orientation(number)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=QUALITY, exif=exif.tobytes())
    return out.getvalue()


def ensure(folder: Path, count: int) -> list[Path]:
    """Photos 0..count-1 in ``folder``, made only when missing; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number in range(count):
        path = folder / f"PHOTO_{number:05d}.jpg"
        if not path.exists():
            partial = path.with_suffix(".part")
            partial.write_bytes(photo(number))
            partial.replace(path)
        paths.append(path)
    return paths


if __name__ == "__main__":
    import sys

    ensure(Path(sys.argv[1]), int(sys.argv[2]))
