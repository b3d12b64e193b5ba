"""Every library cuts its tiles' squares as the indexer does (``mosaic.subject_crop``): a folder
given to ``render -l``, ``library create`` or ``POST /api/libraries`` keeps a portrait's face
where the centre crop cut it off, and a square photo's tile is the same bytes as before."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from mosaic.library import ATLAS_SIZE, build_library
from mosaic.subject_crop import detect_faces, subject_square

skimage_data = pytest.importorskip("skimage.data")


def _jpeg(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=95)
    return out.getvalue()


def _portrait_with_the_face_at_the_bottom(scale: int = 1) -> tuple[Image.Image, tuple[int, int, int, int]]:
    """The astronaut at the foot of a 512 x 1400 portrait of flat grain, and her face box there."""
    astronaut = Image.fromarray(skimage_data.astronaut())
    x, y, w, h = detect_faces(astronaut)[0]
    canvas = np.random.default_rng(1).integers(100, 140, (1400, 512, 3), dtype=np.uint8)
    canvas[-512:] = np.asarray(astronaut)
    image = Image.fromarray(canvas)
    if scale != 1:
        image = image.resize((512 * scale, 1400 * scale), Image.Resampling.LANCZOS)
    top = 1400 - 512
    return image, (x * scale, (top + y) * scale, w * scale, h * scale)


@pytest.mark.parametrize("scale", [1, 4])
def test_the_square_holds_the_face_the_centre_crop_cuts_off(scale: int) -> None:
    """At 4x (2,048 x 5,600 px) the faces are searched on a copy of 360 px across, and the
    square found there is placed on the photo."""
    image, (x, y, w, h) = _portrait_with_the_face_at_the_bottom(scale)
    left, top, side = subject_square(image)
    assert (left, side) == (0, image.width)
    assert top <= y and y + h <= top + side, (top, side, (x, y, w, h))
    centre = (image.height - side) // 2
    assert not (centre <= y and y + h <= centre + side), "the centre crop keeps the face: the test shows nothing"


def test_a_folder_librarys_tile_is_the_photos_face_not_its_centre() -> None:
    image, _ = _portrait_with_the_face_at_the_bottom()
    library, skipped = build_library([("portrait.jpg", _jpeg(np.asarray(image)))])
    assert not skipped
    tile = library.tiles(ATLAS_SIZE)[0].astype(np.float64)

    def cut(top: int) -> np.ndarray:
        square = image.crop((0, top, 512, top + 512)).resize((ATLAS_SIZE, ATLAS_SIZE), Image.Resampling.LANCZOS)
        return np.asarray(square, dtype=np.float64)

    face_square = np.abs(tile - cut(subject_square(image)[1])).mean()  # the square that holds the face
    centre_square = np.abs(tile - cut((1400 - 512) // 2)).mean()
    assert face_square < 5 and centre_square > 40, (face_square, centre_square)


def test_a_square_photos_tile_is_its_whole_picture_as_before() -> None:
    """The demo library's photos are square: their tiles (and so every mosaic made with them)
    are the same bytes as with the centre crop, which cut nothing from them either."""
    astronaut = skimage_data.astronaut()
    library, _ = build_library([("astronaut.png", _png(astronaut))])
    whole = Image.fromarray(astronaut).resize((ATLAS_SIZE, ATLAS_SIZE), Image.Resampling.LANCZOS, reducing_gap=3.0)
    assert np.array_equal(library.tiles(ATLAS_SIZE)[0], np.asarray(whole))


def _png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def test_threads_searching_at_once_find_what_one_thread_finds() -> None:
    """The indexer works two photos at once, a web worker one per request thread. One OpenCV
    detector shared by them raced: wrong boxes, and "Assertion failed ... setWindow" errors
    that skipped the photo. Each thread now has its own."""
    astronaut = np.asarray(Image.fromarray(skimage_data.astronaut()))
    images = []
    for i in range(8):
        canvas = np.random.default_rng(i).integers(0, 255, (600, 900, 3), dtype=np.uint8)
        canvas[40 + i * 5 : 552 + i * 5, 50 + i * 30 : 562 + i * 30] = astronaut
        images.append(Image.fromarray(canvas).resize((450 + i * 20, 300 + i * 13)))
    alone = [detect_faces(image) for image in images]
    assert sum(1 for found in alone if found) >= 6, alone  # the test sees faces to get wrong

    def search(offset: int) -> list[tuple[int, list[tuple[int, int, int, int]]]]:
        return [((offset + r) % 8, detect_faces(images[(offset + r) % 8])) for r in range(40)]

    with ThreadPoolExecutor(4) as pool:
        together = [found for results in pool.map(search, range(4)) for found in results]
    assert all(found == alone[i] for i, found in together)


def test_an_iphone_heic_in_a_folder_library_is_read_from_its_thumbnail() -> None:
    """As the indexer reads it: the 320 x 240 thumbnail an iPhone embeds, not the 12 MP HEVC
    picture (0.5-1 s of CPU and about 100 MB each), which a folder of them decoded for a while."""
    import pillow_heif

    from mosaic.images import open_image
    from mosaic.library import decode_size

    photo = Image.fromarray(np.random.default_rng(2).integers(0, 255, (30, 40, 3), dtype=np.uint8))
    out = io.BytesIO()
    # 1280 x 960 stands in for the 12 MP picture: x265 takes about 8 s of CPU to encode that one,
    # and any picture over 360 px a side is read from the thumbnail alike.
    pillow_heif.from_pillow(photo.resize((1280, 960))).save(out, format="HEIF", quality=60, thumbnails=[320])
    data = out.getvalue()
    assert open_image(data, min_size=decode_size(data)).size == (320, 240)
    library, skipped = build_library([("IMG_0001.HEIC", data)])
    assert not skipped and len(library) == 1
