"""Cells of several sizes against one size and metapixel ``-d 0``: both promises, render CPU, a picture.

``python -m benchmarks.cells [--photo NAME ...] [--sizes 1,2,4] [--split N] [--tiles 8,16]
[--library-dir DIR] [--fit none,4] [--no-cpu]``: every photo at 1 MP (unseen demo library unless
``--library-dir``), one size (the defaults) beside ``--sizes`` (default 1,2,4) and metapixel
``-d 0``; the sizes once per ``--fit`` limit (``sized.FIT_DELTA_E``: a large cell whose photo
seen from afar lies farther from its block splits; ``none``: the plan from the target alone,
as before split by fit; default ``FITS``, both side by side). From afar the
figures are read at the smallest cell's grid (one pixel per base cell, as ``fidelity.far``);
up close each cell is compared with its photo at the cell's own size (``fidelity.per_cell``),
and the window share counts each cell once, at its top-left base cell, among the 64 base cells
of a window (a 4× cell holds 16 of them: counted by area one large photo alone would be 25 %).
``make bench`` (``main``): the calm families the engine doc names, the CPU of the 12 MP tile 8
render against one size, and ``docs/images/cells-*.jpg`` (target | one size | each --fit | metapixel).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

CALM = (
    "horse",
    "synthetic:flat_noise",
    "synthetic:graphic",
    "logo",
    "colorwheel",
    "synthetic:gradient",
    "sklearn:china",
    "clock",
    "chelsea",
)
SIZES = (1, 2, 4)
IMAGES = Path("docs/images")
PICTURE = ("horse", 8)  # the photo and tile size of the side-by-side picture
PANEL = 384  # pixels across each panel of the picture
FITS = (None, 4.0)  # the plan from the target alone (before), split by fit at ``sized.FIT_DELTA_E``


def sized_scores(
    pixels: np.ndarray, job: Any, library: Any, options: Any, choice: np.ndarray, image: Image.Image
) -> dict[str, Any]:
    """``fidelity.job_scores`` for a mosaic of several cell sizes (``options.cell_sizes``);
    ``image``: the target as the render read it (its cells plan the sizes)."""
    from benchmarks.fidelity import far, per_cell, summarise, window_share
    from mosaic import cell_image, plan_grid
    from mosaic.cells import origins, plan_cells, plan_of
    from mosaic.library_features import candidate_tiles

    tile = job.tile
    width, height = job.target.size
    grid = plan_grid(width, height, tile_size=tile, tiles_across=width // tile)
    plan = plan_of(plan_cells(cell_image(image, grid), options.cell_sizes, options.split), choice, options.cell_sizes)
    scores: dict[str, Any] = far(pixels, job.target, tile)
    parts = []
    count = len(library)
    labels = -1 - np.arange(choice.size, dtype=np.int64).reshape(choice.shape)  # covered: no repeat
    for size in options.cell_sizes:
        rows, cols = np.nonzero(origins(plan, size))
        if not rows.size:
            continue
        big = size * tile
        chosen = choice[rows * size, cols * size]
        labels[rows * size, cols * size] = chosen % count
        view = pixels[: plan.shape[0] // size * big, : plan.shape[1] // size * big]
        view = view.reshape(plan.shape[0] // size, big, plan.shape[1] // size, big, 3)
        parts.append(per_cell(view[rows, :, cols], candidate_tiles(library, big, options)[chosen]))
    scores.update(summarise(*(np.concatenate(p) for p in zip(*parts))))
    scores.pop("r")
    scores["window_share"] = window_share(labels)
    scores["distinct"] = int(np.unique(choice % count).size)
    scores["large"] = float((plan > 1).mean())
    return scores


def ours_sized(job: Any, library: Any, fit: float | None = None, **changes: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """``fidelity.Job.ours`` with cells of several sizes; ``fit``: ``sized.FIT_DELTA_E`` for this
    render (None: the plan from the target alone)."""
    from mosaic import SUB, open_image, plan_grid, sized
    from mosaic.options import DEFAULT_OPTIONS
    from mosaic.render import render_with_placement

    options = dataclasses.replace(DEFAULT_OPTIONS, **changes)
    width, height = job.target.size
    grid = plan_grid(width, height, tile_size=job.tile, tiles_across=width // job.tile)
    image = open_image(job.path.read_bytes(), min_size=(grid.tiles_across * SUB, grid.tiles_down * SUB))
    kept, sized.FIT_DELTA_E = sized.FIT_DELTA_E, fit
    try:
        pixels, choice = render_with_placement(
            image, library, tile_size=job.tile, grid=grid, seed="bench", options=options
        )
    finally:
        sized.FIT_DELTA_E = kept
    return pixels, sized_scores(pixels, job, library, options, choice, image)


COLUMNS = ("delta_e", "ssim", "recognisable", "contrast", "colour_moved", "window_share")
HEAD = ("job", "mosaic", "far ΔE00", "far SSIM", "recognisable", "contrast", "colour moved", "window", "large")


def _row(job: str, name: str, scores: dict[str, Any]) -> list[str]:
    from benchmarks.fidelity import _fmt

    large = f"{100 * scores['large']:.0f} %" if "large" in scores else ""
    return [job, name, *(_fmt(scores[k], k) for k in COLUMNS), large]


def compare(
    photos: tuple[str, ...],
    tiles: tuple[int, ...],
    sizes: tuple[int, ...],
    split: int,
    library_dir: Any = None,
    fits: tuple[float | None, ...] = (None,),
) -> dict[str, Any]:
    """Every photo × tile size: one size, several (once per ``fits``: the split-by-fit limit,
    None for the plan from the target alone), metapixel ``-d 0``; the table and the tallies."""
    import tempfile

    from benchmarks.baselines import prepare_metapixel_library
    from benchmarks.fidelity import GOALS, Job, _demo_library, _own_library
    from benchmarks.photos import slug

    work = Path(tempfile.mkdtemp(prefix="bench-cells-"))
    rows: list[list[str]] = []
    tally = {
        name: {"far ΔE00": 0, "far SSIM": 0, "both far": 0, "up close": 0, "every goal": 0}
        for name in ("one", *(_variant(sizes, fit) for fit in fits))
    }
    pictures: dict[tuple[str, int], list[np.ndarray]] = {}
    own = _own_library(library_dir, work / "tiles-own") if library_dir is not None else None
    for photo in photos:
        library, tile_dir, _ = own or _demo_library(photo, True, None, work / f"tiles-{slug(photo)}")
        for tile in tiles:
            job = Job(photo, "1 MP", (1152, 864), tile, work)
            prepared = work / f"metapixel-{tile_dir.name}-{tile}"
            if not prepared.exists():
                prepare_metapixel_library(tile_dir, prepared, tile)
            one_px, one = job.ours(library)
            several = {
                _variant(sizes, fit): ours_sized(job, library, fit, cell_sizes=sizes, split=split) for fit in fits
            }
            anchor_px, anchor = job.metapixel(library, prepared, ("-d", "0"))
            for name, scores in (("one", one), *((name, s) for name, (_, s) in several.items())):
                far_de, far_ssim = scores["delta_e"] < anchor["delta_e"], scores["ssim"] > anchor["ssim"]
                close = all(
                    scores[k] >= bound if sense == ">=" else scores[k] <= bound
                    for k, (sense, bound, _) in GOALS.items()
                )
                for key, ok in (("far ΔE00", far_de), ("far SSIM", far_ssim), ("both far", far_de and far_ssim)):
                    tally[name][key] += ok
                tally[name]["up close"] += close
                tally[name]["every goal"] += close and far_de and far_ssim
            label = f"{photo} t{tile}"
            rows += [_row(label, "one size", one), *(_row(label, name, s) for name, (_, s) in several.items())]
            rows.append(_row(label, "metapixel -d 0", anchor))
            pictures[(photo, tile)] = [np.asarray(job.target), one_px, *(px for px, _ in several.values()), anchor_px]
            print(f"  measured {label}", flush=True)
    return {"rows": rows, "tally": tally, "jobs": len(photos) * len(tiles), "pictures": pictures}


def _variant(sizes: tuple[int, ...], fit: float | None) -> str:
    name = f"cells {','.join(map(str, sizes))}"
    return f"{name} target plan" if fit is None else f"{name} fit {fit:g}"


def render_cpu(sizes: tuple[int, ...], split: int, runs: int = 3) -> tuple[float, float]:
    """CPU seconds of the 12 MP, tile 8 render (chelsea, demo library), one size and ``sizes``:
    best of ``runs`` each, interleaved, single-threaded BLAS."""
    from threadpoolctl import threadpool_limits

    from benchmarks.engine import _library_tiles
    from benchmarks.photos import target_jpeg
    from mosaic import SUB, RenderOptions, build_library, open_image, plan_grid, render

    library, _ = build_library(_library_tiles()[0])
    data = target_jpeg("chelsea", (3968, 2976))
    grid = plan_grid(3968, 2976, tile_size=8, tiles_across=3968 // 8)
    image = open_image(data, min_size=(grid.tiles_across * SUB, grid.tiles_down * SUB))
    variants = (RenderOptions(), RenderOptions(cell_sizes=sizes, split=split))
    best = [float("inf"), float("inf")]
    with threadpool_limits(1):
        for options in variants:  # warm the library's caches at every size first
            render(image, library, tile_size=8, grid=grid, seed="bench", options=options)
        for _ in range(runs):
            for i, options in enumerate(variants):
                start = time.process_time()
                render(image, library, tile_size=8, grid=grid, seed="bench", options=options)
                best[i] = min(best[i], time.process_time() - start)
    return best[0], best[1]


def save_picture(panels: list[np.ndarray], name: str) -> Path:
    """target | one size | several sizes | metapixel ``-d 0``, whole (``PANEL`` px across) over a
    1:1 crop of each from the same place (the top-left of the photo's calmest quarter)."""
    height = round(panels[1].shape[0] * PANEL / panels[1].shape[1])
    whole = [np.asarray(Image.fromarray(p).resize((PANEL, height), Image.Resampling.LANCZOS)) for p in panels]
    size = panels[1].shape[:2]
    full = [p if p.shape[:2] == size else np.asarray(Image.fromarray(p).resize(size[::-1])) for p in panels]
    top, left = size[0] // 8, size[1] // 8
    crops = [p[top : top + PANEL, left : left + PANEL] for p in full]
    rows = [_beside(whole), np.full((6, len(panels) * (PANEL + 6) - 6, 3), 255, np.uint8), _beside(crops)]
    IMAGES.mkdir(parents=True, exist_ok=True)
    path = IMAGES / f"cells-{name}.jpg"
    Image.fromarray(np.concatenate(rows, axis=0)).save(path, quality=88, optimize=True)
    return path


def _beside(images: list[np.ndarray]) -> np.ndarray:
    """Images of one height side by side, 6 white pixels apart."""
    gap = np.full((images[0].shape[0], 6, 3), 255, np.uint8)
    out = [images[0]]
    for image in images[1:]:
        out += [gap, image]
    return np.concatenate(out, axis=1)


def report(result: dict[str, Any], sizes: tuple[int, ...]) -> None:
    widths = [max(len(str(r[i])) for r in [list(HEAD), *result["rows"]]) for i in range(len(HEAD))]
    for row in [list(HEAD), *result["rows"]]:
        print("  " + "  ".join(str(v).ljust(w) for v, w in zip(row, widths)))
    print(f"\n  jobs beating metapixel -d 0, of {result['jobs']} (goal: every one)")
    for name, counts in result["tally"].items():
        label = "one size" if name == "one" else name
        print(f"  {label:22}" + "  ".join(f"{k}: {v}" for k, v in counts.items()))


def main(
    photos: tuple[str, ...] = CALM,
    tiles: tuple[int, ...] = (8, 16),
    sizes: tuple[int, ...] = SIZES,
    split: int = 50,
    library_dir: Any = None,
    cpu: bool = True,
    fits: tuple[float | None, ...] = FITS,
) -> int:
    from benchmarks.baselines import metapixel_available

    if not metapixel_available():
        print("metapixel is not installed (apt install metapixel): nothing to compare with")
        return 1
    result = compare(photos, tiles, sizes, split, library_dir, fits)
    report(result, sizes)
    if PICTURE in result["pictures"]:
        print(f"\n  picture: {save_picture(result['pictures'][PICTURE], f'{PICTURE[0]}-t{PICTURE[1]}')}")
    if cpu:
        one, several = render_cpu(sizes, split)
        print(
            f"\n  12 MP, tile 8 render CPU: one size {one:.2f} s, cells {sizes} {several:.2f} s: {several / one:.2f}x (goal <= 1.3x)"
        )
    return 0


if __name__ == "__main__":
    import sys

    from benchmarks.fidelity import _take
    from mosaic.cells import parse_cell_sizes

    args = sys.argv[1:]
    chosen: list[str] = []
    while (name := _take(args, "--photo")) is not None:
        chosen.append(name)
    given_sizes, given_split, given_tiles = _take(args, "--sizes"), _take(args, "--split"), _take(args, "--tiles")
    own, no_cpu, given_fits = _take(args, "--library-dir"), "--no-cpu" in args, _take(args, "--fit")
    args = [a for a in args if a != "--no-cpu"]
    if args:
        raise SystemExit(f"{' '.join(args)}: not understood\n{__doc__}")
    raise SystemExit(
        main(
            tuple(chosen) or CALM,
            tuple(int(t) for t in given_tiles.split(",")) if given_tiles else (8, 16),
            parse_cell_sizes(given_sizes) if given_sizes else SIZES,
            int(given_split) if given_split else 50,
            own,
            not no_cpu,
            tuple(None if f == "none" else float(f) for f in given_fits.split(",")) if given_fits else FITS,
        )
    )
