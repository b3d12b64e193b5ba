"""The indexer's work on one photo: reduced decode, EXIF, HEIC, AVIF, refusals, face-keeping crops, hashes."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dal.blobs.indexed import group_photos
from mosaic import photo_index
from mosaic.images import open_image
from mosaic.photo_index import (
    MAX_AVIF_PIXELS,
    PHOTO_FORMAT_NAMES,
    WORK_SIDE,
    PhotoRefused,
    colour_distance,
    decode_photo,
    hamming,
    index_photo,
    perceptual_hash,
)
from mosaic.subject_crop import detect_faces, square_box
from tests.support.hostile_images import padded_jpeg

skimage_data = pytest.importorskip("skimage.data")


def _jpeg(image: Image.Image, **kwargs: object) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90, **kwargs)
    return out.getvalue()


def _photo(width: int = 1600, height: int = 1200, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // width, y * 255 // height, (x + y) * 127 // (width + height)], axis=-1)
    noise = rng.integers(0, 20, size=(height, width, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def test_a_large_jpeg_is_decoded_reduced_never_whole() -> None:
    data = _jpeg(_photo(4000, 3000))  # 12 MP
    # A phone's 12 MP photo (3024 px high) is decoded at 1/8 at the default work size, and its
    # 504 x 378 is worked at as it is (within the slack): no resize after the decode.
    phone_jpeg = _jpeg(_photo(4032, 3024))
    assert decode_photo(phone_jpeg).size == (504, 378)
    phone = Image.open(io.BytesIO(phone_jpeg))
    phone.draft("RGB", (WORK_SIDE, WORK_SIDE))
    assert phone.size == (504, 378)
    image = decode_photo(data, work_side=384)
    assert min(image.size) == 384 and image.size == (512, 384)
    # Pillow's draft decoded at 1/4 (1000 x 750), not 4000 x 3000, before the last reduction.
    opened = Image.open(io.BytesIO(data))
    opened.draft("RGB", (384, 384))
    assert opened.size == (1000, 750)


def test_a_phone_jpeg_with_a_second_picture_is_decoded_reduced_too() -> None:
    """Phones append a depth map or an HDR gain map after the photo (CIPA Multi-Picture Format),
    which Pillow opens as MPO: the photo, its first picture, is decoded at 1/8 all the same."""
    photo = _photo(4032, 3024)
    out = io.BytesIO()
    photo.save(out, "MPO", save_all=True, append_images=[Image.new("RGB", (1008, 756))], quality=90)
    assert Image.open(io.BytesIO(out.getvalue())).format == "MPO"
    image = decode_photo(out.getvalue())
    assert image.size == (504, 378)  # DCT-scaled: a whole decode would have been resized to 480 x 360
    first = np.asarray(photo.resize(image.size, Image.Resampling.BOX), dtype=float)
    assert np.abs(np.asarray(image, dtype=float) - first).mean() < 6  # the photo, not the black map


def test_exif_rotation_makes_a_portrait_upright() -> None:
    landscape = _photo(1200, 900)
    marked = np.asarray(landscape).copy()
    marked[:100, :100] = (255, 0, 0)  # red in the stored top-left corner
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: shown turned 90 degrees clockwise
    data = _jpeg(Image.fromarray(marked), exif=exif.tobytes())
    image = decode_photo(data)
    assert image.height > image.width  # a portrait
    pixels = np.asarray(image)
    top_right = pixels[:20, -20:].mean(axis=(0, 1))  # the stored top-left is now top-right
    assert top_right[0] > 200 and top_right[1] < 80


def test_heic_is_read_with_pillow_heif() -> None:
    pillow_heif = pytest.importorskip("pillow_heif")
    out = io.BytesIO()
    pillow_heif.from_pillow(_photo(800, 600)).save(out, format="HEIF", quality=80)
    data = out.getvalue()
    assert data[4:8] == b"ftyp"
    indexed = index_photo(data)
    assert indexed.tile.shape == (64, 64, 3) and indexed.work_size == (WORK_SIDE * 4 // 3, WORK_SIDE)


def test_an_iphone_heic_is_indexed_from_its_embedded_thumbnail() -> None:
    """HEVC has no reduced decode; an iPhone's HEIC carries a 320 x 240 thumbnail, which is
    decoded instead. A thumbnail too small for it, or none, decodes the photo itself."""
    import pillow_heif

    photo = _photo(480, 360, seed=5)  # small (no larger than the work size needs): x265 encodes slowly
    for thumbnails, size in (([320], (320, 240)), ([160], (480, 360)), ([], (480, 360))):
        out = io.BytesIO()
        pillow_heif.from_pillow(photo).save(out, format="HEIF", quality=90, thumbnails=thumbnails)
        image = decode_photo(out.getvalue())
        assert image.size == size, thumbnails
        same = np.asarray(photo.resize(size, Image.Resampling.BOX), dtype=float)
        assert np.abs(np.asarray(image, dtype=float) - same).mean() < 8, thumbnails  # the photo, scaled
        assert index_photo(out.getvalue()).tile.shape == (64, 64, 3)


def test_an_iphone_heics_display_p3_profile_is_applied_to_its_tile() -> None:
    """An iPhone's HEIC is Display P3, said by an ICC profile; read as sRGB its tile comes out dull
    (a wide-gamut green stored as (112, 199, 47) was an olive tile). The photo and its thumbnail."""
    import pillow_heif
    from PIL import ImageCms

    from tests.engine.test_engine_images import ADOBE_RGB, _matrix_profile

    icc = _matrix_profile("Adobe RGB (1998) lookalike", ADOBE_RGB, 563 / 256)
    srgb = ImageCms.createProfile("sRGB")
    stored = ImageCms.profileToProfile(
        Image.new("RGB", (640, 480), (0, 200, 0)), srgb, ImageCms.ImageCmsProfile(io.BytesIO(icc))
    )
    assert stored is not None and stored.getpixel((0, 0))[0] > 90  # read as sRGB: an olive
    for thumbnails in ([], [320]):
        out = io.BytesIO()
        pillow_heif.from_pillow(stored).save(out, format="HEIF", quality=100, icc_profile=icc, thumbnails=thumbnails)
        tile = index_photo(out.getvalue()).tile.reshape(-1, 3).mean(axis=0)
        assert np.abs(tile - (0, 200, 0)).max() <= 12, (thumbnails, tile)


# sRGB -> Display P3, linear light (D65): the published matrix, independent of the code under test.
_P3_FROM_SRGB = np.array([[0.8225, 0.1774, 0.0], [0.0332, 0.9669, 0.0], [0.0171, 0.0724, 0.9108]])


def _as_display_p3(colour: tuple[int, int, int]) -> tuple[int, ...]:
    v = np.asarray(colour, float) / 255
    linear = _P3_FROM_SRGB @ np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)
    encoded = np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055)
    return tuple(int(c) for c in np.rint(255 * encoded))


@pytest.mark.parametrize("primaries", [12, 1])
def test_a_heic_whose_colours_are_said_by_cicp_primaries_alone_is_read_in_srgb(primaries: int) -> None:
    """Some Android phones describe a HEIC's colours with a CICP ("nclx") box and no ICC profile:
    Display P3 primaries (12) are moved to sRGB's; sRGB's own (1) leave the pixels as they are."""
    import pillow_heif

    pillow_heif.register_heif_opener()
    for srgb in ((0, 200, 0), (200, 40, 30), (30, 60, 200), (128, 128, 128)):
        stored = _as_display_p3(srgb) if primaries == 12 else srgb
        nclx = {
            "color_primaries": primaries,
            "transfer_characteristics": 13,
            "matrix_coefficients": 6,
            "full_range_flag": 1,
        }
        out = io.BytesIO()
        Image.new("RGB", (400, 300), stored).save(out, "HEIF", quality=100, chroma=444, nclx_profile=nclx)
        for read in (index_photo(out.getvalue()).tile, np.asarray(open_image(out.getvalue()))):
            mean = read.reshape(-1, 3).mean(axis=0)
            assert np.abs(mean - srgb).max() <= 8, (srgb, stored, mean)


def _avif(image: Image.Image, **kwargs: object) -> bytes:
    out = io.BytesIO()
    image.save(out, "AVIF", quality=80, speed=10, **kwargs)
    return out.getvalue()


def test_an_avif_photo_is_read_upright_with_its_colours() -> None:
    """AVIF (AV1 in the HEIF container) goes to Pillow's libavif, not to pillow-heif (which has
    no AV1 decoder and refused it), and its rotation turns it upright as a JPEG's does."""
    photo = _photo(1200, 900, seed=2)
    marked = np.asarray(photo).copy()
    marked[:100, :100] = (255, 0, 0)  # red in the stored top-left corner
    exif = Image.Exif()
    exif[0x0112] = 6
    data = _avif(Image.fromarray(marked), exif=exif.tobytes())
    image = decode_photo(data)
    assert image.size == (WORK_SIDE, WORK_SIDE * 4 // 3)  # a portrait, reduced
    pixels = np.asarray(image, dtype=float)
    top_right = pixels[:20, -20:].mean(axis=(0, 1))  # the stored top-left is now top-right
    assert top_right[0] > 200 and top_right[1] < 80
    same = np.asarray(photo.transpose(Image.Transpose.ROTATE_270).resize(image.size, Image.Resampling.BOX), float)
    assert np.abs(pixels - same)[40:, :].mean() < 8  # the photo's own colours, away from the mark
    # A file whose major brand is the generic "mif1", AVIF only among its compatible brands.
    generic = data.replace(b"ftypavif", b"ftypmif1", 1)
    assert np.array_equal(np.asarray(decode_photo(generic)), np.asarray(image))
    assert index_photo(data).tile.shape == (64, 64, 3)


def test_an_avif_cut_short_is_refused_as_a_damaged_avif_not_as_no_image() -> None:
    """libavif cannot read its container, so Pillow knows no format for the bytes; the file's
    brands say AVIF, and that is what the person is told."""
    data = _avif(_photo(400, 300))
    with pytest.raises(PhotoRefused, match="^cannot decode AVIF image: the file is damaged or cut short$"):
        index_photo(data[: len(data) // 2])


def test_an_avif_too_large_to_decode_within_the_budget_is_refused_with_why() -> None:
    """libavif has no reduced decode: past ``MAX_AVIF_PIXELS`` the indexer would leave its memory
    budget, so the photo is refused before any pixel is decoded, saying what to do instead."""
    side = int(MAX_AVIF_PIXELS**0.5) + 16
    with pytest.raises(PhotoRefused, match=r"AVIF has no reduced decode.*saved as JPEG"):
        index_photo(_avif(Image.new("RGB", (side, side), (200, 30, 40))))
    with pytest.raises(PhotoRefused, match="larger than the maximum"):
        index_photo(_avif(_photo(400, 300)), max_pixels=100_000)


@pytest.mark.parametrize("subsampling", ["4:4:4", "4:2:0"])
def test_the_avif_budget_bounds_what_libavif_really_holds(tmp_path: Path, subsampling: str) -> None:
    """Measured in a fresh process, as the indexer decodes it: the peak RSS grows by no more than
    the ``_AVIF_BYTES_PER_PIXEL`` that ``MAX_AVIF_PIXELS`` is made of, and by at least half of it
    (a figure far above what is held would refuse photos for nothing)."""
    path = tmp_path / "photo.avif"
    path.write_bytes(_avif(_photo(3000, 2000, seed=4), subsampling=subsampling))
    script = (
        "import re, sys\n"
        "from mosaic.photo_index import decode_photo\n"
        "peak = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) * 1024\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "before = peak()\n"
        "decode_photo(data)\n"
        "print(peak() - before)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    per_pixel = int(done.stdout.split()[0]) / (3000 * 2000)
    assert photo_index._AVIF_BYTES_PER_PIXEL / 2 <= per_pixel <= photo_index._AVIF_BYTES_PER_PIXEL, per_pixel


def test_a_file_of_no_accepted_format_is_refused_naming_the_formats_a_library_takes() -> None:
    """JPEG 2000 is a real image format Pillow could open, but not one a library takes."""
    out = io.BytesIO()
    _photo(200, 150).save(out, "JPEG2000")
    assert PHOTO_FORMAT_NAMES == "JPEG, PNG, WebP, GIF, BMP, TIFF, HEIC or AVIF"
    with pytest.raises(PhotoRefused, match=f"not an image in an accepted format \\({PHOTO_FORMAT_NAMES}\\)"):
        index_photo(out.getvalue())


def _face_at_the_edge() -> tuple[bytes, tuple[int, int, int, int]]:
    """The astronaut (whose face OpenCV finds) at the left edge of a wide canvas, her face about
    a seventh of its height (the model finds faces from an eighth up, see ``mosaic.photo_index``)."""
    astronaut = Image.fromarray(skimage_data.astronaut()).resize((1024, 1024), Image.Resampling.LANCZOS)
    canvas = np.full((1024, 2600, 3), 90, np.uint8)
    canvas[:, 1300:] = _photo(1300, 1024, seed=3)  # busy edges on the right: the energy measure would go there
    canvas[:, 0:1024] = np.asarray(astronaut)
    return _jpeg(Image.fromarray(canvas)), (0, 0, 1024, 1024)


def test_a_face_near_the_edge_stays_in_the_tile_where_the_centre_crop_cuts_it() -> None:
    data, _ = _face_at_the_edge()
    image = decode_photo(data)
    faces = detect_faces(image)
    assert faces, "OpenCV finds the astronaut's face"
    x, y, w, h = faces[0]
    left, top, side = square_box(image, faces)
    assert left <= x and x + w <= left + side and top <= y and y + h <= top + side
    centre_left = (image.width - side) // 2
    assert not (centre_left <= x), "the centre crop would have cut the face off"
    assert index_photo(data).faces >= 1


def test_without_a_face_the_square_goes_to_the_detail() -> None:
    canvas = np.full((600, 1800, 3), 128, np.uint8)
    canvas[:, 1200:] = np.asarray(_photo(600, 600, seed=5))
    image = decode_photo(_jpeg(Image.fromarray(canvas)))
    left, _, side = square_box(image, [])
    assert left >= image.width - side - 8  # the busy right end, not the flat centre


def test_burst_shots_hash_close_and_group_and_other_photos_do_not() -> None:
    base = np.asarray(Image.fromarray(skimage_data.chelsea()).resize((1200, 900))).astype(np.int16)
    rng = np.random.default_rng(7)
    burst = {}
    for i in range(4):
        noisy = np.clip(base + rng.integers(-12, 13, size=base.shape), 0, 255).astype(np.uint8)
        burst[f"burst-{i}.jpg"] = perceptual_hash(decode_photo(_jpeg(Image.fromarray(noisy))))
    astronaut = perceptual_hash(Image.fromarray(skimage_data.astronaut()))
    coffee = perceptual_hash(Image.fromarray(skimage_data.coffee()))
    assert max(hamming(a, b) for a in burst.values() for b in burst.values()) <= 6
    assert hamming(astronaut, coffee) > 16 and min(hamming(astronaut, h) for h in burst.values()) > 16
    groups = group_photos({**burst, "astronaut.jpg": astronaut, "coffee.jpg": coffee})
    assert groups == [sorted(burst)]


def test_plain_photos_of_different_colours_are_not_one_group_but_a_slightly_brighter_shot_is() -> None:
    """Flat photos have no layout, so their layout hashes are alike: the mean colour tells them
    apart. A burst shot a little brighter than the others still joins them."""
    plain = {
        f"{name}.png": perceptual_hash(Image.new("RGB", (400, 300), rgb))
        for name, rgb in {
            "red": (220, 30, 30),
            "green": (30, 200, 40),
            "blue": (30, 40, 210),
            "yellow": (240, 220, 20),
        }.items()
    }
    assert {h[:16] for h in plain.values()} == {"0" * 16}  # no layout: the layout alone would group them
    base = np.asarray(Image.fromarray(skimage_data.chelsea()).resize((1200, 900))).astype(np.int16)
    shots = {
        f"shot-{i}.jpg": perceptual_hash(
            decode_photo(_jpeg(Image.fromarray(np.clip(base + lift, 0, 255).astype(np.uint8))))
        )
        for i, lift in enumerate((0, 6, 12))
    }
    assert group_photos({**plain, **shots}) == [sorted(shots)]
    assert colour_distance(plain["red.png"], plain["blue.png"]) > 50
    assert group_photos({"old-a": "0" * 16, "old-b": "0" * 16}) == [["old-a", "old-b"]]  # older hashes: layout alone


def test_grouping_a_library_of_hundreds_matches_every_pair_compared_one_by_one() -> None:
    """``group_photos`` compares blocks of photos at once (the indexer regroups the whole library
    after every batch); the groups are those of comparing each pair alone, across blocks, with
    near-duplicates far apart in name order and older hashes without a colour among them."""
    rng = np.random.default_rng(41)
    hashes: dict[str, str] = {}
    for i in range(300):
        layout, rgb = int(rng.integers(0, 2**63)), rng.integers(0, 256, 3)
        hashes[f"a{i:03d}"] = f"{layout:016x}" + "".join(f"{v:02x}" for v in rgb)
        if i % 9 == 0:  # a near-duplicate named to sort far away: a few bits and colour units off
            flipped = layout ^ (1 << int(rng.integers(0, 64))) ^ (1 << int(rng.integers(0, 64)))
            near = np.clip(rgb + rng.integers(-4, 5, 3), 0, 255)
            hashes[f"z{i:03d}"] = f"{flipped:016x}" + "".join(f"{v:02x}" for v in near)
        if i % 50 == 0:  # an older hash: its layout alone
            hashes[f"m{i:03d}"] = f"{layout ^ 1:016x}"

    def alike(a: str, b: str) -> bool:
        if hamming(a, b) > 10:
            return False
        apart = colour_distance(a, b)
        return apart is None or apart <= 12.0

    names = sorted(hashes)
    parent = {n: n for n in names}

    def root(n: str) -> str:
        while parent[n] != n:
            n = parent[n]
        return n

    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if alike(hashes[a], hashes[b]):
                parent[root(b)] = root(a)
    expected: dict[str, list[str]] = {}
    for n in names:
        expected.setdefault(root(n), []).append(n)
    groups = sorted((g for g in expected.values() if len(g) > 1), key=lambda g: g[0])
    assert len(groups) >= 34 and group_photos(hashes) == groups


def _png_bomb() -> bytes:
    """A PNG declaring 30,000 x 30,000 pixels (900 MP) in a few hundred bytes."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", 30_000, 30_000, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 1000))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "zero bytes"),
        (b"just some text, not a photo at all\n" * 10, "not an image"),
        (_jpeg(_photo(800, 600))[:5000], "^cannot decode image: the file is cut short: damaged, or not copied whole$"),
        (_png_bomb(), "larger than the maximum"),
        (padded_jpeg(2 * 1024 * 1024), "segments"),
        (b"\0\0\0\x18ftypheic" + b"\0" * 64, "cannot decode HEIF"),
    ],
    ids=["zero-bytes", "not-an-image", "truncated-jpeg", "png-bomb", "padded-jpeg", "broken-heic"],
)
def test_bad_photos_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(PhotoRefused, match=reason):
        index_photo(data)


def test_a_header_past_pillows_own_limit_is_refused_in_the_indexers_words() -> None:
    """Pillow refuses 900 MP as it opens the header, in its words ("... could be decompression
    bomb DOS attack"); the library page shows the photo's pixels and the indexer's budget."""
    with pytest.raises(PhotoRefused) as refused:
        index_photo(_png_bomb())
    assert str(refused.value) == "image of 900,000,000 pixels is larger than the maximum of 120,000,000 pixels"


def test_a_photo_over_the_pixel_budget_is_refused_before_decoding() -> None:
    with pytest.raises(PhotoRefused, match="larger than the maximum"):
        index_photo(_jpeg(_photo(1000, 1000)), max_pixels=500_000)


def test_a_100_mp_camera_photo_is_indexed_though_pillow_calls_it_a_bomb() -> None:
    """Over Pillow's 89.5 MP warning, under the indexer's 120 MP budget: a tile, not a refusal."""
    data = _jpeg(Image.new("RGB", (11548, 8661), (90, 140, 200)))
    assert Image.MAX_IMAGE_PIXELS < 11548 * 8661
    photo = index_photo(data)
    assert photo.tile.shape[2] == 3 and min(photo.work_size) == WORK_SIDE
