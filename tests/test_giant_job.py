"""A 400 MP job through the whole pipeline: it completes, its pyramid is right, and no role's
peak memory reaches 1.5 GB. Memory is asserted, time never (``make bench`` prints it).

Its own Azurite, on disk in a temporary folder removed afterwards: the job writes about 2 GB
of blobs (bands, 1.2 GB of rendered slices, the JPEG, the pyramid zip), which would stay in
the suite's shared Azurite for the rest of the session. The roles are real processes (one
controller, one responder, two processors, the web app under gunicorn); the web role takes
the job in and then serves the job page, previews, tiles of every level, the full-resolution
download and the pyramid zip before its peak RSS is read (``tests/support/giant_job.py``).

The pixels are checked against the engine's own render of the same rows (the first band:
``mosaic.render.render_band`` over its whole parts with the job's seed, as ``photomosaics render`` does), read
back through the web from the pyramid's full-resolution level.
"""

from __future__ import annotations

import io
import math
import re
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mosaic.deepzoom import DZI_TILE_SIZE
from mosaic.grid import cell_image, plan_grid
from mosaic.pieces import job_plan
from mosaic.render import render_band
from photomosaics.local.azurite import Azurite, AzuriteError, find_azurite_script
from tests.support.giant_job import LIBRARY_SIZE, ROLES, TILE, cpu_seconds, peak_rss_bytes, run_giant_job
from tests.support.pipelines import sample_photo, synthetic_library
from tests.support.prereqs import require

LIMIT = 1.5e9
MEGAPIXELS = 400


def _dzi_counts(width: int, height: int) -> dict[int, int]:
    """Tiles per level of a DZI pyramid (``DZI_TILE_SIZE`` px tiles, levels down to 1 px)."""
    top = math.ceil(math.log2(max(width, height)))
    counts = {}
    for level in range(top + 1):
        w, h = math.ceil(width / 2 ** (top - level)), math.ceil(height / 2 ** (top - level))
        counts[level] = math.ceil(w / DZI_TILE_SIZE) * math.ceil(h / DZI_TILE_SIZE)
    return counts


