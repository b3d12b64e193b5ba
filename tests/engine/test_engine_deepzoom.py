"""mosaic.deepzoom: the DZI layout, its levels and tile counts, for odd sizes.

The expected counts are computed here from the DZI definition (each level halves the one
above, sides rounded up, down to 1 x 1), not from the code under test.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mosaic.deepzoom import (
    Descriptor,
    level_covering,
    level_size,
    level_tiles,
    read_descriptor,
    tile_origin,
    top_level,
    write_dzi,
)

DZ_NS = "{http://schemas.microsoft.com/deepzoom/2008}"


def expected_levels(width: int, height: int, tile: int) -> list[tuple[int, int, int, int]]:
    """(width, height, columns, rows) per level, level 0 (1 x 1) first."""
    max_level = math.ceil(math.log2(max(width, height)))
    levels = []
    for level in range(max_level + 1):
        scale = 2 ** (max_level - level)
        w, h = math.ceil(width / scale), math.ceil(height / scale)
        levels.append((w, h, math.ceil(w / tile), math.ceil(h / tile)))
    return levels


@pytest.mark.parametrize(("width", "height", "tile"), [(1001, 333, 254), (257, 513, 64), (97, 1, 16), (1, 1, 254)])
def test_levels_and_tile_counts_follow_the_dzi_definition(tmp_path: Path, width: int, height: int, tile: int) -> None:
    rng = np.random.default_rng(width * height)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    write_dzi(pixels, tmp_path / "m.dzi", tile_size=tile, overlap=1)

    root = ET.parse(tmp_path / "m.dzi").getroot()
    assert root.tag == f"{DZ_NS}Image"
    assert (root.get("TileSize"), root.get("Overlap"), root.get("Format")) == (str(tile), "1", "jpg")
    size = root.find(f"{DZ_NS}Size")
    assert size is not None and (size.get("Width"), size.get("Height")) == (str(width), str(height))
    assert read_descriptor((tmp_path / "m.dzi").read_bytes()) == Descriptor(width, height, tile, 1)

    files = tmp_path / "m_files"
    levels = expected_levels(width, height, tile)
    assert sorted(int(p.name) for p in files.iterdir() if p.is_dir()) == list(range(len(levels)))
    for level, (w, h, cols, rows) in enumerate(levels):
        names = {p.name for p in (files / str(level)).iterdir()}
        assert names == {f"{c}_{r}.jpg" for c in range(cols) for r in range(rows)}, f"level {level}"
        # The last tile of a level ends at the level's edge (plus the overlap on its left/top).
        with Image.open(files / str(level) / f"{cols - 1}_{rows - 1}.jpg") as last:
            left, top = (cols - 1) * tile, (rows - 1) * tile
            assert last.size == (w - left + (1 if cols > 1 else 0), h - top + (1 if rows > 1 else 0))
            # The geometry helpers (for readers of a pyramid) agree with what libvips wrote.
            assert tile_origin(cols - 1, rows - 1, tile_size=tile) == (left - (cols > 1), top - (rows > 1))
        assert (level_size(width, height, level), level_tiles(width, height, level, tile_size=tile)) == (
            (w, h),
            (cols, rows),
        )
    assert top_level(width, height) == len(levels) - 1
    covering = level_covering(width, height, 300)
    assert max(levels[covering][:2]) >= 300 or covering == len(levels) - 1
    assert covering == 0 or max(levels[covering - 1][:2]) < 300


def test_full_level_keeps_the_pixels(tmp_path: Path) -> None:
    pixels = np.zeros((40, 70, 3), dtype=np.uint8)
    pixels[:, :35] = (250, 10, 10)
    pixels[:, 35:] = (10, 10, 250)
    write_dzi(pixels, tmp_path / "m.dzi", tile_size=254, overlap=1, quality=95)
    top = max(int(p.name) for p in (tmp_path / "m_files").iterdir() if p.is_dir())
    with Image.open(tmp_path / "m_files" / str(top) / "0_0.jpg") as tile:
        got = np.asarray(tile.convert("RGB"), dtype=int)
    assert got.shape == (40, 70, 3)
    assert np.abs(got[:, :30] - (250, 10, 10)).max() < 20
    assert np.abs(got[:, 40:] - (10, 10, 250)).max() < 20


def test_a_name_without_dzi_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=".dzi"):
        write_dzi(np.zeros((4, 4, 3), dtype=np.uint8), tmp_path / "m.jpg")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"<Image/>",
        b"not xml",
        b'<Image TileSize="0" Overlap="1"><Size Width="5" Height="5"/></Image>',
        b'<Image TileSize="x" Overlap="1"><Size Width="5" Height="5"/></Image>',
    ],
)
def test_read_descriptor_refuses_what_is_not_a_descriptor(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a Deep Zoom descriptor"):
        read_descriptor(data)


def test_tiles_are_4_2_0_like_the_full_size_jpeg(tmp_path: Path) -> None:
    from PIL import JpegImagePlugin

    pixels = np.random.default_rng(3).integers(0, 256, size=(64, 96, 3), dtype=np.uint8)
    write_dzi(pixels, tmp_path / "m.dzi")
    with Image.open(tmp_path / "m_files" / "7" / "0_0.jpg") as tile:
        assert JpegImagePlugin.get_sampling(tile) == 2  # 4:2:0 (libvips' own choice at Q 90 is 4:4:4: 0)
