"""The demo tile library: real photographs cut from sample images that ship inside wheels.

A fresh machine with no network but the package registries still needs a good tile library
for ``make run``. scikit-image ships a handful of photographs inside its wheel
(``skimage/data``: the astronaut, the cat, coffee, the Hubble deep field, a motorcycle, a
retina, a rocket launch, a microscope slide, and grey-scale scenes and textures) and
scikit-learn ships two more (``sklearn/datasets/images``: a Chinese temple and a flower).
The files are read straight from the installed packages, so no third-party image is
committed here and nothing is downloaded.

Each photo is cut into square crops at several scales and positions, plus their mirror
images; from that pool the tiles are chosen by farthest-point sampling on a small
colour-and-layout signature (2×2 CIELAB means), so the library spreads over as many colours
and shapes as the photos allow instead of 400 shades of the astronaut's suit. Everything is
deterministic: the same packages give the same tiles in the same order.
"""

from __future__ import annotations

import importlib.util
import io
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from dal.config import StorageClients
from dal.errors import PhotoMosaicsError
from dal.libraries import LibraryStore

log = logging.getLogger(__name__)

DEMO_LIBRARY_NAME = "demo"
DEMO_DESCRIPTION = "Demo: crops of the sample photographs shipped with scikit-image and scikit-learn"
TILE_PIXELS = 64

# (package, path inside the package). Only real photographs: the colour wheel, logos and
# phantoms that also ship there would make poor tiles.
_PHOTOS: tuple[tuple[str, str], ...] = (
    ("skimage", "data/astronaut.png"),
    ("skimage", "data/chelsea.png"),
    ("skimage", "data/coffee.png"),
    ("skimage", "data/hubble_deep_field.jpg"),
    ("skimage", "data/ihc.png"),
    ("skimage", "data/motorcycle_left.png"),
    ("skimage", "data/retina.jpg"),
    ("skimage", "data/rocket.jpg"),
    ("skimage", "data/camera.png"),
    ("skimage", "data/coins.png"),
    ("skimage", "data/moon.png"),
    ("skimage", "data/grass.png"),
    ("skimage", "data/gravel.png"),
    ("skimage", "data/brick.png"),
    ("sklearn", "datasets/images/china.jpg"),
    ("sklearn", "datasets/images/flower.jpg"),
)
# Crop side as a fraction of the photo's shorter side, and positions per axis at that scale.
_SCALES: tuple[tuple[float, int], ...] = ((1.0, 1), (0.6, 3), (0.4, 4), (0.25, 6), (0.15, 8), (0.1, 10))
# The signature weighs the mean colour (chroma a bit more than lightness, so the few blue and
# green crops are not crowded out by orange) above the layout inside the tile.
_COLOUR_WEIGHTS = np.array([1.0, 1.5, 1.5])
_LAYOUT_WEIGHT = 0.4
_GREY_CHROMA = 10.0


class DemoPhotosMissing(PhotoMosaicsError, RuntimeError):
    """None of the sample photos are installed (scikit-image / scikit-learn missing)."""


@dataclass(frozen=True)
class _Crop:
    photo: int
    box: tuple[int, int, int, int]
    flip: bool


def _package_dir(package: str) -> Path | None:
    """The folder of an installed package, found without importing it (sklearn is slow to import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def demo_photos() -> list[tuple[str, Image.Image]]:
    """The sample photographs that are installed, as RGB images, in a fixed order."""
    photos = []
    for package, relative in _PHOTOS:
        root = _package_dir(package)
        path = root / relative if root else None
        if path is None or not path.is_file():
            log.info("demo photo %s/%s is not installed; skipped", package, relative)
            continue
        with Image.open(path) as image:
            photos.append((Path(relative).stem, image.convert("RGB")))
    if not photos:
        raise DemoPhotosMissing(
            "no sample photos found: install scikit-image and scikit-learn (pip install -e '.[test]')"
        )
    return photos


def _candidates(photos: list[tuple[str, Image.Image]]) -> list[_Crop]:
    crops = []
    for index, (_, image) in enumerate(photos):
        width, height = image.size
        short = min(width, height)
        for fraction, steps in _SCALES:
            side = max(TILE_PIXELS, round(short * fraction))
            xs = np.linspace(0, width - side, num=max(steps, 1)).round().astype(int)
            ys = np.linspace(0, height - side, num=max(steps, 1)).round().astype(int)
            for y in sorted(set(ys.tolist())):
                for x in sorted(set(xs.tolist())):
                    box = (x, y, x + side, y + side)
                    crops.append(_Crop(index, box, flip=False))
                    crops.append(_Crop(index, box, flip=True))
    return crops


def _to_lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB ``(H, W, 3) uint8`` to CIELAB floats (L 0..100, a/b -128..127) with LittleCMS (D50)."""
    from PIL import ImageCms

    transform = ImageCms.buildTransform(
        ImageCms.createProfile("sRGB"), ImageCms.createProfile("LAB"), "RGB", "LAB"
    )
    raw = np.asarray(ImageCms.applyTransform(Image.fromarray(rgb), transform))
    ab = raw[..., 1:].view(np.int8).astype(np.float64)  # Pillow stores a, b as signed bytes
    return np.concatenate([raw[..., :1] * (100 / 255), ab], axis=-1)


