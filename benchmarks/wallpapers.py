"""A held-out tile library: square crops of the pictures in Debian's desktop wallpapers.

The demo library is cut from the same scikit-image samples as the benchmark's targets, and the
engine was tuned on it. This one is not: landscapes, flowers, animals and abstract gradients
that the project never saw. ``python -m benchmarks.wallpapers DIR`` fetches the packages with
``apt-get download`` (a Debian or Ubuntu machine with its package index; nothing is
installed), keeps one file per picture (the packages ship each at several resolutions), and
writes 3 × 3 square crops of each, half its short side, as 128 px JPEGs into DIR. Then
``python -m benchmarks.fidelity sweep --library-dir DIR`` measures the goals with it.

No ``main()``: ``make bench`` runs every module that has one, and this one downloads.
"""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image

from benchmarks.debian_pictures import command

PACKAGES = (
    "gnome-backgrounds",
    "mate-backgrounds",
    "ukui-wallpapers",
    "lomiri-wallpapers",
    "plasma-workspace-wallpapers",
)
PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")
SMALLEST = 50_000  # bytes: thumbnails and icons are smaller
PER_SIDE = 3  # crops per side of each picture
TILE = 128  # pixels of each crop
LONGEST = 1024  # a picture is reduced to this before cropping (the tiles are 128 px anyway)


def pictures(root: Path) -> list[Path]:
    """One file per picture under ``root``: the largest of each KDE theme
    (``NAME/contents/images*/WxH.ext``, its light and dark versions one picture) and of each
    name without its ``WxH`` size. Symbolic links (other sizes of the same file) are skipped."""
    chosen: dict[str, tuple[int, Path]] = {}
    for path in sorted(root.rglob("*")):
        if path.suffix.lower() not in PHOTO_SUFFIXES or "screenshot" in path.name:
            continue
        if path.is_symlink() or not path.is_file():
            continue
        size = path.stat().st_size
        if size < SMALLEST:
            continue
        parts = path.as_posix().split("/contents/")
        key = parts[0] if len(parts) == 2 else re.sub(r"[_-]?\d+x\d+", "", path.stem).lower()
        if key not in chosen or size > chosen[key][0]:
            chosen[key] = (size, path)
    return sorted(path for _, path in chosen.values())


def crops(picture: Image.Image) -> list[Image.Image]:
    """``PER_SIDE`` × ``PER_SIDE`` square crops, half the short side each, spread evenly from
    corner to corner, at ``TILE`` px."""
    image = picture.convert("RGB")
    image.thumbnail((LONGEST, LONGEST))
    width, height = image.size
    side = min(width, height) // 2
    out = []
    for row in range(PER_SIDE):
        for col in range(PER_SIDE):
            left = (width - side) * col // (PER_SIDE - 1)
            top = (height - side) * row // (PER_SIDE - 1)
            box = (left, top, left + side, top + side)
            out.append(image.crop(box).resize((TILE, TILE), Image.Resampling.LANCZOS))
    return out


def write_library(root: Path, folder: Path) -> int:
    """Crops of every picture under ``root`` into ``folder``; returns how many were written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for number, path in enumerate(pictures(root)):
        name = re.sub(r"[^A-Za-z0-9_-]+", "-", path.relative_to(root).with_suffix("").as_posix())
        with Image.open(path) as picture:
            for k, crop in enumerate(crops(picture)):
                crop.save(folder / f"{number:03d}-{name}-{k}.jpg", quality=92)
                written += 1
    return written


if __name__ == "__main__":

    def _write(root: Path, target: Path) -> str:
        count = write_library(root, target)
        return f"{count} crops of {count // (PER_SIDE * PER_SIDE)} pictures in {target}"

    command("wallpapers", PACKAGES, _write)
