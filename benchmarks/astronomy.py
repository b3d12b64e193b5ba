"""A held-out narrow library: Stellarium's deep-sky photos and the surface maps of its bodies.

Issue 45 measured the narrow-library warning with a 624-photo astronomy library (deep-sky
photos, planet textures) that was not on this machine, so ``benchmarks.reach`` stood in for it
with the demo library's dark and blue tiles. This is the real kind: ``python -m
benchmarks.astronomy DIR`` fetches Debian's ``stellarium-data`` with ``apt-get download`` (a
Debian or Ubuntu machine with its package index; nothing is installed, about 250 MB), keeps
its deep-sky photos (``nebulae/default``: 555 in 0.22.2, from amateur and survey telescopes)
and the surface maps of the planets, moons, dwarf planets and asteroids (``BODIES``; the icons,
halos and rings beside them are left out), and writes each at most ``LONGEST`` px as a JPEG into
DIR. Then ``python -m benchmarks.reach --library-dir DIR`` asks the plan and renders the jobs
with it. The engine was never tuned on these pictures.

No ``main()``: ``make bench`` runs every module that has one, and this one downloads.
"""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image

from benchmarks.debian_pictures import command

PACKAGE = "stellarium-data"
DEEP_SKY = "usr/share/stellarium/nebulae/default"
TEXTURES = "usr/share/stellarium/textures"
# The bodies whose surface Stellarium paints (equirectangular maps), by file stem.
BODIES = frozenset(
    [
        "2007OR10",
        "amalthea",
        "ariel",
        "bennu",
        "bianca",
        "callisto",
        "ceres",
        "charon",
        "deimos",
        "dione",
        "dysnomia",
        "earthmap",
        "enceladus",
        "epimetheus",
        "eris",
        "eros",
        "europa",
        "ganymede",
        "gaspra",
        "haumea",
        "hyperion",
        "iapetus",
        "ida",
        "io",
        "janus",
        "jupiter",
        "mars",
        "mercury",
        "mimas",
        "miranda",
        "moon",
        "neptune",
        "nereid",
        "oberon",
        "phobos",
        "phoebe",
        "pluto",
        "prometheus",
        "proteus",
        "rhea",
        "saturn",
        "sedna",
        "sun",
        "tethys",
        "titan",
        "titania",
        "triton",
        "umbriel",
        "uranus",
        "venus",
        "vesta",
    ]
)
PHOTO_SUFFIXES = (".png", ".jpg", ".jpeg")
LONGEST = 512  # pixels: the tiles are 64 px or less; the deep-sky photos are 256-512 px already


def pictures(root: Path) -> list[Path]:
    """The deep-sky photos and the bodies' maps under an unpacked ``root``, sorted."""
    deep_sky = [p for p in (root / DEEP_SKY).glob("*") if p.suffix.lower() in PHOTO_SUFFIXES]
    bodies = [p for p in (root / TEXTURES).glob("*") if p.suffix.lower() in PHOTO_SUFFIXES and p.stem in BODIES]
    return sorted(p for p in deep_sky + bodies if p.is_file() and not p.is_symlink())


def write_library(root: Path, folder: Path) -> int:
    """Every picture of ``pictures(root)`` as a JPEG in ``folder``; returns how many."""
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in pictures(root):
        kind = "body" if path.parent.name == "textures" else "deep-sky"
        name = re.sub(r"[^A-Za-z0-9_-]+", "-", path.stem)
        with Image.open(path) as picture:
            image = picture.convert("RGB")
        image.thumbnail((LONGEST, LONGEST))
        image.save(folder / f"{kind}-{name}.jpg", quality=92)
        written += 1
    return written


if __name__ == "__main__":

    def _write(root: Path, target: Path) -> str:
        return f"{write_library(root, target)} pictures (deep-sky photos and the bodies' surface maps) in {target}"

    command("astronomy", (PACKAGE,), _write)
