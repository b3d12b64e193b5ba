"""Large PNG, WebP, TIFF and GIF photos are decoded small by libvips (``mosaic.shrink_on_load``):
the same picture as Pillow's whole decode and reduction, upright, in sRGB, without the whole
image ever in memory; and reading a PNG's header decodes no pixel."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms

from mosaic.images import probe_image
from mosaic.photo_index import decode_photo
from mosaic.shrink_on_load import decode_shrunk
from tests.engine.test_engine_images import ADOBE_RGB, _matrix_profile

WIDE = (4800, 3600)  # 17.3 MP: over the 16.8 MP from which the indexer hands these formats to libvips


def _picture(size: tuple[int, int] = WIDE) -> Image.Image:
    rng = np.random.default_rng(11)
    return Image.fromarray(rng.integers(0, 255, (9, 12, 3), dtype=np.uint8)).resize(size, Image.Resampling.BILINEAR)


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "TIFF"])
def test_a_large_photo_is_the_same_picture_as_a_whole_decode(fmt: str) -> None:
    picture = _picture()
    fast = {"PNG": {"compress_level": 1}, "WEBP": {"quality": 95, "method": 0}, "TIFF": {"compression": "tiff_deflate"}}
    options = fast[fmt]
    image = decode_photo(_encode(picture, fmt, **options))
    assert image.size == (480, 360) and image.mode == "RGB"
    whole = np.asarray(picture.resize(image.size, Image.Resampling.LANCZOS), dtype=float)
    assert np.abs(np.asarray(image, dtype=float) - whole).mean() < 3.0


def test_it_is_turned_upright_and_brought_to_srgb() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown portrait
    marked = np.asarray(_picture()).copy()
    marked[:500, :500] = (255, 0, 0)  # the stored top-left: the shown top-right
    data = _encode(Image.fromarray(marked), "TIFF", exif=exif.tobytes(), compression="tiff_deflate")
    upright = np.asarray(decode_photo(data))
    assert upright.shape == (480, 360, 3)
    assert np.abs(upright[:20, -20:].mean(axis=(0, 1)) - (255, 0, 0)).max() < 10
    # Adobe RGB's green, stored as Adobe RGB numbers (an olive when read as sRGB), comes out sRGB green.
    icc = _matrix_profile("Adobe RGB (1998) lookalike", ADOBE_RGB, 563 / 256)
    wide = ImageCms.ImageCmsProfile(io.BytesIO(icc))
    green = ImageCms.profileToProfile(
        Image.new("RGB", WIDE, (0, 200, 0)), ImageCms.createProfile("sRGB"), wide, outputMode="RGB"
    )
    image = decode_photo(_encode(green, "PNG", icc_profile=icc, compress_level=1))
    assert np.abs(np.asarray(image, np.int16) - (0, 200, 0)).max() <= 12


def test_a_png_header_is_read_without_its_pixels_and_a_transparent_one_lands_on_white(tmp_path: Path) -> None:
    """In a fresh process (VmHWM): the header of a 100 MP PNG costs nothing (Pillow's getexif()
    decoded it whole: 380 MiB), and decoding it small stays far below its 400 MB of pixels."""
    size = (11547, 8660)
    transparent = Image.new("RGBA", size, (0, 0, 0, 0))
    path = tmp_path / "big.png"
    transparent.save(path, compress_level=1)
    del transparent
    script = (
        "import re, sys\n"
        "from mosaic.images import probe_image\n"
        "from mosaic.photo_index import decode_photo\n"
        "peak = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) // 1024\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "start = peak(); head = probe_image(data); probed = peak()\n"
        "image = decode_photo(data)\n"
        "print(probed - start, peak() - start, head[0], image.size, image.getpixel((10, 10)))\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True, cwd=root
    )
    probed, decoded, fmt, *rest = done.stdout.split(maxsplit=3)
    assert fmt == "PNG" and rest[0].startswith("(480, 360) (255, 255, 255)"), done.stdout
    assert int(probed) < 20, done.stdout  # MiB
    assert int(decoded) < 200, done.stdout  # MiB: the whole RGBA picture is 381


def test_a_16_bit_grey_photo_comes_out_8_bit_rgb_over_its_whole_range() -> None:
    ramp = np.linspace(0, 65535, WIDE[0] * WIDE[1]).reshape(WIDE[1], WIDE[0]).astype(np.uint16)
    image = decode_photo(_encode(Image.fromarray(ramp), "PNG", compress_level=1))
    assert image.mode == "RGB" and image.size == (480, 360)
    assert image.getpixel((0, 0)) == (0, 0, 0) and image.getpixel((479, 359)) == (255, 255, 255)


def test_a_corrupt_large_file_is_a_decode_error() -> None:
    from mosaic.errors import ImageDecodeError

    data = _encode(_picture(), "PNG", compress_level=1)
    with pytest.raises(ImageDecodeError):
        decode_shrunk(data[: len(data) // 2], 480)
    assert probe_image(data)[:1] == ("PNG",)
    assert re.match(r"^\(", str(probe_image(data)[1:]))


@pytest.mark.parametrize(
    ("fmt", "options", "said"),
    [
        ("TIFF", {}, "tiff2vips: Read error at scanline"),  # the header first, then the strips: half are missing
        ("PNG", {"compress_level": 1}, "vipspng: libpng read error"),
        ("GIF", {}, "gifload_buffer: Unexpected end of GIF source data"),
    ],
)
def test_a_large_photo_cut_short_is_refused_with_the_loaders_words_not_padded(
    fmt: str, options: dict[str, object], said: str
) -> None:
    """An uncompressed TIFF cut after its first half was indexed with its lower half black
    (libvips' ``fail_on=truncated`` lets a TIFF's missing strips through), and every refusal
    read "unable to call thumbnail_buffer", libvips' line above the loader's own."""
    from mosaic.photo_index import PhotoRefused

    picture = _picture() if fmt != "GIF" else _picture().convert("P")
    data = _encode(picture, fmt, **options)
    with pytest.raises(PhotoRefused, match=f"^cannot decode image: {re.escape(said)}"):
        decode_photo(data[: len(data) // 2])
