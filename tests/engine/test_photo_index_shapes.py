"""Photos of odd make: a damaged AVIF is a refusal, not an exception; a panorama or a sliver is
worked at a bounded size (``MAX_WORK_LONG``), and one too thin for a square is refused with why."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from mosaic.errors import ImageDecodeError
from mosaic.images import open_image
from mosaic.photo_index import MAX_WORK_LONG, WORK_SIDE, PhotoRefused, index_photo
from tests.support.hostile_images import damaged_avif


def _gradient(width: int, height: int) -> Image.Image:
    y, x = np.mgrid[0:height, 0:width]
    return Image.fromarray(np.stack([x * 255 // width, y * 255 // height, (x + y) % 256], -1).astype(np.uint8))


def _encoded(image: Image.Image, kind: str) -> bytes:
    out = io.BytesIO()
    image.save(out, kind)
    return out.getvalue()


@pytest.mark.parametrize("how", ["zeroed", "inverted", "cut-short"])
def test_a_damaged_avif_is_refused_as_undecodable_wherever_it_is_opened(how: str) -> None:
    """The indexer records the reason and goes on with the batch; the web app answers a job's
    photo with a 4xx (``ImageDecodeError``), never a server error."""
    data = damaged_avif(how)
    with pytest.raises(PhotoRefused, match="cannot decode image|cannot read image header"):
        index_photo(data)
    with pytest.raises(ImageDecodeError):
        open_image(data)


def test_a_panorama_keeps_its_working_height_up_to_the_longest_side_worked_at() -> None:
    across = MAX_WORK_LONG * WORK_SIDE // 400  # 3,686 x 400: under the slack, under the length
    photo = index_photo(_encoded(_gradient(across, 400), "PNG"))
    assert photo.work_size == (across, 400)
    tall = index_photo(_encoded(_gradient(400, across), "JPEG"))
    assert tall.work_size == (400, across)


@pytest.mark.parametrize("kind", ["PNG", "JPEG"])
def test_a_long_sliver_is_worked_at_the_longest_side_not_whole(kind: str) -> None:
    """34,000 x 300 (a damaged header said so, or a scanner's strip) was worked at whole: the face
    search took 3.5 s and the edge measure 300 MB. Now its longer side is ``MAX_WORK_LONG``."""
    photo = index_photo(_encoded(_gradient(30_000, 300), kind))
    assert photo.work_size == (MAX_WORK_LONG, round(300 * MAX_WORK_LONG / 30_000))
    assert photo.tile.shape == (64, 64, 3)
    left, _, side = photo.box
    assert side == photo.work_size[1] and 0 <= left <= MAX_WORK_LONG - side


@pytest.mark.parametrize("size", [(60_000, 100), (70_000, 250)], ids=["decoded-by-pillow", "shrunk-by-libvips"])
def test_a_sliver_too_thin_for_a_square_of_16_pixels_is_refused_with_why(size: tuple[int, int]) -> None:
    """Named by the photo's own size, also when it is over 16 MP (libvips would shrink it first)."""
    width, height = size
    with pytest.raises(PhotoRefused, match=rf"too long and thin for a tile: {width}x{height} pixels, more than 256:1"):
        index_photo(_encoded(Image.new("RGB", size, (90, 120, 200)), "PNG"))


def test_a_heif_without_a_thumbnail_over_the_decoding_budget_is_refused_before_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HEVC has no reduced decode: without a thumbnail to read, a HEIF photo is decoded whole, at
    about 8 bytes a pixel (a 48 MP one would hold 380 MiB). Over ``MAX_HEIF_PIXELS`` it is refused
    with why; with a thumbnail (every iPhone's) its size does not matter. The budget is lowered
    here so that a small photo (x265 encodes a large one slowly) stands for a large one."""
    import pillow_heif

    from mosaic import photo_index

    photo = _gradient(640, 480)
    with_thumbnail, without = io.BytesIO(), io.BytesIO()
    pillow_heif.from_pillow(photo).save(with_thumbnail, format="HEIF", quality=80, thumbnails=[320])
    pillow_heif.from_pillow(photo).save(without, format="HEIF", quality=80, thumbnails=[])
    assert index_photo(without.getvalue()).work_size == (480, 360)  # within the real budget
    monkeypatch.setattr(photo_index, "_HEIF_BYTES_PER_PIXEL", photo_index.MAX_PROGRESSIVE_BYTES // 1000)
    with pytest.raises(PhotoRefused, match=r"HEIF photo of 640x480 pixels without a thumbnail.*saved as JPEG"):
        index_photo(without.getvalue())
    assert index_photo(with_thumbnail.getvalue()).work_size == (320, 240)
