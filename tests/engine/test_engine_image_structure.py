"""Opening is bounded: a file whose header alone would be costly to read is refused unopened.

The hostile files declare tiny images (any pixel limit lets them through) and pad their headers
with what Pillow builds an object for while it opens them (``tests.support.hostile_images``).
``open_image`` and ``probe_size`` (every role's decoding: the controller's photo, the library
indexer's files) refuse them through ``mosaic.image_structure.check_structure``; real files of
every accepted format, with the metadata phones and editors write, pass."""

from __future__ import annotations

import io
import struct

import pytest
from PIL import Image

from mosaic import ImageDecodeError, open_image, probe_size
from mosaic.image_structure import (
    MAX_GIF_BLOCKS,
    MAX_JPEG_SEGMENTS,
    MAX_JPEG_SKIPPED_BYTES,
    MAX_PNG_TEXT_CHUNKS,
    MAX_TIFF_STRIPS,
    ImageStructureError,
    check_structure,
)
from tests.support.hostile_images import many_strips_tiff, many_text_png, padded_jpeg

from .conftest import encode


def _small_jpeg() -> bytes:
    return encode(Image.new("RGB", (8, 8), (10, 20, 30)), "JPEG")


def _before_scan(jpeg: bytes, padding: bytes) -> bytes:
    at = jpeg.index(b"\xff\xda")
    return jpeg[:at] + padding + jpeg[at:]


def _gif_with_comments(blocks: int) -> bytes:
    gif = encode(Image.new("P", (8, 8), 1), "GIF")
    flags = gif[10]
    header = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    comment = b"\x21\xfe" + (b"\x01x" * blocks) + b"\x00"
    return gif[:header] + comment + gif[header:]


HOSTILE = {
    "JPEG padded with empty APP segments": lambda: padded_jpeg(2 * 1024 * 1024),
    "JPEG padded with restart markers": lambda: padded_jpeg(1024 * 1024, marker=0xD0),
    "JPEG padded with comments": lambda: _before_scan(_small_jpeg(), b"\xff\xfe\x00\x02" * (MAX_JPEG_SEGMENTS + 1)),
    "JPEG padded with junk bytes": lambda: _before_scan(_small_jpeg(), b"\x00" * (MAX_JPEG_SKIPPED_BYTES + 1)),
    "JPEG padded with fill bytes": lambda: _before_scan(_small_jpeg(), b"\xff" * (MAX_JPEG_SKIPPED_BYTES + 2)),
    "TIFF of a million strips": lambda: many_strips_tiff(1_000_000),
    "TIFF of more strips than allowed": lambda: many_strips_tiff(MAX_TIFF_STRIPS + 1, height=MAX_TIFF_STRIPS + 1),
    "TIFF of more strips than rows": lambda: many_strips_tiff(4096, side=64),
    "PNG of many text chunks": lambda: many_text_png(MAX_PNG_TEXT_CHUNKS + 1),
    "GIF of many comment blocks": lambda: _gif_with_comments(MAX_GIF_BLOCKS + 1),
}


@pytest.mark.parametrize("make", HOSTILE.values(), ids=list(HOSTILE))
def test_a_file_costly_to_open_is_refused_before_pillow_opens_it(make, monkeypatch) -> None:
    data = make()

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("Pillow was asked to open a hostile file")

    monkeypatch.setattr(Image, "open", never)
    with pytest.raises(ImageStructureError):
        check_structure(data)
    with pytest.raises(ImageDecodeError, match="structure"):
        open_image(data)
    with pytest.raises(ImageDecodeError, match="structure"):
        probe_size(data)


def test_the_hostile_files_are_images_pillow_would_open() -> None:
    """Each stands for a real cost: without the check Pillow opens it as the tiny image it says it is."""
    for data in (padded_jpeg(64 * 1024), many_strips_tiff(4096), many_text_png(MAX_PNG_TEXT_CHUNKS + 1)):
        with Image.open(io.BytesIO(data)) as image:
            assert image.size in ((8, 8), (64, 64))