def _signatures(photos: list[tuple[str, Image.Image]], crops: list[_Crop]) -> np.ndarray:
    """Per crop: mean CIELAB colour, then the 2×2 CIELAB layout around it (mirrored with the crop)."""
    quads = np.empty((len(crops), 2, 2, 3), np.uint8)
    for row, crop in enumerate(crops):
        quads[row] = np.asarray(photos[crop.photo][1].resize((2, 2), Image.Resampling.BOX, box=crop.box))
        if crop.flip:
            quads[row] = quads[row][:, ::-1]
    lab = _to_lab(quads.reshape(-1, 2, 3)).reshape(len(crops), 4, 3)
    mean = lab.mean(axis=1)
    layout = (lab - mean[:, None, :]).reshape(len(crops), 12)
    return np.concatenate([mean * _COLOUR_WEIGHTS, layout * _LAYOUT_WEIGHT], axis=1)


def _farthest_points(features: np.ndarray) -> list[int]:
    """Order the rows by greedy farthest-point sampling: each is the farthest from all before it.

    Starts from the row nearest the mean, so the order is deterministic.
    """
    start = int(np.argmin(((features - features.mean(axis=0)) ** 2).sum(axis=1)))
    order = [start]
    distance = ((features - features[start]) ** 2).sum(axis=1)
    distance[start] = -1.0
    for _ in range(len(features) - 1):
        pick = int(np.argmax(distance))
        order.append(pick)
        distance = np.minimum(distance, ((features - features[pick]) ** 2).sum(axis=1))
        distance[pick] = -1.0
    return order


def _colour_bin(lab: np.ndarray) -> tuple[int, int]:
    """A coarse colour class of a mean CIELAB colour: (lightness band, hue sector or 8 = grey)."""
    lightness = min(int(lab[0] // 25), 3)
    chroma = float(np.hypot(lab[1], lab[2]))
    if chroma < _GREY_CHROMA:
        return lightness, 8
    hue = float(np.degrees(np.arctan2(lab[2], lab[1]))) % 360.0
    return lightness, int(hue // 45) % 8


def _select(features: np.ndarray, count: int) -> list[int]:
    """Pick ``count`` rows spread over colour classes first, then within each class.

    The photos are mostly orange and brown; picking round-robin over coarse colour classes
    (each class in its own farthest-point order) gives the rarer blues and greens their share.
    """
    means = features[:, :3] / _COLOUR_WEIGHTS
    classes: dict[tuple[int, int], list[int]] = {}
    for row, lab in enumerate(means):
        classes.setdefault(_colour_bin(lab), []).append(row)
    queues = []
    for key in sorted(classes):
        rows = np.array(classes[key])
        queues.append([int(rows[i]) for i in _farthest_points(features[rows])])
    chosen: list[int] = []
    depth = 0
    while len(chosen) < min(count, len(features)):
        for queue in queues:
            if depth < len(queue) and len(chosen) < count:
                chosen.append(queue[depth])
        depth += 1
    return chosen


def demo_tile_images(count: int = 400, *, quality: int = 90) -> list[tuple[str, bytes]]:
    """``count`` varied square JPEG tiles of 64 px, as (name, bytes), deterministic.

    Fewer are returned only when the installed photos give fewer distinct crops.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    photos = demo_photos()
    crops = _candidates(photos)
    features = _signatures(photos, crops)
    tiles = []
    for crop in (crops[i] for i in _select(features, count)):
        name, image = photos[crop.photo]
        tile = image.resize((TILE_PIXELS, TILE_PIXELS), Image.Resampling.LANCZOS, box=crop.box, reducing_gap=3.0)
        if crop.flip:
            tile = tile.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        out = io.BytesIO()
        tile.save(out, format="JPEG", quality=quality)
        x, y, right, _ = crop.box
        # The ordinal keeps names unique: boxes rounded to whole pixels can coincide.
        tag = f"{len(tiles):04d}-{name}-{right - x:.0f}-{x:.0f}-{y:.0f}{'-m' if crop.flip else ''}"
        tiles.append((tag, out.getvalue()))
    return tiles


def ensure_demo_library(storage: StorageClients, *, prefix: str = "", count: int = 400) -> str:
    """Create the library ``demo`` in storage unless it is there already; return its URI.

    ``photomosaics run`` and ``photomosaics web --demo-library`` call this at start-up.
    """
    store = LibraryStore(storage, prefix=prefix)
    if store.exists(DEMO_LIBRARY_NAME):
        return store.uri(DEMO_LIBRARY_NAME)
    log.info("creating the demo tile library (%d tiles from the sample photos)", count)
    return store.create_from_images(DEMO_LIBRARY_NAME, DEMO_DESCRIPTION, demo_tile_images(count))
