"""The demo tile library: enough real, varied photo tiles, made offline and deterministically."""

from __future__ import annotations

import io
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from mosaic.gamut import colour_coverage, mean_lab
from workers.demo_library import (
    DEMO_LIBRARY_NAME,
    DEMO_TILES,
    GRADED_SHARE,
    TILE_PIXELS,
    demo_photos,
    demo_tile_images,
)


@pytest.fixture(scope="module")
def demo_tiles() -> list[tuple[str, bytes]]:
    return demo_tile_images()


@pytest.fixture(scope="module")
def demo_rgb(demo_tiles: list[tuple[str, bytes]]) -> np.ndarray:
    return np.stack([np.asarray(Image.open(io.BytesIO(data)).convert("RGB")) for _, data in demo_tiles])


def _mean_lab(tiles: list[tuple[str, bytes]]) -> np.ndarray:
    from skimage.color import rgb2lab

    means = [
        np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64).mean(axis=(0, 1)) for _, data in tiles
    ]
    return rgb2lab(np.array(means)[None] / 255.0)[0]


def test_the_default_size_square_jpeg_tiles_with_unique_names(demo_tiles: list[tuple[str, bytes]]) -> None:
    """Also: two crops rounding to the same box once gave two tiles one name (one overwrote the other)."""
    assert len(demo_tiles) == DEMO_TILES >= 1500
    assert len({name for name, _ in demo_tiles}) == len(demo_tiles)
    for _, data in demo_tiles[:50]:
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "JPEG"
            assert image.size == (TILE_PIXELS, TILE_PIXELS)


def test_tiles_come_from_many_photos(demo_tiles: list[tuple[str, bytes]]) -> None:
    photos = Counter(name.split("-")[1] for name, _ in demo_tiles)
    assert len(photos) >= 8, photos
    assert max(photos.values()) <= 0.35 * len(demo_tiles), photos


def test_mean_colours_spread_over_hues_and_lightness(demo_tiles: list[tuple[str, bytes]]) -> None:
    """The first 640 tiles take turns over colour classes (the whole library follows the photos,
    mostly warm, beyond that; its reach is the coverage test's)."""
    lab = _mean_lab(demo_tiles[:640])
    chroma = np.hypot(lab[:, 1], lab[:, 2])
    hue = np.degrees(np.arctan2(lab[:, 2], lab[:, 1])) % 360
    colourful = chroma > 12
    sectors, _ = np.histogram(hue[colourful], bins=8, range=(0, 360))
    assert (sectors >= 5).sum() >= 6, f"tiles per 45° hue sector: {sectors}"
    assert sectors.max() <= 0.35 * colourful.sum(), f"one hue dominates: {sectors}"
    assert (~colourful).sum() >= 20, "too few neutral (grey, black, white) tiles"
    low, high = np.percentile(lab[:, 0], [5, 95])
    assert low < 25 and high > 75, f"lightness 5th-95th percentile {low:.0f}..{high:.0f}"


def test_colour_coverage_reaches_dark_and_saturated_colours(demo_rgb: np.ndarray) -> None:
    """The old library's 640 real crops reached 27 % of the in-gamut grid (8 % of saturated colours)."""
    share = colour_coverage(mean_lab(demo_rgb))
    assert share["all"] >= 0.9 and share["dark"] >= 0.9 and share["saturated"] >= 0.85, share
    assert colour_coverage(mean_lab(demo_rgb[:400]))["all"] < share["all"]  # more tiles, more reach


def test_graded_tiles_are_a_minority_and_keep_their_crop_s_detail(
    demo_tiles: list[tuple[str, bytes]], demo_rgb: np.ndarray
) -> None:
    """A graded tile is a real crop recoloured: its light and dark follow the crop's, its colour does not."""
    graded = [i for i, (name, _) in enumerate(demo_tiles) if name.endswith("-graded")]
    assert 0 < len(graded) <= GRADED_SHARE * len(demo_tiles)
    photos = dict(demo_photos())
    checked = 0
    for i in graded[:40]:
        _, photo, side, x, y, _ = demo_tiles[i][0].split("-")
        box = (int(x), int(y), int(x) + int(side), int(y) + int(side))
        crop = np.asarray(photos[photo].resize((TILE_PIXELS, TILE_PIXELS), Image.Resampling.LANCZOS, box=box))
        luma_crop, luma_tile = crop.mean(axis=2), demo_rgb[i].mean(axis=2)
        if luma_crop.std() < 8 or luma_tile.std() < 8:
            continue  # a flat crop (sky) has no detail to follow
        checked += 1
        assert np.corrcoef(luma_crop.ravel(), luma_tile.ravel())[0, 1] > 0.6, demo_tiles[i][0]
    assert checked >= 10


