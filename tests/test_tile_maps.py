"""Tile maps: an engine placement in, the same cell -> (tile, mirrored) out, through bytes and bands."""

from __future__ import annotations

import collections
import csv
import gzip
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dal.blobs.staging import safe_photo_name
from dal.blobs.tile_maps import CSV_HEADER, TileMap, join_bands, name_search, search_key
from dal.errors import TileMapFormatError

NAMES = ["beach.jpg", "cat, sleeping.jpg", "dog.jpg", "snow/field.png"]
BLOBS = ["tiles/beach.jpg", "tiles/cat-sleeping.jpg", "tiles/dog.jpg", "tiles/snow-field.jpg"]


def placement(rows: int, cols: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2 * len(NAMES), size=(rows, cols)).astype(np.int32)


def test_every_cell_names_the_placed_tile_and_whether_it_is_mirrored() -> None:
    choice = placement(5, 6)
    tile_map = TileMap.from_choice(choice, names=NAMES, blobs=BLOBS, library="pets")
    for (row, col), value in np.ndenumerate(choice):
        assert tile_map.at(col, row) == (NAMES[value % 4], BLOBS[value % 4], bool(value >= 4))


def test_bytes_round_trip_and_are_the_same_for_the_same_placement() -> None:
    tile_map = TileMap.from_choice(placement(9, 4), names=NAMES, blobs=BLOBS, library="pets", first_row=3)
    data = tile_map.encode()
    assert data == TileMap.from_choice(placement(9, 4), names=NAMES, blobs=BLOBS, library="pets", first_row=3).encode()
    back = TileMap.decode(data)
    assert (back.library, back.first_row, back.tiles) == ("pets", 3, tile_map.tiles)
    assert np.array_equal(back.cells, tile_map.cells)


def test_bands_join_into_the_map_of_the_whole_placement() -> None:
    whole = placement(10, 7)
    cuts = [(0, 3), (3, 4), (4, 10)]
    bands = [TileMap.from_choice(whole[a:b], names=NAMES, blobs=BLOBS, library="pets", first_row=a) for a, b in cuts]
    joined = join_bands([TileMap.decode(b.encode()) for b in bands])
    for (row, col), value in np.ndenumerate(whole):
        assert joined.at(col, row)[0::2] == (NAMES[value % 4], bool(value >= 4))
    with pytest.raises(ValueError, match="does not follow"):
        join_bands([bands[0], bands[2]])


def test_the_csv_lists_every_cell_with_its_tile_name_quoted_as_csv_does() -> None:
    choice = placement(3, 2)
    tile_map = TileMap.from_choice(choice, names=NAMES, blobs=BLOBS, library="pets", first_row=4)
    text = "".join(tile_map.csv_lines())
    rows = list(csv.reader(io.StringIO(text)))
    assert ",".join(rows[0]) == CSV_HEADER and len(rows) == 1 + 6
    for col, row, tile, mirrored in rows[1:]:
        value = choice[int(row) - 4, int(col)]
        assert (tile, mirrored) == (NAMES[value % 4], str(int(value >= 4)))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not gzip",
        gzip.compress(b'{"format":"x"}\n', mtime=0),
        gzip.compress(
            b'{"format":"photomosaics-tile-map","version":1,"library":"p","first_row":0,"rows":2,"columns":2,'
            b'"dtype":"<u2","tiles":[["a","b"]]}\n' + b"\0" * 6,
            mtime=0,
        ),
    ],
    ids=["empty", "not gzip", "another format", "cells cut short"],
)
def test_a_blob_that_is_not_a_tile_map_is_refused_with_one_error(data: bytes) -> None:
    with pytest.raises(TileMapFormatError):
        TileMap.decode(data)


def test_a_placement_outside_the_library_is_refused() -> None:
    with pytest.raises(ValueError, match="placement"):
        TileMap.from_choice(np.array([[8]]), names=NAMES, blobs=BLOBS, library="pets")


