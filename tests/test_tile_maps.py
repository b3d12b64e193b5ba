"""Tile maps: an engine placement in, the same cell -> (tile, mirrored) out, through bytes and bands."""

from __future__ import annotations

import csv
import gzip
import io

import numpy as np
import pytest

from dal.blobs.tile_maps import CSV_HEADER, TileMap, join_bands
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
