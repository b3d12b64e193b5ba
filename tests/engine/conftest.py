"""Small synthetic tile libraries, so engine tests run in milliseconds."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from mosaic import ATLAS_SIZE, TileLibrary


def flat_library(colours: list[tuple[int, int, int]]) -> TileLibrary:
    atlas = np.empty((len(colours), ATLAS_SIZE, ATLAS_SIZE, 3), np.uint8)
    atlas[:] = np.array(colours, np.uint8)[:, None, None, :]
    return TileLibrary.from_tiles(atlas, [f"flat-{i}" for i in range(len(colours))])


def random_library(count: int, *, seed: int = 0) -> TileLibrary:
    """Smooth random tiles: a colour plus a random gradient and some texture."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:ATLAS_SIZE, 0:ATLAS_SIZE] / (ATLAS_SIZE - 1) - 0.5
    base = rng.uniform(20, 235, (count, 1, 1, 3))
    gx, gy = rng.normal(0, 60, (2, count, 1, 1, 3))
    noise = rng.normal(0, 8, (count, ATLAS_SIZE, ATLAS_SIZE, 3))
    atlas = np.clip(base + gx * x[None, :, :, None] + gy * y[None, :, :, None] + noise, 0, 255)
    return TileLibrary.from_tiles(atlas.astype(np.uint8), [f"random-{i}.png" for i in range(count)])


def encode(image: Image.Image, fmt: str = "PNG", **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


@pytest.fixture(scope="session")
def library200() -> TileLibrary:
    return random_library(200)


@pytest.fixture(scope="session")
def photo() -> Image.Image:
    """A real photograph (scikit-image's astronaut, shipped in its wheel)."""
    import skimage.data

    return Image.fromarray(skimage.data.astronaut())