def _jpeg_size(head: bytes) -> tuple[int, int]:
    """Width and height from a JPEG's start-of-frame marker (Pillow refuses to open 400 MP)."""
    assert head[:2] == b"\xff\xd8", "not a JPEG"
    at = 2
    while at + 9 < len(head):
        marker, length = head[at + 1], int.from_bytes(head[at + 2 : at + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            return int.from_bytes(head[at + 7 : at + 9], "big"), int.from_bytes(head[at + 5 : at + 7], "big")
        at += 2 + length
    raise AssertionError("no start-of-frame marker in the JPEG's first bytes")


def _engine_first_band(request_id: str, megapixels: float, slices: int) -> np.ndarray:
    """The engine's render of the job's first band, as ``photomosaics render`` cuts it (its pieces plan)."""
    photo = Image.open(io.BytesIO(sample_photo(300, 200, seed=13))).convert("RGB")
    across = int(math.sqrt(megapixels * 1e6 * 1.5)) // TILE
    grid = plan_grid(photo.width, photo.height, tile_size=TILE, tiles_across=across, max_output_pixels=400_000_000)
    cells = cell_image(photo, grid)
    plan = job_plan(grid, slices)
    assert plan is not None, "a giant job is planned in pieces"
    first, sub = plan.piece(0).cells, cells.shape[0] // grid.tiles_down
    return render_band(
        cells[first.start * sub : first.stop * sub],
        synthetic_library(LIBRARY_SIZE),
        tile_size=TILE,
        seed=request_id,
        row_offset=first.start,
        parts=plan.parts,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_400_mp_job_completes_with_every_roles_peak_memory_under_the_limit() -> None:
    try:
        find_azurite_script()
    except AzuriteError as exc:
        require(False, str(exc))
    check_giant_job(MEGAPIXELS)


def check_giant_job(megapixels: float, *, slices: int = 1) -> None:
    with tempfile.TemporaryDirectory(prefix="giant-job-") as folder:
        tmp = Path(folder)
        with Azurite(location=tmp / "azurite") as azurite:
            result = run_giant_job(
                azurite.connection_string, tmp, megapixels=megapixels, processors=2, slices=slices, timeout=600
            )
            served, peaks = result["served"], result["peak_rss"]
            print(
                f"\n{megapixels:.0f} MP job: {result['output']}, {result['slices']} slices, {result['seconds']:.0f} s to done, "
                f"{result['serve_seconds']:.0f} s of serving; peak RSS "
                + ", ".join(f"{r} {peaks[r] / 2**20:.0f} MB" for r in ROLES)
                + f" (Azurite {peak_rss_bytes(azurite.pid) / 2**20:.0f} MB)"  # type: ignore[arg-type]
                + "; CPU seconds "
                + ", ".join(f"{r} {c:.0f}" for r, c in result["cpu_seconds"].items())
                + f", Azurite {cpu_seconds(azurite.pid):.0f}"  # type: ignore[arg-type]
                + f"\nstitch stages (s): {result['stitch_stages']}\nslice stages (s): {result['slice_stages']}"
            )

            # A real 400 MP job, cut into slices of at most 50 MP.
            width, height = result["output"]
            assert 0.97 * megapixels * 1e6 <= width * height <= megapixels * 1e6
            assert result["slices"] >= math.ceil(width * height / 50e6)

            # Every role, the web included, stayed under the limit.
            assert set(peaks) == set(ROLES)
            over = {r: f"{p / 2**20:.0f} MB" for r, p in peaks.items() if p >= LIMIT}
            assert not over, f"peak RSS over 1.5 GB: {over}"

            # The descriptor, the zip downloaded through the web: every level, every tile, stored.
            assert f'Width="{width}"' in served["dzi"] and f'Height="{height}"' in served["dzi"]
            assert re.search(rf'TileSize="{DZI_TILE_SIZE}"', served["dzi"]) and re.search(r'Overlap="1"', served["dzi"])
            with zipfile.ZipFile(served["pyramid_zip"]) as archive:
                infos = archive.infolist()
                assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
                levels: dict[int, int] = {}
                for info in infos:
                    if info.filename.endswith(".jpg"):
                        level = int(info.filename.split("/")[1])
                        levels[level] = levels.get(level, 0) + 1
            assert levels == _dzi_counts(width, height)
            assert served["pyramid_bytes"] == served["pyramid_zip"].stat().st_size

            # The full-resolution JPEG (it fits JPEG's 65,500 px a side) streamed whole.
            assert _jpeg_size(served["result_head"]) == (width, height)
            # Whole: every byte the server declared arrived, and the last is the JPEG's end marker.
            # (Not a bytes-per-pixel floor: how well a mosaic compresses is the engine's business.)
            assert served["result_bytes"] == served["result_declared"] > 0
            assert served["result_tail"] == b"\xff\xd9", served["result_tail"]
            for size, preview in served["previews"].items():
                with Image.open(io.BytesIO(preview)) as thumb:
                    assert max(thumb.size) == (480 if size == "default" else size)
                    assert abs(thumb.width / thumb.height - width / height) < 0.01

            # The pixels: the first band as the engine renders it, against full-resolution tiles.
            band = _engine_first_band(result["request_id"], megapixels, slices)
            top = max(level for level in levels)
            checked = 0
            for (level, column, row), data in served["tiles"].items():
                y0, x0 = max(0, row * DZI_TILE_SIZE - 1), max(0, column * DZI_TILE_SIZE - 1)
                if level != top or y0 + DZI_TILE_SIZE + 2 > band.shape[0]:
                    continue
                tile = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)
                expected = band[y0 : y0 + tile.shape[0], x0 : x0 + tile.shape[1]]
                assert np.abs(tile - expected).mean() < 4, (column, row)  # JPEG Q90: close, not equal
                checked += 1
            assert checked >= 3, sorted(served["tiles"])