def test_a_placement_of_more_than_32767_distinct_photos_is_stored_in_wider_numbers() -> None:
    names = [f"p{i}.jpg" for i in range(40_000)]
    choice = np.arange(80_000, dtype=np.int32).reshape(2, 40_000)  # every photo, plain then mirrored
    data = TileMap.from_choice(choice, names=names, blobs=names, library="big").encode()
    assert b'"dtype":"<i4"' in __import__("gzip").decompress(data)[:200]
    tile_map = TileMap.decode(data)
    assert [tile_map.at(c, r)[0::2] for c, r in [(0, 0), (39_999, 0), (0, 1), (12_345, 1)]] == [
        ("p0.jpg", False),
        ("p39999.jpg", False),
        ("p0.jpg", True),
        ("p12345.jpg", True),
    ]


def test_the_map_keeps_its_library_version_and_counts_each_photos_cells() -> None:
    whole = placement(6, 5)
    cuts = [(0, 2), (2, 6)]
    bands = [
        TileMap.from_choice(whole[a:b], names=NAMES, blobs=BLOBS, library="pets", first_row=a, library_version="v1")
        for a, b in cuts
    ]
    joined = join_bands([TileMap.decode(b.encode()) for b in bands])
    assert joined.library_version == "v1"
    counts = np.bincount((whole % 4).ravel(), minlength=4)
    assert joined.uses() == {NAMES[i]: int(counts[i]) for i in range(4) if counts[i]}
    # bands of two versions (a library replaced mid-job): the map cannot say which it was
    mixed = [bands[0], TileMap.from_choice(whole[2:], names=NAMES, blobs=BLOBS, library="pets", first_row=2)]
    assert join_bands(mixed).library_version == ""
    # a map made before the version was kept reads as unknown
    assert (
        TileMap.decode(TileMap.from_choice(whole, names=NAMES, blobs=BLOBS, library="pets").encode()).library_version
        == ""
    )


