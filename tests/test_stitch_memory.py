"""The controller's stitch streams: its peak memory does not grow with the mosaic.

The 400 MP job through the whole pipeline, with every role's peak RSS under the 1.5 GB
goal, is ``tests/test_giant_job.py`` (minutes; ``make bench`` prints its time). Here the part that would hold the whole image if anything did, the stitch
(``workers.imaging.stitching``: slices on disk to the JPEG and the Deep Zoom zip), runs in a fresh
process at 10 MP and at 40 MP of slices of the same width; the peak RSS of the larger must exceed the smaller's
by far less than the 90 MB of pixels it adds (holding them, or memory-mapping the slices, or
libjpeg's optimised Huffman pass, each added more than that when this was written).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

STITCH = """
import resource, sys
from pathlib import Path
from workers.imaging.stitching import join_slices, open_slice, save_jpeg, save_pyramid
paths, width, height = [Path(p) for p in sys.argv[3:]], int(sys.argv[1]), int(sys.argv[2])
for save, name in ((save_jpeg, "mosaic.jpg"), (save_pyramid, "mosaic.zip")):
    mosaic = join_slices([open_slice(p) for p in paths], width=width, height=height)
    save(mosaic, paths[0].parent / name)
    mosaic.close()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def slices_on_disk(folder: Path, *, width: int, height: int, count: int) -> list[Path]:
    """``count`` rendered-slice files of a ``width`` x ``height`` mosaic, written without holding one."""
    folder.mkdir()
    rows = np.random.default_rng(3).integers(0, 256, size=(64, width, 3), dtype=np.uint8)
    paths = []
    for k in range(count):
        path = folder / f"slice-{k}.npy"
        pixels = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(height // count, width, 3))
        for start in range(0, pixels.shape[0], 64):
            stop = min(start + 64, pixels.shape[0])
            pixels[start:stop] = rows[: stop - start]
        pixels.flush()
        del pixels
        paths.append(path)
    return paths


def peak_rss_of_stitch(paths: list[Path], width: int, height: int) -> int:
    result = subprocess.run(
        [sys.executable, "-c", STITCH, str(width), str(height), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


def test_the_stitch_does_not_hold_the_mosaic(tmp_path: Path) -> None:
    # The same width (libvips' strip buffers grow with the width: that is streaming), 4x the rows.
    # The least of three runs each: libvips' worker threads make one run's peak wander by ±15 MB
    # (measured, the same files eight times), as much as the margin; holding the pixels adds 90.
    small_slices = slices_on_disk(tmp_path / "small", width=7744, height=1296, count=4)
    large_slices = slices_on_disk(tmp_path / "large", width=7744, height=5184, count=4)
    small = min(peak_rss_of_stitch(small_slices, 7744, 1296) for _ in range(3))
    large = min(peak_rss_of_stitch(large_slices, 7744, 5184) for _ in range(3))
    added_pixels = 7744 * (5184 - 1296) * 3  # 90 MB
    assert large - small < added_pixels / 4, (
        f"peak RSS {small / 2**20:.0f} MB at 10 MP, {large / 2**20:.0f} MB at 40 MP"
    )
    assert (tmp_path / "large" / "mosaic.zip").stat().st_size > 0
