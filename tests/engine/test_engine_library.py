"""Tile libraries: building from images, centre-cropping, the index blob and derived sizes."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mosaic import ATLAS_SIZE, LibraryFormatError, TileLibrary, build_library

from .conftest import encode, random_library


def _three_band_image(width: int = 300, height: int = 100) -> Image.Image:
    """Red left third, green middle, blue right third: a squashed tile would show all three."""
    array = np.zeros((height, width, 3), np.uint8)
    array[:, : width // 3] = (255, 0, 0)
    array[:, width // 3 : 2 * width // 3] = (0, 255, 0)
    array[:, 2 * width // 3 :] = (0, 0, 255)
    return Image.fromarray(array)


def test_build_skips_and_reports_files_that_are_not_images() -> None:
    sources = [
        ("a.png", encode(Image.new("RGB", (50, 50), (10, 20, 30)))),
        ("notes.txt", b"hello"),
        ("b.jpg", encode(Image.new("L", (80, 40), 200), "JPEG")),
        ("broken.png", encode(Image.new("RGB", (50, 50)))[:30]),
    ]
    library, skipped = build_library(sources)
    assert library.names == ("a.png", "b.jpg")
    assert library.atlas.shape == (2, ATLAS_SIZE, ATLAS_SIZE, 3)
    assert [name for name, _ in skipped] == ["notes.txt", "broken.png"]
    assert all(reason for _, reason in skipped)
    assert np.all(library.atlas[0] == (10, 20, 30))


def test_no_usable_image_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no usable image among 1 files"):
        build_library([("x.txt", b"nope")])


def test_tiles_are_centre_cropped_never_squashed() -> None:
    library, _ = build_library([("bands.png", encode(_three_band_image()))])
    tile = library.atlas[0].astype(int)
    assert np.all(np.abs(tile - (0, 255, 0)).max(axis=-1)[:, 4:-4] <= 2)


def test_index_round_trip_is_exact_and_version_follows_content() -> None:
    library = random_library(70)
    again = TileLibrary.from_bytes(library.to_bytes())
    assert np.array_equal(again.atlas, library.atlas)
    assert again.names == library.names and again.version == library.version
    changed = TileLibrary.from_tiles(library.atlas[:-1], library.names[:-1])
    assert changed.version != library.version
    assert TileLibrary.from_tiles(library.atlas, library.names).version == library.version


def test_index_of_more_than_one_page_round_trips() -> None:
    atlas = np.repeat(random_library(3).atlas, 1400, axis=0)  # 4200 tiles: two PNG pages
    library = TileLibrary.from_tiles(atlas, [f"t{i}" for i in range(len(atlas))])
    again = TileLibrary.from_bytes(library.to_bytes())
    assert np.array_equal(again.atlas, library.atlas)


def _damaged_index(how: str) -> bytes:
    """A real index whose deflated ``index.json`` is overwritten (zlib.error), or whose directory
    asks for zip version 25.5 (NotImplementedError): both once escaped as themselves."""
    data = bytearray(random_library(3).to_bytes())
    info = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("index.json")
    if how == "deflate":
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
        data[start : start + 8] = b"\xff" * 8
    else:
        entry = data.index(b"PK\x01\x02")
        data[entry + 6 : entry + 8] = (255).to_bytes(2, "little")
    return bytes(data)


@pytest.mark.parametrize(
    "data",
    [b"", b"not a zip", b"PK\x03\x04broken", _damaged_index("deflate"), _damaged_index("version")],
    ids=["empty", "text", "broken", "damaged-deflate", "later-version"],
)
def test_unreadable_index_is_a_clear_error(data: bytes) -> None:
    with pytest.raises(LibraryFormatError, match="unreadable tile library index"):
        TileLibrary.from_bytes(data)


def test_index_of_an_unknown_format_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "index.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("index.json", '{"format": "photomosaics-tile-library", "format_version": 99}')
    with pytest.raises(LibraryFormatError, match="version 99"):
        TileLibrary.from_bytes(path.read_bytes())


@pytest.mark.parametrize("size", [1, 2, 7, 16, 64])
def test_smaller_tile_sizes_are_derived_and_cached(size: int) -> None:
    library = random_library(5)
    tiles = library.tiles(size)
    assert tiles.shape == (5, size, size, 3) and tiles.dtype == np.uint8
    assert library.tiles(size) is tiles
    means = tiles.reshape(5, -1, 3).mean(axis=1)
    assert np.abs(means - library.atlas.reshape(5, -1, 3).mean(axis=1)).max() < 12
    with pytest.raises(ValueError):
        library.tiles(0)
