"""Real photographs for the benchmarks, offline: scikit-image's and scikit-learn's bundled samples.

Targets are photos resampled to a given size (JPEG, as people upload them); tiles are many
varied square crops (positions, scales, mirror images) of the same photos. Only files that
ship inside the scikit-image and scikit-learn wheels are used: nothing is downloaded.

``SWEEP`` is the generalisation set of the quality benchmark (``python -m benchmarks.engine
sweep``): every bundled sample that loads offline, in colour or grey, plus photo-like
targets made from them or drawn (``photo`` understands their names): ``sklearn:NAME``,
``dark:NAME`` / ``bright:NAME`` (a sample darkened to 22 % / brightened to 25 % of its
distance from white), ``synthetic:gradient`` (two colour ramps), ``synthetic:flat_noise``
(one colour with Gaussian noise), ``synthetic:graphic`` (flat shapes, hard edges, text).
``file:PATH`` is a photo of your own: the held-out check of a project that has never seen it.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

# Colour photographs inside the skimage wheel (skimage.data), by loader name.
PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "stereo_motorcycle",
    "hubble_deep_field",
    "retina",
    "immunohistochemistry",
)


SWEEP = (
    *PHOTOS,
    "camera",
    "coins",
    "moon",
    "page",
    "text",
    "brick",
    "clock",
    "grass",
    "gravel",
    "horse",
    "colorwheel",
    "logo",
    "cell",
    "sklearn:china",
    "sklearn:flower",
    "synthetic:gradient",
    "synthetic:flat_noise",
    "synthetic:graphic",
    "dark:astronaut",
    "dark:coffee",
    "bright:coffee",
    "bright:chelsea",
)
SYNTHETIC_SIZE = (1152, 864)


def photo(name: str) -> Image.Image:
    """A sample by name (see the module docstring for the prefixed names), as RGB."""
    kind, _, rest = name.partition(":")
    if rest:
        return _derived(kind, rest)
    import skimage.data

    array = getattr(skimage.data, name)()
    if isinstance(array, tuple):  # stereo pairs return several images
        array = array[0]
    image = Image.fromarray(np.asarray(array))
    return image.convert("RGB")


def _derived(kind: str, name: str) -> Image.Image:
    if kind == "sklearn":
        from sklearn.datasets import load_sample_image

        return Image.fromarray(load_sample_image(f"{name}.jpg")).convert("RGB")
    if kind == "dark":
        return Image.fromarray((np.asarray(photo(name), np.float64) * 0.22).astype(np.uint8))
    if kind == "bright":
        return Image.fromarray((255 - (255 - np.asarray(photo(name), np.float64)) * 0.25).astype(np.uint8))
    if kind == "synthetic":
        return _synthetic(name, SYNTHETIC_SIZE)
    if kind == "file":
        return _own(name)
    raise KeyError(f"unknown sample {kind}:{name}")


def _own(path: str) -> Image.Image:
    """A photo file of your own, decoded as the web app decodes an upload (``open_image``:
    turned upright by its EXIF orientation, its ICC profile converted to sRGB)."""
    from pathlib import Path

    from mosaic.errors import ImageDecodeError
    from mosaic.images import open_image

    try:
        return open_image(Path(path).read_bytes())
    except (OSError, ImageDecodeError) as exc:  # missing, unreadable, or not an image
        raise ValueError(f"cannot read {path} as a photo: {exc}") from exc


def slug(name: str) -> str:
    """``name`` as a piece of a file name: ``file:`` photos by their file's stem."""
    kind, _, rest = name.partition(":")
    if kind == "file":
        from pathlib import Path

        return "file-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in Path(rest).stem)
    return name.replace(":", "-")


def _synthetic(name: str, size: tuple[int, int]) -> Image.Image:
    from PIL import ImageDraw

    width, height = size
    if name == "gradient":
        x = np.linspace(0.0, 1.0, width)[None, :]
        y = np.linspace(0.0, 1.0, height)[:, None]
        planes = [255 * x + 0 * y, 255 * y + 0 * x, 255 * (1 - x) * (1 - y)]
        return Image.fromarray(np.stack(planes, axis=-1).astype(np.uint8))
    if name == "flat_noise":
        noise = np.random.default_rng(7).normal(0.0, 6.0, (height, width, 3))
        return Image.fromarray(np.clip(np.array([70.0, 110.0, 160.0]) + noise, 0, 255).astype(np.uint8))
    if name == "graphic":
        image = Image.new("RGB", size, (245, 245, 240))
        draw = ImageDraw.Draw(image)
        draw.rectangle((80, 80, 500, 400), fill=(200, 20, 30))
        draw.ellipse((600, 200, 1050, 700), fill=(10, 40, 160))
        draw.polygon([(100, 800), (400, 450), (700, 800)], fill=(20, 20, 20))
        draw.rectangle((0, 0, width, 30), fill=(250, 200, 0))
        draw.text((540, 60), "MOSAIC", fill=(0, 0, 0))
        for left in range(0, width, 96):
            draw.line((left, 450, left + 200, 860), fill=(0, 120, 40), width=12)
        return image
    raise KeyError(f"unknown synthetic target {name}")


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
