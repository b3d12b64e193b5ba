"""One mosaic, any slicing: the bytes of every benchmark job for several slicings, and what it costs.

For every job of the quality benchmark (chelsea at 1, 4 and 12 MP, tiles 8, 16 and 32) and of
the sweep (every photo of ``photos.SWEEP`` at 1 MP, tiles 8, 16 and 32), with the demo
library and the defaults: the offline render in one band, in 3 and in 8 (``render(slices=)``)
and, as the processors render them, each band of the 3- and 8-slice jobs alone, in reverse
order (plain bands, or a giant job's pieces: ``mosaic.pieces``). Printed beside the goal:
how many jobs give the same JPEG bytes and the same placement for every slicing (goal: all).
The 400 MP job's pipeline JPEG against the offline render is ``benchmarks.giant``.

Also: the 12 MP, tile 8 render's CPU time in its parts (``mosaic.parts``) against the same
grid chosen and painted as one part, measured alternately in one process (goal: the parts
cost at most 5 %).
``python -m benchmarks.slicing quick`` measures the quality jobs only.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

GOAL_PARTS_COST = 1.05
SLICINGS = (3, 8)


def _jobs(quick: bool) -> list[tuple[str, str, tuple[int, int], int]]:
    from benchmarks.engine import TARGET_PHOTO, TARGETS, TILE_SIZES
    from benchmarks.photos import SWEEP

    jobs = [(TARGET_PHOTO, label, size, tile) for label, size in TARGETS for tile in TILE_SIZES]
    if not quick:
        one = dict(TARGETS)["1 MP"]
        jobs += [(photo, "1 MP", one, tile) for photo in SWEEP if photo != TARGET_PHOTO for tile in TILE_SIZES]
    return jobs


def _bands_alone(image: Any, library: Any, grid: Any, slices: int, seed: str) -> np.ndarray:
    """The mosaic as the processors make it: each band of the job's plan rendered on its own."""
    from mosaic import band_cells, cell_image, render_band
    from mosaic.parts import plan_parts
    from mosaic.pieces import job_plan

    cells, parts = cell_image(image, grid), plan_parts(grid)
    plan = job_plan(grid, slices)
    bands = parts.bands(slices) if plan is None else [p.cells for p in plan.pieces()]
    out = np.empty((grid.output_height, grid.output_width, 3), np.uint8)
    for band in reversed(bands):
        pixels = render_band(
            band_cells(cells, band, tile_size=grid.tile_size).copy(),
            library,
            tile_size=grid.tile_size,
            seed=seed,
            row_offset=band.start,
            parts=parts,
        )
        out[band.start * grid.tile_size : band.stop * grid.tile_size] = pixels
    return out


def identity(quick: bool) -> tuple[int, int]:
    from benchmarks.photos import target_jpeg
    from mosaic import SUB, open_image, plan_grid
    from mosaic.parts import plan_parts
    from mosaic.render import render_with_placement
    from photomosaics.render_library import load_library
    from workers.imaging.slicing import encode_output

    library = load_library("demo", echo=False)
    same = total = 0
    for photo, label, size, tile in _jobs(quick):
        data = target_jpeg(photo, size)
        grid = plan_grid(size[0], size[1], tile_size=tile, tiles_across=size[0] // tile)
        image = open_image(data, min_size=(grid.tiles_across * SUB, grid.tiles_down * SUB))
        pixels, choice = render_with_placement(image, library, tile_size=tile, grid=grid, seed="bench")
        jpeg = encode_output(pixels)
        ok = True
        for slices in SLICINGS:
            again, placed = render_with_placement(
                image, library, tile_size=tile, grid=grid, seed="bench", slices=slices
            )
            ok &= encode_output(again) == jpeg and np.array_equal(placed, choice)
            ok &= encode_output(_bands_alone(image, library, grid, slices, "bench")) == jpeg
        same, total = same + ok, total + 1
        parts = plan_parts(grid)
        print(
            f"  {photo} {label} t{tile}: {grid.tiles_across}x{grid.tiles_down} cells, {parts.count} part(s): "
            f"{'the same bytes' if ok else 'DIFFERENT'}",
            flush=True,
        )
    return same, total


def parts_cost() -> tuple[float, float]:
    """CPU seconds of the 12 MP, tile 8 render in its parts and as one part (best of five,
    alternated, on one BLAS thread as a processor renders: wall time on a shared machine
    measures the neighbours)."""
    from threadpoolctl import threadpool_limits

    from benchmarks.engine import TARGET_PHOTO, TARGETS
    from benchmarks.photos import target_jpeg
    from mosaic import SUB, cell_image, open_image, plan_grid, render_band
    from mosaic.parts import Parts, plan_parts
    from photomosaics.render_library import load_library

    size = dict(TARGETS)["12 MP"]
    grid = plan_grid(size[0], size[1], tile_size=8, tiles_across=size[0] // 8)
    image = open_image(target_jpeg(TARGET_PHOTO, size), min_size=(grid.tiles_across * SUB, grid.tiles_down * SUB))
    library = load_library("demo", echo=False)
    cells = cell_image(image, grid)
    ways = {"parts": plan_parts(grid), "one part": Parts((0, grid.tiles_down))}
    render_band(cells, library, tile_size=8, seed="warm", parts=ways["parts"])  # caches filled, as in a worker
    best = {name: float("inf") for name in ways}
    with threadpool_limits(1):
        for _ in range(5):
            for name, parts in ways.items():
                started = time.process_time()
                render_band(cells, library, tile_size=8, seed="bench", parts=parts)
                best[name] = min(best[name], time.process_time() - started)
    print(f"  12 MP, tile 8: {ways['parts'].count} parts, cuts {ways['parts'].cuts}")
    return best["parts"], best["one part"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    quick = "quick" in args
    print("Every slicing of every job, offline and band by band as the processors render it:", flush=True)
    same, total = identity(quick)
    print(f"  the same JPEG bytes and placement for 1, 3 and 8 slices: {same} of {total} jobs (goal: all)")
    parts, whole = parts_cost()
    ratio = parts / whole
    print(
        f"  render in parts {parts:.2f} s CPU, as one part {whole:.2f} s: {ratio:.2f}x "
        f"(goal <= {GOAL_PARTS_COST}x: {'ok' if ratio <= GOAL_PARTS_COST else 'MISSED'})"
    )
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main())
