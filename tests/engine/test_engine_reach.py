"""How well a library reaches a photo's colours (``mosaic.reach``): said before the job."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

from mosaic.library import TileLibrary
from mosaic.reach import MARGIN, PREVIEW_TILE, Reach, library_reach, repeated_colours

from .conftest import random_library


def _apple(size: int = 320) -> Image.Image:
    """A red apple filling the frame on a dark cloth: a night sky's darks reach the cloth, but the
    red only in a few planets."""
    image = Image.new("RGB", (size, size * 3 // 4), (22, 24, 40))
    ImageDraw.Draw(image).ellipse((size // 10, 0, size * 9 // 10, size * 3 // 4), fill=(180, 40, 34))
    return image


def _night_sky(count: int = 240, planets: int = 6) -> TileLibrary:
    """Deep-sky photos (dark blues and greys) and a few red planets: a program that repeats its
    nearest photo paints the apple with the planets; with no photo repeated nearby, ours cannot."""
    library = random_library(count, seed=5)
    tiles = library.tiles(64).astype(np.float64)
    grey = tiles.mean(axis=3, keepdims=True)
    night = grey * 0.35 + np.array([10, 14, 40])
    night[:planets] = grey[:planets] * 0.3 + np.array([150, 30, 25])
    pixels = np.clip(night, 0, 255).astype(np.uint8)
    return type(library).from_tiles(pixels, [f"sky-{i}.png" for i in range(count)])


def _crops_of(image: Image.Image, count: int = 300) -> TileLibrary:
    """A library cut from the photo itself: it has every colour of it, many times."""
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


def test_with_no_red_tile_at_all_a_program_that_repeats_its_photos_is_no_closer() -> None:
    # The warning says where repeating the nearest photos (metapixel -d 0) would beat the
    # mosaic from afar. Without a single red photo neither can paint the apple: both come out
    # grey there, ours a little closer (its colour moved toward red), and the plan says nothing.
    reach = library_reach(_apple(), _night_sky(planets=0))
    assert not reach.warn and reach.ours < reach.nearest, (reach.ours, reach.nearest)
    assert not reach.short_regions()


def test_the_repeating_program_chooses_by_small_image_as_metapixel_does() -> None:
    """Metapixel picks the tile whose small image (YIQ sub-pixels) is nearest, not the nearest
    mean colour: a cell dark on the left and bright on the right takes the tile with that layout
    in blue, not the flat tile of the cell's very colour."""
    from mosaic.signatures import SUB

    flat = np.full((64, 64, 3), 128, np.uint8)
    split = np.zeros((64, 64, 3), np.uint8)
    split[:, :32], split[:, 32:] = (10, 10, 60), (220, 220, 250)
    library = TileLibrary.from_tiles(np.stack([flat, split]), ["flat.png", "split.png"])
    cells = np.zeros((SUB, SUB * 2, 3), np.uint8)  # two cells: the split one, then a flat grey one
    cells[:, : SUB // 2] = 0
    cells[:, SUB // 2 : SUB] = 255
    cells[:, SUB:] = 128
    chosen = repeated_colours(cells, library)
    split_mean = library.sub_cells(PREVIEW_TILE)[1].reshape(-1, 3).mean(axis=0)
    assert np.abs(chosen[0].astype(float) - split_mean).max() <= 1  # the layout, in blue
    assert (chosen[1] == 128).all()  # the flat cell: the flat tile


@pytest.mark.parametrize(
    ("short", "said"),
    [
        ({(0, 0), (1, 2)}, " (top left, middle right): "),
        ({(r, c) for r in range(3) for c in range(3)} - {(2, 1)}, " (everywhere but the bottom centre): "),
        (
            {(r, c) for r in range(3) for c in range(3)} - {(0, 0), (2, 2)},
            " (everywhere but the top left and the bottom right): ",
        ),
        ({(r, c) for r in range(3) for c in range(3)}, "colours: "),
    ],
)
def test_the_note_names_the_regions_short_or_when_they_are_most_the_ones_spared(short: set, said: str) -> None:
    regions = tuple((r, c, 9.0 if (r, c) in short else 2.0, 4.0) for r in range(3) for c in range(3))
    blank = np.zeros((1, 1, 3), np.uint8)
    reach = Reach(8.0, 4.0, regions, {75: 5.0, 100: 2.0}, 50, blank, blank)
    assert reach.warn and said in reach.message(), reach.message()
