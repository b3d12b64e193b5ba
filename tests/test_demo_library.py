"""The demo tile library: enough real, varied photo tiles, made offline and deterministically."""

from __future__ import annotations

import io
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from workers.demo_library import DEMO_LIBRARY_NAME, TILE_PIXELS, demo_tile_images


@pytest.fixture(scope="module")
def demo_tiles() -> list[tuple[str, bytes]]:
    return demo_tile_images()


def _mean_lab(tiles: list[tuple[str, bytes]]) -> np.ndarray:
    from skimage.color import rgb2lab

    means = [np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64).mean(axis=(0, 1)) for _, data in tiles]
    return rgb2lab(np.array(means)[None] / 255.0)[0]


def test_at_least_300_square_jpeg_tiles_with_unique_names(demo_tiles: list[tuple[str, bytes]]) -> None:
    assert len(demo_tiles) >= 300
    assert len({name for name, _ in demo_tiles}) == len(demo_tiles)
    for _, data in demo_tiles[:50]:
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "JPEG"
            assert image.size == (TILE_PIXELS, TILE_PIXELS)


def test_names_stay_unique_for_large_counts() -> None:
    """Two crops rounding to the same box once gave two tiles one name (one overwrote the other)."""
    names = [name for name, _ in demo_tile_images(1000)]
    assert len(set(names)) == len(names) == 1000


def test_tiles_come_from_many_photos(demo_tiles: list[tuple[str, bytes]]) -> None:
    photos = Counter(name.split("-")[1] for name, _ in demo_tiles)
    assert len(photos) >= 8, photos
    assert max(photos.values()) <= 0.35 * len(demo_tiles), photos


def test_mean_colours_spread_over_hues_and_lightness(demo_tiles: list[tuple[str, bytes]]) -> None:
    lab = _mean_lab(demo_tiles)
    chroma = np.hypot(lab[:, 1], lab[:, 2])
    hue = np.degrees(np.arctan2(lab[:, 2], lab[:, 1])) % 360
    colourful = chroma > 12
    sectors, _ = np.histogram(hue[colourful], bins=8, range=(0, 360))
    assert (sectors >= 5).sum() >= 6, f"tiles per 45° hue sector: {sectors}"
    assert sectors.max() <= 0.35 * colourful.sum(), f"one hue dominates: {sectors}"
    assert (~colourful).sum() >= 20, "too few neutral (grey, black, white) tiles"
    low, high = np.percentile(lab[:, 0], [5, 95])
    assert low < 25 and high > 75, f"lightness 5th-95th percentile {low:.0f}..{high:.0f}"


def test_deterministic_and_a_smaller_count_is_a_prefix(demo_tiles: list[tuple[str, bytes]]) -> None:
    assert demo_tile_images(40) == demo_tiles[:40]


def test_count_is_validated() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        demo_tile_images(0)


def test_demo_name_is_a_valid_library_name() -> None:
    from dal.libraries import validate_library_name

    assert validate_library_name(DEMO_LIBRARY_NAME) == "demo"


def test_ensure_demo_library_creates_it_once(storage: object, unique: str) -> None:
    from dal.libraries import LibraryStore
    from workers.demo_library import ensure_demo_library

    store = LibraryStore(storage, prefix=f"t{unique}")  # type: ignore[arg-type]
    assert not store.exists(DEMO_LIBRARY_NAME)
    uri = ensure_demo_library(storage, prefix=store.prefix, count=60)
    [info] = store.list()
    assert (info.name, info.tile_count, info.uri) == (DEMO_LIBRARY_NAME, 60, uri)
    assert ensure_demo_library(storage, prefix=store.prefix, count=80) == uri
    assert store.list()[0].version == info.version  # not rebuilt: still the 60-tile library
