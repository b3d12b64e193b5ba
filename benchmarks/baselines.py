"""What the engine is measured against: a typical per-cell Python/PIL mosaic, and metapixel.

``per_cell_mosaic`` is the straightforward open-source implementation: for each cell, crop
the target, take its mean RGB (``ImageStat``), scan every tile for the nearest mean, paste.
``metapixel`` runs the Debian package's C program with anti-repetition off (``-d 0``), its
library prepared by ``metapixel-prepare`` from the same tiles (its other settings, its default
distance and ``--cheat``, are anchors of the fidelity benchmark).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageStat


def prepare_per_cell_tiles(atlas: np.ndarray, tile_size: int) -> tuple[list[Image.Image], list[list[float]]]:
    tiles = [Image.fromarray(t).resize((tile_size, tile_size), Image.Resampling.LANCZOS) for t in atlas]
    return tiles, [ImageStat.Stat(t).mean for t in tiles]


def per_cell_mosaic(data: bytes, tiles: list[Image.Image], means: list[list[float]], tile_size: int) -> bytes:
    """Decode, match cell by cell by mean RGB with a linear scan, paste, encode JPEG."""
    target = Image.open(io.BytesIO(data)).convert("RGB")
    s = tile_size
    cols, rows = target.width // s, target.height // s
    out = Image.new("RGB", (cols * s, rows * s))
    indices = range(len(means))
    for r in range(rows):
        for c in range(cols):
            box = (c * s, r * s, c * s + s, r * s + s)
            mr, mg, mb = ImageStat.Stat(target.crop(box)).mean
            best = min(
                indices,
                key=lambda i: (means[i][0] - mr) ** 2 + (means[i][1] - mg) ** 2 + (means[i][2] - mb) ** 2,
            )
            out.paste(tiles[best], box[:2])
    buffer = io.BytesIO()
    out.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def metapixel_available() -> bool:
    return shutil.which("metapixel") is not None and shutil.which("metapixel-prepare") is not None


def prepare_metapixel_library(tile_dir: Path, library_dir: Path, tile_size: int) -> None:
    library_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["metapixel-prepare", f"--width={tile_size}", f"--height={tile_size}", str(tile_dir), str(library_dir)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def run_metapixel(
    target: Path, output: Path, library_dir: Path, tile_size: int, options: tuple[str, ...] = ("-d", "0")
) -> tuple[float, float]:
    """Run metapixel once: ``(wall seconds, peak RSS MiB)`` of that process alone.

    ``options``: metapixel's own (default ``-d 0``: tiles may repeat next to each other;
    ``()`` its default distance, 5; ``--cheat=N`` overlays N % of the target)."""
    command = [
        "metapixel",
        "--metapixel",
        "-w",
        str(tile_size),
        "-h",
        str(tile_size),
        "-l",
        str(library_dir),
        *options,
        str(target),
        str(output),
    ]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"metapixel failed ({process.returncode}): {process.stderr.read().decode()[-500:]}")
    return seconds, usage.ru_maxrss / 1024
