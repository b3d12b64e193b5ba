"""The demo tile library: real photographs cut from sample images that ship inside wheels.

A fresh machine with no network but the package registries still needs a good tile library
for ``make run``. scikit-image ships a handful of photographs inside its wheel (``skimage/data``:
the astronaut, the cat, coffee, the Hubble deep field, a motorcycle, a retina, a rocket launch,
a microscope slide, grey-scale scenes and textures), scikit-learn two more
(``sklearn/datasets/images``: a Chinese temple, a flower). They are read from the installed
packages: no third-party image is committed here and nothing is downloaded.

The library has ``DEMO_TILES`` (2,100) tiles of 64 px, made in three steps:

1. **Real crops.** Each photo is cut into square crops at several scales, on a grid of
   half-overlapping positions (no mirror images: the engine places every tile mirrored too).
   Crops are taken in turn from coarse colour classes (lightness band × hue sector), each
   class in farthest-point order on a small signature (the mean CIELAB colour, chroma
   weighted up, and the 2×2 layout around it), so the rare blues and greens get their share
   before the hundredth shade of the astronaut's suit. Near-duplicates in a rare class are
   kept on purpose: a flat area needs 49 different tiles at the default variety, and
   without its dozens of flat blue patches (a distinct-crops floor, tried) the rocket's sky
   lost 0.1 SSIM at 1 MP, tile 16. Smooth crops get no turns of their own (tried too: a
   quarter of the library became flat patches, mosaics lost their visible photos, and the
   scores did not move with a library that holds no crop of the target).
2. **Colour-graded crops, only where a gap is.** Sixteen photos are mostly orange, brown and
   grey: dark and saturated colours, which the whole photo set lacks, are where a mosaic made
   from them shows a wrong colour or the same few tiles (the retina's black, a blue sky).
   The colours the library should reach are the in-gamut CIELAB colours on a grid
   (``COVERAGE_STEP`` apart); one is *covered* when a tile's mean is within
   ``COVERAGE_RADIUS`` (ΔE76) of it. Greedily, the grid colour that would cover the most
   uncovered ones is taken, and the unused crop whose mean is nearest to it is graded to
   that mean: a lightness curve, a hue rotation and a chroma scale plus shift in CIELAB,
   keeping the crop's own detail. That repeats until no colour would cover ``_MIN_GAIN``
   more grid colours or ``GRADED_SHARE`` of the library is graded. So a graded tile is always
   a real photograph, recoloured, and only where the real crops leave a measured gap
   (27 % of the grid covered by the old 640 real crops, 96 % by this library).
3. **Order.** All tiles, real and graded, are ordered the same way again, so any prefix is a
   spread-out library too: ``demo_tile_images(n)`` (``n <= DEMO_TILES``) is the default's first ``n``.

Everything is deterministic: the same packages give the same tiles in the same order. Colour
arithmetic uses only look-up tables and elementwise IEEE arithmetic (no ``pow``, ``sin`` or
BLAS), so no CPU-specific vector maths can flip a pixel.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import logging
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from dal.blobs.libraries import LibraryStore
from dal.config import StorageClients
from dal.errors import PhotoMosaicsError
from mosaic.gamut import (
    COVERAGE_RADIUS,
    COVERAGE_STEP,
    Grade,
    apply_grade,
    covered_by,
    fit_grade,
    grid_neighbours,
    in_gamut_grid,
    mean_lab,
)
from mosaic.library import TileLibrary
from mosaic.sources import fingerprint

log = logging.getLogger(__name__)

DEMO_LIBRARY_NAME = "demo"
DEMO_DESCRIPTION = "Demo: crops of the sample photographs shipped with scikit-image and scikit-learn"
TILE_PIXELS = 64
# Above 2,048 tiles (4,096 candidates with mirror images) the engine searches an inverted file
# (mosaic/tile_index.py), cheaper than the full scan: against the 640-tile render, 2,000 tiles
# took 2.2-2.5x at 12 MP, tile 16 and 1.4-2.8x at 1 MP, tile 8; 2,100 tiles 1.2x and 0.7x
# (warm, interleaved, on a busy machine).
DEMO_TILES = 2100
GRADED_SHARE = 0.3  # at most this share of the library is colour-graded crops

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
# Crop side as a fraction of the photo's shorter side (at least TILE_PIXELS); crops of one
# scale are placed every half side, so neighbours overlap by half.
_SCALES: tuple[float, ...] = (1.0, 0.6, 0.4, 0.25, 0.15, 0.1)
# The signature weighs the mean colour (chroma a bit more than lightness, so the few blue and
# green crops are not crowded out by orange) above the layout inside the tile.
_COLOUR_WEIGHTS = np.array([1.0, 1.5, 1.5])
_LAYOUT_WEIGHT = 0.4
_GREY_CHROMA = 10.0
_THUMB = 16  # the crops' thumbnails, from which signatures and grades are computed
_MIN_GAIN = 4  # a graded tile must cover at least this many more grid colours


class DemoPhotosMissing(PhotoMosaicsError, RuntimeError):
    """None of the sample photos are installed (scikit-image / scikit-learn missing)."""


@dataclass(frozen=True)
class _Crop:
    photo: int
    box: tuple[int, int, int, int]
    grade: Grade | None = None


def _package_dir(package: str) -> Path | None:
    """The folder of an installed package, found without importing it (sklearn is slow to import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def demo_source_key(count: int = DEMO_TILES) -> str:
    """A key that changes whenever ``demo_tile_images(count)`` could: ``mosaic.sources.fingerprint``
    of the installed sample photos, with this module's code, NumPy's version and ``count``. For
    a disk cache of the built library (``photomosaics render --library demo``: building it takes
    seconds)."""
    return fingerprint(
        [(str(path), path) for _, path in demo_photo_files()], salt=f"demo\0{count}\0{np.__version__}", code=[__file__]
    )


def demo_photo_files(*, exclude: Collection[str] = ()) -> list[tuple[str, Path]]:
    """The sample photo files that are installed, as (name, path), in a fixed order, without
    those named (by file stem) in ``exclude``."""
    found = []
    for package, relative in _PHOTOS:
        if Path(relative).stem in exclude:
            continue
        root = _package_dir(package)
        path = root / relative if root else None
        if path is None or not path.is_file():
            log.info("demo photo %s/%s is not installed; skipped", package, relative)
            continue
        found.append((Path(relative).stem, path))
    return found


def demo_photos(*, exclude: Collection[str] = ()) -> list[tuple[str, Image.Image]]:
    """The sample photographs that are installed, as RGB images, in a fixed order, without
    those named (by file stem) in ``exclude``."""
    photos = []
    for name, path in demo_photo_files(exclude=exclude):
        with Image.open(path) as image:
            photos.append((name, image.convert("RGB")))
    if not photos and exclude:
        raise ValueError(f"every installed sample photo is excluded ({', '.join(sorted(exclude))})")
    if not photos:
        raise DemoPhotosMissing(
            "no sample photos found: install scikit-image and scikit-learn (pip install -e '.[demo]')"
        )
    return photos


def _positions(length: int, side: int) -> list[int]:
    steps = 1 + -(-2 * (length - side) // side)  # every half side, both ends included
    return sorted(set(np.linspace(0, length - side, num=steps).round().astype(int).tolist()))


def _candidates(photos: list[tuple[str, Image.Image]]) -> list[_Crop]:
    crops, seen = [], set()
    for index, (_, image) in enumerate(photos):
        width, height = image.size
        for fraction in _SCALES:
            side = max(TILE_PIXELS, round(min(width, height) * fraction))
            for y in _positions(height, side):
                for x in _positions(width, side):
                    if (index, x, y, side) not in seen:
                        seen.add((index, x, y, side))
                        crops.append(_Crop(index, (x, y, x + side, y + side)))
    return crops


# --- colour: CIELAB (D65) coverage, with the engine's transforms (mosaic.signatures) ---


def _thumbnails(photos: list[tuple[str, Image.Image]], crops: list[_Crop]) -> np.ndarray:
    """``_THUMB`` px box-filtered thumbnails of the crops, cut from photos reduced so that the
    smallest crop is ``_THUMB`` px wide (four times faster than from the full photos)."""
    factor = TILE_PIXELS // _THUMB
    reduced = [image.reduce(factor) for _, image in photos]
    thumbs = np.empty((len(crops), _THUMB, _THUMB, 3), np.uint8)
    for row, crop in enumerate(crops):
        left, top, right, bottom = crop.box
        box = (left / factor, top / factor, right / factor, bottom / factor)
        thumbs[row] = np.asarray(reduced[crop.photo].resize((_THUMB, _THUMB), Image.Resampling.BOX, box=box))
    return thumbs


def _signatures(thumbs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per thumbnail: the mean CIELAB colour, and the feature row (weighted mean, then the 2×2
    CIELAB layout around it) that the selection spreads out."""
    n, half = len(thumbs), _THUMB // 2
    quads = thumbs.reshape(n, 2, half, 2, half, 3).transpose(0, 1, 3, 2, 4, 5).reshape(n * 4, half, half, 3)
    layout = mean_lab(quads).reshape(n, 4, 3)
    mean = mean_lab(thumbs)
    features = np.concatenate(
        [mean * _COLOUR_WEIGHTS, (layout - mean[:, None, :]).reshape(n, 12) * _LAYOUT_WEIGHT], axis=1
    )
    return mean, features


def _farthest_points(features: np.ndarray) -> Iterator[int]:
    """The rows in greedy farthest-point order (each the farthest from all before it), lazily.

    Starts from the row nearest the mean, so the order is deterministic.
    """
    centred = features - features.mean(axis=0)
    pick = int(np.argmin(np.einsum("ij,ij->i", centred, centred)))
    distance = np.full(len(features), np.inf)
    for _ in range(len(features)):
        yield pick
        diff = features - features[pick]
        np.minimum(distance, np.einsum("ij,ij->i", diff, diff), out=distance)
        distance[pick] = -1.0
        pick = int(np.argmax(distance))


def _colour_bin(lab: np.ndarray) -> tuple[int, int]:
    """A coarse colour class of a mean CIELAB colour: (lightness band, 45° hue sector or 8 =
    grey). The sector comes from comparisons, not ``arctan2``, so no vector maths can move a
    colour on a boundary to the next class."""
    lightness = min(int(lab[0] // 25), 3)
    a, b = float(lab[1]), float(lab[2])
    if a * a + b * b < _GREY_CHROMA * _GREY_CHROMA:
        return lightness, 8
    if b >= 0 and a > 0:
        sector = 0 if b < a else 1
    elif a <= 0 and b > 0:
        sector = 2 if -a < b else 3
    elif b <= 0 and a < 0:
        sector = 4 if -b < -a else 5
    else:
        sector = 6 if a < -b else 7
    return lightness, sector


def _order(means: np.ndarray, features: np.ndarray, count: int) -> list[int]:
    """The first ``count`` rows, in turn from each coarse colour class, each class in its own
    farthest-point order.

    The photos are mostly orange and brown: taking turns gives the rarer blues and greens
    their share, down to their near-duplicates (a dozen flat patches of the rocket's sky are
    what a flat sky needs: the engine uses 49 different tiles in any flat area).
    """
    classes: dict[tuple[int, int], list[int]] = {}
    for row, lab in enumerate(means):
        classes.setdefault(_colour_bin(lab), []).append(row)
    queues = [(np.array(classes[key]), _farthest_points(features[classes[key]])) for key in sorted(classes)]
    chosen: list[int] = []
    while len(chosen) < min(count, len(features)):
        for rows, queue in queues:
            picked = next(queue, None)
            if picked is not None and len(chosen) < count:
                chosen.append(int(rows[picked]))
    return chosen


def _fill_gaps(means: np.ndarray, thumbs: np.ndarray, chosen: list[int], budget: int) -> list[tuple[int, Grade]]:
    """Up to ``budget`` (crop row, grade) that cover the most uncovered grid colours.

    Greedy set cover on the in-gamut grid: each step takes the grid colour with the most
    uncovered grid colours within the radius, grades the unused crop nearest to it, and
    counts what the graded mean (not the aim) really covers.
    """
    grid = in_gamut_grid()
    covered = covered_by(means[chosen], COVERAGE_STEP, COVERAGE_RADIUS)
    neighbours = grid_neighbours(COVERAGE_STEP, COVERAGE_RADIUS)
    uncovered = np.append(~covered, False)  # index -1 (padding) reads False
    gain = uncovered[neighbours].sum(axis=1)
    free = np.ones(len(means), bool)
    free[chosen] = False
    out: list[tuple[int, Grade]] = []
    tried = np.zeros(len(grid), bool)
    while len(out) < budget:
        gain[tried] = -1
        best = int(np.argmax(gain))
        if gain[best] < _MIN_GAIN:
            break
        tried[best] = True
        target = grid[best]
        source = int(np.argmin(np.where(free, ((means - target) ** 2).sum(axis=1), np.inf)))
        grade, reached = fit_grade(thumbs[source], target)
        newly = np.flatnonzero(~covered & (((grid - reached) ** 2).sum(axis=1) <= COVERAGE_RADIUS**2))
        if len(newly) < _MIN_GAIN:
            continue  # clipping kept it from the gap: leave the crop for another colour
        free[source] = False
        out.append((source, grade))
        covered[newly] = True
        hit = neighbours[newly].ravel()
        gain -= np.bincount(hit[hit >= 0], minlength=len(grid))
    return out


@functools.lru_cache(maxsize=4)
def _plan(count: int, exclude: frozenset[str]) -> tuple[_Crop, ...]:
    """The ordered crops (real and graded) of a library of ``count`` tiles from
    ``demo_photos(exclude=exclude)``. Cached: only crop boxes and grades, a few hundred kB,
    so that tests asking for several prefixes pay the selection once."""
    photos = demo_photos(exclude=exclude)
    crops = _candidates(photos)
    thumbs = _thumbnails(photos, crops)
    means, features = _signatures(thumbs)
    budget = int(count * GRADED_SHARE)
    real = _order(means, features, count)
    graded = _fill_gaps(means, thumbs, real[: count - budget], budget)
    real = real[: count - len(graded)]
    tiles = [crops[row] for row in real] + [_Crop(crops[row].photo, crops[row].box, grade) for row, grade in graded]
    if graded:
        graded_means, graded_features = _signatures(
            np.stack([apply_grade(thumbs[row], grade) for row, grade in graded])
        )
        means = np.concatenate([means[real], graded_means])
        features = np.concatenate([features[real], graded_features])
    else:
        means, features = means[real], features[real]
    return tuple(tiles[i] for i in _order(means, features, len(tiles)))


def demo_tile_images(
    count: int = DEMO_TILES, *, quality: int = 90, exclude: Collection[str] = ()
) -> list[tuple[str, bytes]]:
    """``count`` varied square JPEG tiles of 64 px, as (name, bytes), deterministic.

    A ``count`` up to ``DEMO_TILES`` gives the first ``count`` tiles of the default library.
    Fewer are returned only when the installed photos give fewer distinct crops. ``exclude``
    leaves photos out by name (``"moon"``): the benchmark scores a photo with a library
    that holds no crop of it.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    photos = demo_photos(exclude=exclude)
    crops = _plan(max(count, DEMO_TILES), frozenset(exclude))
    tiles: list[tuple[str, bytes]] = []
    for crop in crops[:count]:
        name, image = photos[crop.photo]
        tile = image.resize((TILE_PIXELS, TILE_PIXELS), Image.Resampling.LANCZOS, box=crop.box, reducing_gap=3.0)
        if crop.grade is not None:
            tile = Image.fromarray(apply_grade(np.asarray(tile), crop.grade))
        out = io.BytesIO()
        tile.save(out, format="JPEG", quality=quality)
        x, y, right, _ = crop.box
        # The ordinal keeps names unique (a crop may appear as itself and graded).
        tag = f"{len(tiles):04d}-{name}-{right - x}-{x}-{y}{'-graded' if crop.grade else ''}"
        tiles.append((tag, out.getvalue()))
    return tiles


def ensure_demo_library(
    storage: StorageClients,
    *,
    prefix: str = "",
    count: int = DEMO_TILES,
    built: Callable[[], TileLibrary] | None = None,
) -> str:
    """Create the library ``demo`` in storage unless it is there already; return its URI.

    ``photomosaics run`` and ``photomosaics web --demo-library`` call this at start-up, with
    ``built`` reading the library ``demo_tile_images(count)`` builds from a disk cache
    (``photomosaics.render_library.demo_library``). The demo library is an operator's library
    marked shared: every client sees it (``dal.blobs.libraries``)."""
    store = LibraryStore(storage, prefix=prefix)
    found = store.info(DEMO_LIBRARY_NAME)
    if found is not None:
        if found.owner is not None:  # a client's library of that name: never shared with everyone
            log.error(
                "a client's library holds the name %r: it stays that client's, and there is no shared demo "
                "library until its owner or an operator deletes it (its container)",
                DEMO_LIBRARY_NAME,
            )
        elif not found.shared:  # the system's, made before libraries had owners: every client saw it then too
            store.set_shared(DEMO_LIBRARY_NAME, True)
        return store.uri(DEMO_LIBRARY_NAME)
    log.info("creating the demo tile library (%d tiles from the sample photos)", count)
    if built is not None:
        return store.create(DEMO_LIBRARY_NAME, DEMO_DESCRIPTION, built(), shared=True)
    return store.create_from_images(DEMO_LIBRARY_NAME, DEMO_DESCRIPTION, demo_tile_images(count), shared=True)
