"""Decoding: every Pillow mode to upright RGB, and a clear error for anything else."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import Image

from dal.errors import PhotoMosaicsError
from mosaic import ImageDecodeError, open_image

from .conftest import encode


def _gradient_rgb(width: int = 40, height: int = 30) -> Image.Image:
    x = np.linspace(0, 255, width, dtype=np.uint8)
    array = np.stack(
        [np.tile(x, (height, 1)), np.full((height, width), 100, np.uint8), np.tile(x[::-1], (height, 1))], -1
    )
    return Image.fromarray(array)


@pytest.mark.parametrize(
    ("make", "fmt"),
    [
        (lambda: Image.new("L", (20, 10), 77), "PNG"),
        (lambda: Image.new("1", (20, 10), 1), "PNG"),
        (lambda: _gradient_rgb().convert("P"), "PNG"),
        (lambda: _gradient_rgb().convert("P"), "GIF"),
        (lambda: _gradient_rgb().convert("RGBA"), "PNG"),
        (lambda: Image.new("LA", (20, 10), (50, 255)), "PNG"),
        (lambda: _gradient_rgb().convert("CMYK"), "JPEG"),
        (lambda: _gradient_rgb().convert("CMYK"), "TIFF"),
        (lambda: _gradient_rgb(), "WEBP"),
        (lambda: _gradient_rgb(), "BMP"),
    ],
)
def test_any_mode_decodes_to_rgb_of_the_same_size(make, fmt: str) -> None:
    source = make()
    image = open_image(encode(source, fmt))
    assert image.mode == "RGB"
    assert image.size == source.size


def test_grey_keeps_its_value() -> None:
    image = open_image(encode(Image.new("L", (8, 8), 77)))
    assert np.all(np.asarray(image) == 77)


def test_sixteen_bit_grey_is_scaled_not_clipped() -> None:
    values = np.array([[0, 257 * 100, 65535]], dtype=np.uint16)
    source = Image.fromarray(values)
    assert source.mode.startswith("I;16")
    image = np.asarray(open_image(encode(source)))
    assert image[0, :, 0].tolist() == [0, 100, 255]
    assert np.all(image[..., 0] == image[..., 2])


def test_transparency_becomes_white_and_opaque_pixels_stay() -> None:
    array = np.zeros((4, 4, 4), np.uint8)
    array[..., 0] = 200
    array[:2, :, 3] = 255  # top half opaque red, bottom half fully transparent
    image = np.asarray(open_image(encode(Image.fromarray(array, "RGBA"))))
    assert image[0, 0].tolist() == [200, 0, 0]
    assert image[3, 0].tolist() == [255, 255, 255]


def test_exif_orientation_is_applied() -> None:
    source = Image.new("RGB", (40, 20), (10, 200, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    image = open_image(encode(source, "JPEG", exif=exif.tobytes()))
    assert image.size == (20, 40)


def test_jpeg_reduced_decode_is_at_least_the_size_asked_for() -> None:
    source = _gradient_rgb(800, 600)
    image = open_image(encode(source, "JPEG"), min_size=(150, 100))
    assert image.width >= 150 and image.height >= 100
    assert image.width < 800


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"this is not an image at all",
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 40,
        b"\xff\xd8\xff\xe0garbage",
    ],
    ids=["empty", "text", "png-header-only", "jpeg-header-only"],
)
def test_corrupt_data_gives_a_clear_error(data: bytes) -> None:
    with pytest.raises(ImageDecodeError):
        open_image(data)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_file_gives_a_clear_error(fmt: str) -> None:
    rng = np.random.default_rng(1)
    data = encode(Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)), fmt)
    with pytest.raises(ImageDecodeError) as caught:
        open_image(data[: len(data) // 2])
    assert isinstance(caught.value, PhotoMosaicsError)
    assert str(caught.value)


def test_too_many_pixels_is_refused_before_decoding() -> None:
    with pytest.raises(ImageDecodeError, match="larger than the maximum"):
        open_image(encode(Image.new("RGB", (100, 100))), max_pixels=5_000)


def test_probe_size_reads_the_upright_size_from_the_header() -> None:
    from mosaic import probe_size

    exif = Image.Exif()
    exif[0x0112] = 6
    assert probe_size(encode(Image.new("RGB", (40, 20)), "JPEG", exif=exif.tobytes())) == (20, 40)
    assert probe_size(encode(Image.new("RGB", (40, 20)))) == (40, 20)
    with pytest.raises(ImageDecodeError):
        probe_size(b"nope")


def _matrix_profile(description: str, primaries: tuple[tuple[float, float, float], ...], gamma: float) -> bytes:
    """A minimal ICC v2 RGB display profile (primaries as D50 XYZ, one gamma curve): the shape of
    Adobe RGB (1998) or Display P3, built here so that the test needs no profile file on the machine."""

    def xyz(values: tuple[float, float, float]) -> bytes:
        return b"XYZ \0\0\0\0" + b"".join(struct.pack(">i", round(v * 65536)) for v in values)

    text = description.encode("ascii") + b"\0"
    desc = b"desc\0\0\0\0" + struct.pack(">I", len(text)) + text + b"\0" * 4 + b"\0" * 4 + b"\0" * 3 + b"\0" * 67
    curve = b"curv\0\0\0\0" + struct.pack(">IH", 1, round(gamma * 256)) + b"\0\0"
    tags = [
        (b"desc", desc),
        (b"wtpt", xyz((0.9642, 1.0, 0.8249))),
        (b"rXYZ", xyz(primaries[0])),
        (b"gXYZ", xyz(primaries[1])),
        (b"bXYZ", xyz(primaries[2])),
        (b"rTRC", curve),
        (b"gTRC", curve),
        (b"bTRC", curve),
    ]
    offset = 128 + 4 + 12 * len(tags)
    table, body = b"", b""
    for signature, data in tags:
        data += b"\0" * (-len(data) % 4)
        table += signature + struct.pack(">II", offset + len(body), len(data))
        body += data
    size = offset + len(body)
    header = (
        struct.pack(">I", size)
        + b"lcms"
        + bytes([2, 0x10, 0, 0])
        + b"mntrRGB XYZ "
        + b"\0" * 12
        + b"acsp"
        + b"\0" * 24
        + struct.pack(">I", 0)
        + xyz((0.9642, 1.0, 0.8249))[8:]
        + b"\0" * 48
    )
    return header + struct.pack(">I", len(tags)) + table + body


ADOBE_RGB = ((0.60974, 0.31111, 0.01947), (0.20528, 0.62567, 0.06087), (0.14919, 0.06322, 0.74457))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_colours_of_an_embedded_icc_profile_are_converted_to_srgb(fmt: str) -> None:
    from PIL import ImageCms

    icc = _matrix_profile("Adobe RGB (1998) lookalike", ADOBE_RGB, 563 / 256)
    wide = ImageCms.ImageCmsProfile(io.BytesIO(icc))
    srgb = ImageCms.createProfile("sRGB")
    green = Image.new("RGB", (16, 16), (0, 200, 0))
    stored = ImageCms.profileToProfile(green, srgb, wide, outputMode="RGB")
    assert stored.getpixel((0, 0))[0] > 90  # the stored numbers are not sRGB's: read as sRGB, an olive
    lossless = {"quality": 100, "subsampling": 0} if fmt == "JPEG" else {}
    image = open_image(encode(stored, fmt, icc_profile=icc, **lossless))
    # within a few levels (near 0 the sRGB curve is steep: JPEG's +-1 there is up to 9 levels)
    assert np.abs(np.asarray(image, np.int16) - (0, 200, 0)).max() <= 12


def test_an_srgb_or_unreadable_profile_leaves_the_pixels_as_they_are() -> None:
    from PIL import ImageCms

    source = _gradient_rgb()
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    for icc in (srgb, b"not a profile"):
        image = open_image(encode(source, "PNG", icc_profile=icc))
        assert np.array_equal(np.asarray(image), np.asarray(source))


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP", "PNG"])
def test_a_corrupt_exif_tag_beside_the_orientation_still_decodes_upright(fmt: str) -> None:
    """An XResolution stored as text: Pillow's exif_transpose raised rewriting it, so a photo
    the web app had accepted failed its job in the controller."""
    entries = struct.pack("<HHI4s", 0x0112, 3, 1, struct.pack("<HH", 6, 0)) + struct.pack("<HHI4s", 282, 2, 4, b"abc\0")
    exif = b"Exif\0\0II*\0" + struct.pack("<IH", 8, 2) + entries + struct.pack("<I", 0)
    source = _gradient_rgb(40, 30)
    image = open_image(encode(source, fmt, exif=exif, **({"lossless": True} if fmt == "WEBP" else {})))
    assert image.size == (30, 40)  # orientation 6: shown turned a quarter clockwise
    expected = np.asarray(source.transpose(Image.Transpose.ROTATE_270), np.int16)
    assert np.abs(np.asarray(image, np.int16) - expected).mean() < 3


def _phone_photo() -> tuple[Image.Image, Image.Exif]:
    """A landscape picture with red in its stored top-left corner, marked to be shown turned."""
    rng = np.random.default_rng(11)
    small = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    pixels = np.asarray(Image.fromarray(small).resize((640, 480), Image.Resampling.BICUBIC)).copy()
    pixels[:60, :60] = (255, 0, 0)
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned 90 degrees clockwise, as a phone stores a portrait
    return Image.fromarray(pixels), exif


@pytest.mark.parametrize("fmt", ["HEIF", "AVIF"])
def test_an_iphone_heic_and_an_avif_open_upright_as_the_same_picture(fmt: str) -> None:
    """The photo a person takes with an iPhone (HEIC) or exports for the web (AVIF) is a target
    photo like a JPEG: upright, its own colours, its size read from the header."""
    from mosaic.images import probe_image

    photo, exif = _phone_photo()
    out = io.BytesIO()
    if fmt == "HEIF":
        import pillow_heif

        pillow_heif.from_pillow(photo).save(out, format="HEIF", quality=90, exif=exif.tobytes())
    else:
        photo.save(out, "AVIF", quality=90, speed=10, exif=exif.tobytes())
    data = out.getvalue()
    assert probe_image(data) == (fmt, 480, 640)
    image = np.asarray(open_image(data), dtype=float)
    assert image.shape == (640, 480, 3)
    assert tuple(image[:20, -20:].mean(axis=(0, 1)).round()) >= (240.0, 0.0, 0.0)
    assert image[:20, -20:, 1:].mean() < 15  # the stored top-left is now top-right
    upright = np.asarray(photo.transpose(Image.Transpose.ROTATE_270), dtype=float)
    assert np.abs(image - upright).mean() < 5


def test_a_plain_photo_never_imports_pillow_heif() -> None:
    """pillow-heif costs 0.2 s to import: a JPEG or PNG, in every role and the CLI, does not pay it."""
    import subprocess
    import sys

    script = (
        "import io, sys\n"
        "from PIL import Image\n"
        "from mosaic.images import open_image, probe_image\n"
        "out = io.BytesIO(); Image.new('RGB', (40, 30), (1, 2, 3)).save(out, 'PNG')\n"
        "open_image(out.getvalue()); probe_image(out.getvalue())\n"
        "print('pillow_heif' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_an_avif_cut_in_half_is_a_damaged_avif_and_a_video_is_no_image() -> None:
    """Both are ISO base media files that no plugin opens: the one whose brands say AVIF is a
    photo its decoder could not read; an MP4 (brands isom, mp42) is not an image at all."""
    from mosaic.errors import UnknownImageFormat
    from mosaic.images import probe_image
    from tests.support.hostile_images import avif_cut_in_half

    for read in (open_image, probe_image):
        with pytest.raises(ImageDecodeError) as refused:
            read(avif_cut_in_half())
        assert not isinstance(refused.value, UnknownImageFormat)
        assert str(refused.value) == "cannot decode AVIF image: the file is damaged or cut short"
    video = b"\0\0\0\x18ftypmp42\0\0\0\0isommp42" + b"\0\0\0\x08free" + bytes(512)
    with pytest.raises(UnknownImageFormat, match="not an image in an accepted format"):
        open_image(video)