def test_lab_to_srgb_inverts_the_engine_s_lab() -> None:
    from mosaic.signatures import lab_to_srgb, srgb_to_lab

    levels = np.arange(0, 256, 5, dtype=np.uint8)
    rgb = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1).reshape(-1, 3)
    assert np.array_equal(lab_to_srgb(srgb_to_lab(rgb)), rgb)


def test_a_photo_can_be_left_out(demo_tiles: list[tuple[str, bytes]]) -> None:
    """The benchmark scores a photo with a library that holds no crop of it."""
    assert any(name.split("-")[1] == "astronaut" for name, _ in demo_tiles[:60])
    without = demo_tile_images(60, exclude=("astronaut",))
    assert len(without) == 60 and not any(name.split("-")[1] == "astronaut" for name, _ in without)


def test_missing_photos_are_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packages are installed here: hide them from the lookup to see the refusal."""
    from workers import demo_library

    monkeypatch.setattr(demo_library, "_package_dir", lambda package: None)
    with pytest.raises(demo_library.DemoPhotosMissing, match=r"install scikit-image and scikit-learn"):
        demo_tile_images(10)


def test_deterministic_and_a_smaller_count_is_a_prefix(demo_tiles: list[tuple[str, bytes]]) -> None:
    from workers import demo_library

    demo_library._plan.cache_clear()  # chosen again from the photos, not remembered
    assert demo_tile_images(40) == demo_tiles[:40]


def test_count_is_validated() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        demo_tile_images(0)


def test_demo_name_is_a_valid_library_name() -> None:
    from dal.blobs.library_info import validate_library_name

    assert validate_library_name(DEMO_LIBRARY_NAME) == "demo"


def test_ensure_demo_library_creates_it_once(storage: object, unique: str) -> None:
    from dal.blobs.libraries import LibraryStore
    from workers.demo_library import ensure_demo_library

    store = LibraryStore(storage, prefix=f"t{unique}")  # type: ignore[arg-type]
    assert not store.exists(DEMO_LIBRARY_NAME)
    uri = ensure_demo_library(storage, prefix=store.prefix, count=60)
    [info] = store.list()
    assert (info.name, info.tile_count, info.uri) == (DEMO_LIBRARY_NAME, 60, uri)
    assert info.shared and info.owner is None  # an operator's library, seen by every client
    store.set_shared(DEMO_LIBRARY_NAME, False)  # as a demo made before libraries had owners
    assert ensure_demo_library(storage, prefix=store.prefix, count=80) == uri
    assert store.list()[0].version == info.version  # not rebuilt: still the 60-tile library
    assert store.list()[0].shared  # but shared again


def test_a_library_built_ahead_is_stored_as_the_one_built_at_start_up(storage: object, unique: str) -> None:
    """``built`` (the commands read it from a disk cache) stores the very library that
    building the tiles at start-up stores: the same version, tiles and names."""
    from dal.blobs.libraries import LibraryStore
    from mosaic.library import TileLibrary
    from mosaic.sources import build_library_from
    from workers.demo_library import ensure_demo_library

    made, ahead = (LibraryStore(storage, prefix=f"t{unique}{i}") for i in "ab")  # type: ignore[arg-type]
    ensure_demo_library(storage, prefix=made.prefix, count=60)
    calls = []

    def built() -> TileLibrary:
        calls.append(1)
        return build_library_from(demo_tile_images(60))[0]

    ensure_demo_library(storage, prefix=ahead.prefix, count=60, built=built)
    ensure_demo_library(storage, prefix=ahead.prefix, count=60, built=built)  # there already: not built again
    assert calls == [1]
    [one], [other] = made.list(), ahead.list()
    assert (other.version, other.tile_count, other.shared) == (one.version, 60, True)
    assert ahead.load(DEMO_LIBRARY_NAME).names == made.load(DEMO_LIBRARY_NAME).names


def test_a_client_that_created_demo_does_not_get_it_shared(storage: object, unique: str) -> None:
    """Start-up marks ``demo`` shared only when the system made it: a client that created a
    library called ``demo`` while there was none keeps it to itself, not served to everyone."""
    from dal.blobs.libraries import LibraryStore
    from workers.demo_library import demo_tile_images, ensure_demo_library

    store = LibraryStore(storage, prefix=f"t{unique}")  # type: ignore[arg-type]
    store.create_from_images(DEMO_LIBRARY_NAME, "mine", demo_tile_images(12), owner="a-client-id-0000001")
    ensure_demo_library(storage, prefix=store.prefix, count=60)
    [info] = store.list()
    assert (info.owner, info.shared, info.tile_count) == ("a-client-id-0000001", False, 12)
    assert not info.visible_to("another-client-id-0002")
