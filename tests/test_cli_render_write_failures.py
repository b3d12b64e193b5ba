"""``photomosaics render`` whose output cannot be written: one clear line, and nothing lost.

A full disk cannot be had on demand without privileges, but the kernel's file size limit
(``RLIMIT_FSIZE``) fails a write the same way, at a size the test chooses: the render's own
process gets it, with ``SIGXFSZ`` ignored so that the write returns an error (``EFBIG``)
instead of killing the process. The photos, the library and its cache and the encoders are real;
a library cache the limit stops is only not kept.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

LIMIT = 256 * 1024  # bytes any one file of the render may grow to
TILE_LIMIT = 8 * 1024  # a Deep Zoom pyramid is many small files: one of its noisy tiles is over this


def _limit(size: int) -> Callable[[], None]:
    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limited


@pytest.fixture
def photos(tmp_path: Path) -> tuple[Path, Path]:
    """A noisy 1,000 x 750 photo (its mosaic at tile 16 is far over ``LIMIT``) and 12 tiles."""
    rng = np.random.default_rng(3)
    target = tmp_path / "photo.png"
    Image.fromarray(rng.integers(0, 256, (750, 1000, 3), dtype=np.uint8)).save(target)
    tiles = tmp_path / "tiles"
    tiles.mkdir()
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (48, 48, 3), dtype=np.uint8)).save(tiles / f"t{i}.png")
    return target, tiles


def _render(
    target: Path, tiles: Path, *outputs: Path, cache: Path, tile: int = 16, across: int = 250, limit: int = LIMIT
) -> subprocess.CompletedProcess[str]:
    args = ["render", str(target), "-l", str(tiles), "-t", str(tile), "--tiles-across", str(across)]
    for output in outputs:
        args += ["-o", str(output)]
    return subprocess.run(
        [sys.executable, "-c", "from photomosaics.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PHOTOMOSAICS_CACHE_DIR": str(cache)},
        preexec_fn=_limit(limit),
    )


@pytest.mark.parametrize(("name", "limit"), [("mosaic.jpg", LIMIT), ("mosaic.png", LIMIT), ("mosaic.dzi", TILE_LIMIT)])
def test_a_write_that_fails_is_one_line_and_leaves_nothing_behind(
    photos: tuple[Path, Path], tmp_path: Path, name: str, limit: int
) -> None:
    target, tiles = photos
    out = tmp_path / "out"
    out.mkdir()
    result = _render(target, tiles, out / name, cache=tmp_path / "cache", limit=limit)
    assert result.returncode == 1, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last == f"Error: cannot write {out / name}: File too large", result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in out.iterdir()) == [], "no cut-short mosaic, no partial file or pyramid folder"


def test_a_failed_write_keeps_the_mosaic_written_before(photos: tuple[Path, Path], tmp_path: Path) -> None:
    target, tiles = photos
    before = tmp_path / "mosaic.jpg"
    Image.new("RGB", (64, 48), (10, 200, 30)).save(before)
    kept = before.read_bytes()
    result = _render(target, tiles, before, cache=tmp_path / "cache")
    assert result.returncode == 1 and "cannot write" in result.stderr, result.stderr[-2000:]
    assert before.read_bytes() == kept
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_under_the_limit_every_output_is_written_whole(photos: tuple[Path, Path], tmp_path: Path) -> None:
    target, tiles = photos
    small = target.with_name("small.png")
    Image.open(target).resize((80, 60)).save(small)
    outputs = [tmp_path / "small.jpg", tmp_path / "small.dzi"]
    result = _render(small, tiles, *outputs, cache=tmp_path / "cache", tile=4, across=40)
    assert result.returncode == 0, result.stderr[-2000:]
    with Image.open(outputs[0]) as written:
        assert written.size == (160, 120)
    assert (tmp_path / "small_files").is_dir() and outputs[1].read_text().startswith("<?xml")
    assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []
