"""How well a library reaches a photo's colours (``mosaic.reach``): said before the job."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

from mosaic.reach import MARGIN, library_reach

from .conftest import random_library


def _apple(size: int = 320) -> Image.Image:
    """A red apple filling the frame on a dark cloth: a night sky's darks reach the cloth, but the
    red only in a few planets."""
    image = Image.new("RGB", (size, size * 3 // 4), (22, 24, 40))
    ImageDraw.Draw(image).ellipse((size // 10, 0, size * 9 // 10, size * 3 // 4), fill=(180, 40, 34))
    return image


def _night_sky(count: int = 240, planets: int = 6) -> object:
    """Deep-sky photos (dark blues and greys) and a few red planets: a program that repeats its
    nearest photo paints the apple with the planets; with no photo repeated nearby, ours cannot."""
    library = random_library(count, seed=5)
    tiles = library.tiles(64).astype(np.float64)
    grey = tiles.mean(axis=3, keepdims=True)
    night = grey * 0.35 + np.array([10, 14, 40])
    night[:planets] = grey[:planets] * 0.3 + np.array([150, 30, 25])
    pixels = np.clip(night, 0, 255).astype(np.uint8)
    return type(library).from_tiles(pixels, [f"sky-{i}.png" for i in range(count)])


def _crops_of(image: Image.Image, count: int = 300) -> object:
    """A library cut from the photo itself: it has every colour of it, many times."""
    from mosaic.library import TileLibrary

    rng = np.random.default_rng(3)
    crops = []
    for _ in range(count):
        side = int(rng.integers(24, 96))
        left, top = int(rng.integers(0, image.width - side)), int(rng.integers(0, image.height - side))
        crops.append(np.asarray(image.crop((left, top, left + side, top + side)).resize((64, 64))))
    return TileLibrary.from_tiles(np.stack(crops), [f"crop-{i}.png" for i in range(count)])


def test_a_library_that_reaches_the_photo_raises_no_warning(photo: Image.Image) -> None:
    reach = library_reach(photo, _crops_of(photo))
    assert not reach.warn and reach.ours <= reach.nearest + MARGIN
    assert "reaches" in reach.message()
    assert reach.preview.shape[2] == 3 and reach.preview_toward_photo.shape == reach.preview.shape


def test_a_narrow_library_is_said_before_the_job_with_what_the_slider_would_give() -> None:
    reach = library_reach(_apple(), _night_sky())
    assert reach.warn, (reach.ours, reach.nearest)
    assert reach.ours > reach.nearest + MARGIN
    assert reach.toward_photo[100] < reach.toward_photo[75] < reach.ours  # further toward the photo: closer
    assert reach.short_regions(), reach.regions  # where: the apple's regions
    text = reach.message()
    assert "lacks some of the photo's colours" in text and f"{reach.ours:.1f}" in text
    assert not np.array_equal(reach.preview, reach.preview_toward_photo)


@pytest.mark.parametrize("correction", [0, 100])
def test_the_measure_follows_the_jobs_correction(correction: int) -> None:
    from mosaic.options import RenderOptions

    reach = library_reach(_apple(), _night_sky(), options=RenderOptions(correction=correction))
    assert reach.correction == correction
    assert set(reach.toward_photo) == {c for c in (75, 100) if c > correction}
