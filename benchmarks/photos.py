"""Real photographs for the benchmarks, offline: scikit-image's bundled sample photos.

Targets are photos resampled to a given size (JPEG, as people upload them); tiles are many
varied square crops (positions, scales, mirror images) of the same photos. Only files that
ship inside the scikit-image wheel are used: nothing is downloaded.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

# Colour photographs inside the skimage wheel (skimage.data), by loader name.
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "stereo_motorcycle", "hubble_deep_field", "retina", "immunohistochemistry")


def photo(name: str) -> Image.Image:
    import skimage.data

    array = getattr(skimage.data, name)()
    if isinstance(array, tuple):  # stereo pairs return several images
        array = array[0]
    image = Image.fromarray(np.asarray(array))
    return image.convert("RGB")


def target_jpeg(name: str, size: tuple[int, int], *, quality: int = 90) -> bytes:
    """A photo centre-cropped to the aspect of ``size`` and resampled to exactly ``size``, as JPEG."""
    image = photo(name)
    width, height = image.size
    aspect = size[0] / size[1]
    if width / height > aspect:
        crop_w, crop_h = int(height * aspect), height
    else:
        crop_w, crop_h = width, int(width / aspect)
    left, top = (width - crop_w) // 2, (height - crop_h) // 2
    image = image.crop((left, top, left + crop_w, top + crop_h)).resize(size, Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def crop_tiles(count: int, *, size: int = 64, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """``count`` varied square crops ``(count, size, size, 3) uint8`` and their names."""
    rng = np.random.default_rng(seed)
    photos = [(name, photo(name)) for name in PHOTOS]
    tiles = np.empty((count, size, size, 3), np.uint8)
    names = []
    for i in range(count):
        name, image = photos[i % len(photos)]
        short = min(image.size)
        side = int(short * rng.uniform(0.08, 0.5))
        left = int(rng.integers(0, image.width - side + 1))
        top = int(rng.integers(0, image.height - side + 1))
        crop = image.crop((left, top, left + side, top + side)).resize((size, size), Image.Resampling.LANCZOS)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        tiles[i] = np.asarray(crop)
        names.append(f"{name}-{i:05d}.jpg")
    return tiles, names


def tile_files(tiles: np.ndarray, names: list[str], *, quality: int = 92) -> list[tuple[str, bytes]]:
    """The tiles as JPEG files, for programs that read a folder (metapixel-prepare)."""
    files = []
    for tile, name in zip(tiles, names):
        buffer = io.BytesIO()
        Image.fromarray(tile).save(buffer, format="JPEG", quality=quality)
        files.append((name, buffer.getvalue()))
    return files