def _exif(orientation: int = 6) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _icc() -> bytes:
    from PIL import ImageCms

    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def _photo(width: int = 120, height: int = 80) -> Image.Image:
    image = Image.new("RGB", (width, height))
    image.putdata([(x * 2 % 256, y * 3 % 256, (x + y) % 256) for y in range(height) for x in range(width)])
    return image


def _mpo() -> bytes:
    out = io.BytesIO()
    _photo().save(out, "MPO", save_all=True, append_images=[_photo(60, 40)])
    return out.getvalue()


def _bigtiff() -> bytes:
    out = io.BytesIO()
    _photo().save(out, "TIFF", big_tiff=True)
    return out.getvalue()


REAL = {
    "baseline JPEG with EXIF and ICC": lambda: encode(_photo(), "JPEG", exif=_exif(), icc_profile=_icc()),
    "progressive optimised JPEG": lambda: encode(_photo(), "JPEG", progressive=True, optimize=True),
    "JPEG with a large ICC profile in many segments": lambda: encode(_photo(), "JPEG", icc_profile=b"\0" * 300_000),
    "MPO (a phone's depth map)": _mpo,
    "TIFF in strips": lambda: encode(_photo(300, 200), "TIFF"),
    "TIFF compressed with EXIF": lambda: encode(_photo(300, 200), "TIFF", compression="tiff_lzw", exif=_exif()),
    "TIFF in tiles": lambda: encode(_photo(300, 200), "TIFF", tile=(16, 16)),
    "BigTIFF": _bigtiff,
    "PNG with text": lambda: _png_with_text(),
    "animated GIF": lambda: _animated_gif(),
    "WebP": lambda: encode(_photo(), "WEBP"),
    "BMP": lambda: encode(_photo(), "BMP"),
}


def _png_with_text() -> bytes:
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    for i in range(20):
        info.add_text(f"key{i}", "value " * 20, zip=i % 2 == 0)
    return encode(_photo(), "PNG", pnginfo=info)


def _animated_gif() -> bytes:
    out = io.BytesIO()
    frames = [_photo().convert("P"), _photo(120, 80).transpose(Image.Transpose.FLIP_LEFT_RIGHT).convert("P")]
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], comment=b"made by a test", loop=0)
    return out.getvalue()


@pytest.mark.parametrize("make", REAL.values(), ids=list(REAL))
def test_real_files_pass(make) -> None:
    data = make()
    check_structure(data)
    assert open_image(data).size[0] > 0


def test_a_big_endian_tiff_is_read_as_big_endian() -> None:
    entries = [(256, 3, 1, 64), (257, 3, 1, 64), (273, 4, 4096, 0), (279, 4, 4096, 0)]
    ifd = struct.pack(">H", len(entries)) + b"".join(
        struct.pack(">HHIHH", t, k, c, v, 0) if k == 3 else struct.pack(">HHII", t, k, c, v) for t, k, c, v in entries
    )
    with pytest.raises(ImageStructureError, match="4,096 strips for 64 rows"):
        check_structure(b"MM\x00*" + struct.pack(">I", 8) + ifd + b"\0\0\0\0")


def test_a_library_index_page_in_another_format_is_not_decoded(monkeypatch) -> None:
    """The index's atlas pages are PNGs: Pillow is told to try no other decoder."""
    import zipfile

    from mosaic.errors import LibraryFormatError
    from mosaic.library import TileLibrary

    from .conftest import flat_library

    good = flat_library([(10, 20, 30), (200, 100, 0)]).to_bytes()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.startswith("atlas-"):
                data = encode(Image.open(io.BytesIO(data)), "GIF")  # the same pixels, another format
            target.writestr(info, data)
    with pytest.raises(LibraryFormatError):
        TileLibrary.from_bytes(out.getvalue())