def sized_placement(rows: int = 8, cols: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """A placement with one 4x4 cell, two 2x2 cells and base cells, as ``mosaic.sized`` makes it."""
    choice, sizes = placement(rows, cols), np.ones((rows, cols), np.uint8)
    for top, left, size, value in ((0, 4, 4, 5), (4, 0, 2, 1), (6, 2, 2, 6)):
        choice[top : top + size, left : left + size] = value
        sizes[top : top + size, left : left + size] = size
    return choice, sizes


def test_a_map_of_several_cell_sizes_says_each_cells_rectangle_and_is_version_2() -> None:
    choice, sizes = sized_placement()
    tile_map = TileMap.from_choice(choice, names=NAMES, blobs=BLOBS, library="pets", sizes=sizes)
    assert (
        tile_map.cell_at(6, 3) == (4, 0, 4)
        and tile_map.cell_at(1, 5) == (0, 4, 2)
        and tile_map.cell_at(3, 0) == (3, 0, 1)
    )
    assert tile_map.at(7, 2) == (NAMES[1], BLOBS[1], True)  # every base cell of a large cell holds its photo
    data = tile_map.encode()
    assert b'"version":2' in gzip.decompress(data) and b'"sized":true' in gzip.decompress(data)
    back = TileMap.decode(data)
    assert np.array_equal(back.sizes, sizes) and np.array_equal(back.cells, tile_map.cells)
    rows = list(csv.reader(io.StringIO("".join(tile_map.csv_lines()))))
    assert rows[0] == ["col", "row", "tile", "mirrored", "size"]
    assert ["4", "0", NAMES[1], "1", "4"] in rows and ["0", "4", NAMES[1], "0", "2"] in rows
    assert len(rows) - 1 == 64 - 15 - 3 - 3  # one line per cell: the large ones once
    rows_found, cols_found, _, _ = tile_map.places(NAMES[1])  # a large cell once, at its top-left
    assert (0, 4) in zip(rows_found.tolist(), cols_found.tolist()) and (1, 4) not in zip(
        rows_found.tolist(), cols_found.tolist()
    )
    # Each photo's use count (the job's photo list) counts a large cell once, as the CSV lists it.
    listed = collections.Counter(row[2] for row in rows[1:])
    assert tile_map.uses() == dict(listed) and sum(tile_map.uses().values()) == len(rows) - 1


def test_one_size_stays_the_version_1_map_byte_for_byte() -> None:
    choice = placement(6, 5)
    plain = TileMap.from_choice(choice, names=NAMES, blobs=BLOBS, library="pets")
    ones = TileMap.from_choice(choice, names=NAMES, blobs=BLOBS, library="pets", sizes=np.ones((6, 5), np.uint8))
    assert ones.encode() == plain.encode() and b'"version":1' in gzip.decompress(plain.encode())
    assert "".join(ones.csv_lines()).startswith(CSV_HEADER + "\r\n")


def test_bands_of_several_sizes_join_and_keep_their_rectangles() -> None:
    choice, sizes = sized_placement()
    maps = [
        TileMap.from_choice(choice[a:b], names=NAMES, blobs=BLOBS, library="pets", first_row=a, sizes=sizes[a:b])
        for a, b in ((0, 4), (4, 8))
    ]
    joined = join_bands([TileMap.decode(m.encode()) for m in maps])
    assert np.array_equal(joined.sizes, sizes) and maps[1].cell_at(3, 3) == (2, 2, 2)  # band rows: 6 - 4
    assert joined.cell_at(3, 7) == (2, 6, 2)


def test_a_sized_map_with_a_bad_size_is_refused() -> None:
    choice, sizes = sized_placement()
    sizes[0, 0] = 3
    data = TileMap.from_choice(choice, names=NAMES, blobs=BLOBS, library="pets", sizes=sizes).encode()
    with pytest.raises(TileMapFormatError, match="size"):
        TileMap.decode(data)


@pytest.mark.parametrize(
    ("text", "name", "found"),
    [
        ("wedding photo 12", "Wedding-photo-12-3f9c0a1b2d.jpg", True),
        ("café", "sub-dir-ete-cafe-a5811d8bd6.jpg", True),
        ("ÉTÉ", "sub-dir-ete-cafe-a5811d8bd6.jpg", True),
        ("img 1234", "IMG_1234.JPG", True),
        ("img-1234.jpg", "IMG_1234.JPG", True),
        ("C.J", "c.jpg", True),
        ("beach", "bench.jpg", False),
        ("photo 13", "Wedding-photo-12-3f9c0a1b2d.jpg", False),
        ("日本", "photo-0832ec3ef8.jpg", False),  # nothing a key keeps: the name itself must hold it
        ("日本", "日本.jpg", True),
        ("☕", "cafe.jpg", False),
    ],
)
def test_a_search_finds_a_name_as_a_person_knows_it(text: str, name: str, found: bool) -> None:
    assert name_search(text)(name, None) is found
    assert name_search(text)(name, search_key(name)) is found  # the key known beforehand: the same


_NAME_CHARS = st.sampled_from("abcXYZ019 _-.#%&()+,;'!@éüñÅçœß")


@settings(max_examples=300, deadline=None)
@given(folder=st.text(_NAME_CHARS, max_size=12), stem=st.text(_NAME_CHARS, min_size=1, max_size=40))
def test_an_uploaded_photo_is_found_by_the_name_it_had_on_the_persons_disk(folder: str, stem: str) -> None:
    """The staged name (``safe_photo_name``) may add a hash and change every separator: a search
    for the file's own name (without its extension) still finds it, and so does its folder's."""
    path = f"{folder}/{stem}.jpg" if folder.strip(" ./") else f"{stem}.jpg"
    try:
        staged = safe_photo_name(path)
    except ValueError:  # a name with nothing in it: refused at upload, nothing to find
        return
    for text in (stem, folder):
        if search_key(text):
            assert name_search(text)(staged, None), (path, staged, text)
