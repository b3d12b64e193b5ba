"""Both promises of a photomosaic, measured per job: from afar the photo, up close every tile a photo.

- **Far** (viewing distance, one pixel per cell): the mean CIEDE2000 between the mosaic
  and the target averaged over each cell, the SSIM of their luma at that grid, and the
  correlation of their edge strength (Sobel magnitude of the luma) at that grid.
- **Up close** (integrity), from the placement: each cell is compared with the tile placed
  there as it came from the library at the placed size, mirror included: the correlation of
  their luma (a cell is *recognisable* at r >= ``RECOGNISABLE``), the ratio of their luma
  standard deviations (contrast kept) and the ΔE00 between their mean colours (colour
  moved). For the engine the placement is its own (``render_with_placement``); for another
  program each cell is compared with the library photo it most resembles (``identify``).
- **Repetition**: the largest share of one tile in any 8×8-cell window, and how many
  different tiles the mosaic uses.

``GOALS`` are what the defaults must meet on every job; ``goal_checks`` says which a job meets.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

RECOGNISABLE = 0.8  # luma correlation with the placed photo at which a cell still shows it
FLAT = 1.0  # luma std (0..255) under which a tile is flat: its correlation is not defined
WINDOW = 8

GOALS = {
    "recognisable": (">=", 0.95, "share of cells recognisable (r >= 0.8)"),
    "contrast": (">=", 0.9, "median contrast kept (std ratio)"),
    "colour_moved": ("<=", 5.0, "median colour moved (ΔE00)"),
    "window_share": ("<=", 0.10, "max share of one tile in an 8x8 window"),
}


def _luma(rgb: np.ndarray) -> np.ndarray:
    return rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


def _cells(image: np.ndarray, tile: int) -> np.ndarray:
    """``(rows*tile, cols*tile, ...)`` -> ``(rows*cols, tile, tile, ...)``."""
    rows, cols = image.shape[0] // tile, image.shape[1] // tile
    trimmed = image[: rows * tile, : cols * tile]
    rest = image.shape[2:]
    return trimmed.reshape(rows, tile, cols, tile, *rest).swapaxes(1, 2).reshape(rows * cols, tile, tile, *rest)


def reference_for(mosaic: np.ndarray, target: Image.Image) -> np.ndarray:
    """The target resampled to the mosaic's size (some programs round the size up)."""
    reference = target.convert("RGB")
    height, width = mosaic.shape[:2]
    if reference.size != (width, height):
        reference = reference.resize((width, height), Image.Resampling.LANCZOS)
    return np.asarray(reference)


def far(mosaic: np.ndarray, target: Image.Image, tile: int) -> dict[str, float]:
    """From afar: ΔE00, SSIM and edge-strength correlation at one pixel per cell."""
    from skimage.color import deltaE_ciede2000, rgb2lab
    from skimage.filters import sobel
    from skimage.metrics import structural_similarity

    reference = reference_for(mosaic, target)
    rows, cols = mosaic.shape[0] // tile, mosaic.shape[1] // tile
    box = (0, 0, cols * tile, rows * tile)
    ours = np.asarray(Image.fromarray(mosaic).crop(box).reduce(tile), np.float64) / 255.0
    theirs = np.asarray(Image.fromarray(reference).crop(box).reduce(tile), np.float64) / 255.0
    delta_e = float(deltaE_ciede2000(rgb2lab(ours), rgb2lab(theirs)).mean())
    y_ours, y_theirs = _luma(ours * 255.0), _luma(theirs * 255.0)
    window = min(7, rows, cols) | 1
    ssim = float(structural_similarity(y_ours, y_theirs, data_range=255.0, win_size=window))
    edges = float(np.corrcoef(sobel(y_ours).ravel(), sobel(y_theirs).ravel())[0, 1])
    return {"delta_e": delta_e, "ssim": ssim, "edges": edges}


def integrity(mosaic: np.ndarray, placed: np.ndarray) -> dict[str, Any]:
    """Up close: each output cell against its placed tile ``placed`` ``(cells, s, s, 3) uint8``.

    Returns the share recognisable, the median contrast ratio, the median colour moved
    (ΔE00) and the per-cell correlations (``r``).
    """
    return summarise(*per_cell(_cells(mosaic, placed.shape[1]), placed))


def per_cell(cells: np.ndarray, placed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each cell ``(n, s, s, 3)`` against its placed tile: luma correlation, contrast ratio, colour moved."""
    from skimage.color import deltaE_ciede2000, rgb2lab

    a = _luma(cells).reshape(len(cells), -1)
    b = _luma(placed).reshape(len(placed), -1)
    a -= a.mean(axis=1, keepdims=True)
    b -= b.mean(axis=1, keepdims=True)
    sa, sb = np.sqrt((a * a).mean(axis=1)), np.sqrt((b * b).mean(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (a * b).mean(axis=1) / (sa * sb)
        ratio = sa / sb
    flat = sb < FLAT  # a flat photo stays itself when the cell is flat too
    r = np.where(flat, np.where(sa < FLAT, 1.0, 0.0), np.nan_to_num(r))
    ratio = np.where(flat, 1.0, ratio)
    means = np.stack([cells.reshape(len(cells), -1, 3).mean(axis=1), placed.reshape(len(placed), -1, 3).mean(axis=1)])
    moved = deltaE_ciede2000(rgb2lab(means[0][None] / 255.0)[0], rgb2lab(means[1][None] / 255.0)[0])
    return r, ratio, moved


def summarise(r: np.ndarray, ratio: np.ndarray, moved: np.ndarray) -> dict[str, Any]:
    """``per_cell``'s figures as the goals read them."""
    return {
        "recognisable": float((r >= RECOGNISABLE).mean()),
        "contrast": float(np.median(ratio)),
        "colour_moved": float(np.median(moved)),
        "r": r,
    }


def window_share(tiles: np.ndarray, size: int = WINDOW) -> float:
    """The largest share of one tile among the cells of any ``size`` × ``size`` window."""
    if tiles.shape[0] < size or tiles.shape[1] < size:
        size = min(tiles.shape)
    windows = np.lib.stride_tricks.sliding_window_view(tiles, (size, size)).reshape(-1, size * size)
    ordered = np.sort(windows, axis=1)
    run = np.ones(windows.shape[0], np.int64)
    longest = run.copy()
    for j in range(1, size * size):
        run = np.where(ordered[:, j] == ordered[:, j - 1], run + 1, 1)
        np.maximum(longest, run, out=longest)
    return float(longest.max()) / (size * size)


def repetition(tiles: np.ndarray) -> dict[str, float]:
    """``tiles``: ``(rows, cols)`` library index per cell (a mirror image counts as its tile)."""
    return {"window_share": window_share(tiles), "distinct": int(np.unique(tiles).size)}


def candidates_of(atlas: np.ndarray) -> np.ndarray:
    """A library's tiles at one size and their mirror images: candidate ``i + n`` mirrors ``i``."""
    return np.concatenate([atlas, atlas[:, :, ::-1]])


def identify(mosaic: np.ndarray, candidates: np.ndarray, *, shortlist: int = 8) -> np.ndarray:
    """For another program's output: the candidate each cell most resembles, ``(cells,) int``.

    A shortlist by a 4×4 colour layout, then the highest luma correlation at full size among it.
    """
    from mosaic.matching import best

    tile = candidates.shape[1]
    cells = _cells(mosaic, tile)

    def signature(images: np.ndarray) -> np.ndarray:
        n = images.shape[0]
        sheet = Image.fromarray(np.ascontiguousarray(images.reshape(n * tile, tile, 3)))
        return np.asarray(sheet.resize((4, n * 4), Image.Resampling.BOX)).reshape(n, 48).astype(np.float32)

    short, _ = best(signature(cells), signature(candidates), shortlist)
    a = _luma(cells).reshape(len(cells), 1, -1)
    b = _luma(candidates).reshape(len(candidates), -1)[short]
    a = a - a.mean(axis=2, keepdims=True)
    b = b - b.mean(axis=2, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.nan_to_num((a * b).sum(axis=2) / np.sqrt((a * a).sum(axis=2) * (b * b).sum(axis=2)))
    return short[np.arange(len(cells)), np.argmax(r, axis=1)]


def job_scores(
    mosaic: np.ndarray, target: Image.Image, candidates: np.ndarray, choice: np.ndarray | None
) -> dict[str, Any]:
    """Every figure of one job. ``choice``: the placement ``(rows, cols)`` of candidate indices
    (None: another program's output, identified per cell)."""
    tile = candidates.shape[1]
    rows, cols = mosaic.shape[0] // tile, mosaic.shape[1] // tile
    flat = identify(mosaic, candidates) if choice is None else choice.ravel()
    scores: dict[str, Any] = far(mosaic, target, tile)
    scores.update(integrity(mosaic, candidates[flat]))
    scores.update(repetition((flat % (len(candidates) // 2)).reshape(rows, cols)))
    scores.pop("r")
    return scores


def goal_checks(ours: dict[str, Any], anchor: dict[str, Any] | None) -> dict[str, bool]:
    """Which goals a job meets: ``GOALS``, and from afar better than ``anchor`` (metapixel -d 0)."""
    checks = {}
    for key, (sense, bound, _) in GOALS.items():
        checks[key] = ours[key] >= bound if sense == ">=" else ours[key] <= bound
    if anchor is not None:
        checks["far_delta_e"] = ours["delta_e"] < anchor["delta_e"]
        checks["far_ssim"] = ours["ssim"] > anchor["ssim"]
    return checks


# ---- the benchmark: ``python -m benchmarks.fidelity [sweep] [--photo NAME ...] [--library N] [1MP 4MP 12MP]`` ----
# (``python -m benchmarks.engine quality|sweep [--unseen]`` run the same tables.)

ANCHORS = {"metapixel -d 0": ("-d", "0"), "metapixel default": (), "metapixel --cheat 30": ("-d", "0", "--cheat=30")}
LEVELS = (0, 25, 50, 75, 100)
TILE_SIZES = (8, 16, 32)
CROP = 256  # pixels of the 1:1 crops
SCREEN = 1280  # width of the whole mosaic "at screen size"


class Job:
    """One target at one tile size, with the library that has none of the target's photos."""

    def __init__(self, photo: str, label: str, size: tuple[int, int], tile: int, work: Any) -> None:
        from benchmarks.photos import slug, target_jpeg

        self.photo, self.label, self.tile, self.work = photo, label, tile, work
        self.name = f"{photo} {label} t{tile}"
        self.path = work / f"target-{slug(photo)}-{size[0]}x{size[1]}.jpg"
        if not self.path.exists():
            self.path.write_bytes(target_jpeg(photo, size))
        self.target = Image.open(self.path).convert("RGB")

    def ours(self, library: Any, **changes: Any) -> tuple[np.ndarray, dict[str, Any]]:
        import dataclasses

        from mosaic import SUB, open_image, plan_grid
        from mosaic.library_features import candidate_tiles
        from mosaic.options import DEFAULT_OPTIONS
        from mosaic.render import render_with_placement

        options = dataclasses.replace(DEFAULT_OPTIONS, **changes)
        width, height = self.target.size
        grid = plan_grid(width, height, tile_size=self.tile, tiles_across=width // self.tile)
        image = open_image(self.path.read_bytes(), min_size=(grid.tiles_across * SUB, grid.tiles_down * SUB))
        pixels, choice = render_with_placement(
            image, library, tile_size=self.tile, grid=grid, seed="bench", options=options
        )
        return pixels, job_scores(pixels, self.target, candidate_tiles(library, self.tile, options), choice)

    def metapixel(self, library: Any, library_dir: Any, options: tuple[str, ...]) -> tuple[np.ndarray, dict[str, Any]]:
        from benchmarks.baselines import run_metapixel

        output = self.work / "metapixel-out.png"
        run_metapixel(self.path, output, library_dir, self.tile, options)
        pixels = np.asarray(Image.open(output).convert("RGB"))
        return pixels, job_scores(pixels, self.target, candidates_of(library.tiles(self.tile)), None)


def _fmt(value: float, kind: str) -> str:
    if kind in ("recognisable", "window_share"):
        return f"{value:.1%}"
    if kind == "distinct":
        return str(int(value))
    return f"{value:.2f}" if kind in ("delta_e", "colour_moved") else f"{value:.3f}"


COLUMNS = ("delta_e", "ssim", "edges", "recognisable", "contrast", "colour_moved", "window_share", "distinct")
HEADER = (
    "job",
    "implementation",
    "far ΔE00",
    "far SSIM",
    "far edges r",
    "recognisable",
    "contrast",
    "colour moved",
    "window share",
    "distinct",
    "goals",
)


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]
    print("  ".join(h.ljust(w) for h, w in zip(HEADER, widths)))
    for r in rows:
        print("  ".join(c.rjust(w) if 1 < i < len(r) - 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


def _goals_line() -> str:
    parts = [f"{text} {sense} {bound:g}" for text, (sense, bound, _) in ((v[2], v) for v in GOALS.values())]
    return "goals for the defaults: " + "; ".join(parts) + "; far ΔE00 and SSIM better than metapixel -d 0"


def _save_views(job: Job, ours: np.ndarray, theirs: np.ndarray, folder: Any) -> None:
    """target | ours | metapixel at 1:1 (a crop from the most detailed part), and ours at screen size."""
    reference = reference_for(ours, job.target)
    from skimage.filters import sobel

    edges = sobel(_luma(reference))
    step = CROP // 2
    best, where = -1.0, (0, 0)
    for top in range(0, max(1, reference.shape[0] - CROP + 1), step):
        for left in range(0, max(1, reference.shape[1] - CROP + 1), step):
            value = float(edges[top : top + CROP, left : left + CROP].mean())
            if value > best:
                best, where = value, (top, left)
    top, left = where
    views = [
        np.asarray(Image.fromarray(a).resize((ours.shape[1], ours.shape[0]))) if a.shape != ours.shape else a
        for a in (reference, ours, theirs)
    ]
    crops = [v[top : top + CROP, left : left + CROP] for v in views]
    gap = np.full((crops[0].shape[0], 8, 3), 255, np.uint8)
    strip = np.concatenate([crops[0], gap, crops[1], gap, crops[2]], axis=1)
    from benchmarks.photos import slug

    stem = f"{slug(job.photo)}-{job.label.replace(' ', '-')}-t{job.tile}"
    Image.fromarray(strip).save(folder / f"{stem}-crops-target-ours-metapixel.png")
    whole = Image.fromarray(ours)
    if whole.width > SCREEN:
        whole = whole.resize((SCREEN, round(whole.height * SCREEN / whole.width)), Image.Resampling.LANCZOS)
    whole.save(folder / f"{stem}-ours-screen.jpg", quality=92)


def run(
    photos: tuple[str, ...],
    labels: list[str],
    *,
    frontier: bool = True,
    views: bool = True,
    unseen: bool = True,
    library_size: int | None = None,
    library_dir: Any = None,
) -> int:
    """The goals table for every photo × target size × tile size, the metapixel anchors beside
    each job, and the frontier for the first photo's smallest target at each tile size.

    ``unseen``: the library has none of the target's photos (the demo library is cut from the
    same samples as the targets, and a crop of the very photo it renders flatters every program).
    ``library_size``: only the first tiles of that library (a smaller library has fewer tiles
    near each colour, and the variety rule still asks for as many different ones).
    ``library_dir``: a folder or zip of photos of your own instead of the demo library, read as
    ``photomosaics render --library`` reads it; metapixel gets the same square tiles."""
    import tempfile
    from pathlib import Path

    from benchmarks.baselines import metapixel_available, prepare_metapixel_library
    from benchmarks.engine import RESULTS, TARGETS
    from benchmarks.photos import slug

    if not metapixel_available():
        print("metapixel is not installed (apt install metapixel): the anchors are missing, nothing to compare with")
        return 1
    work = Path(tempfile.mkdtemp(prefix="bench-fidelity-"))
    RESULTS.mkdir(exist_ok=True)
    print(_goals_line())
    rows: list[list[str]] = []
    frontier_rows: list[list[str]] = []
    met = total = 0
    try:
        own = _own_library(library_dir, work / "tiles-own") if library_dir is not None else None
    except ValueError as exc:  # not a folder or zip, over the limits, or no usable photo in it
        print(f"{library_dir}: {exc}")
        return 1
    for photo in photos:
        if own is not None:
            library, tile_dir, origin = own
        else:
            library, tile_dir, origin = _demo_library(photo, unseen, library_size, work / f"tiles-{slug(photo)}")
        print(f"{photo}: library of {len(library)} tiles from the {origin}", flush=True)
        for label, size in TARGETS:
            if labels and label.replace(" ", "") not in labels:
                continue
            for tile in TILE_SIZES:
                job = Job(photo, label, size, tile, work)
                prepared = work / f"metapixel-{tile_dir.name}-{tile}"
                if not prepared.exists():
                    prepare_metapixel_library(tile_dir, prepared, tile)
                ours_pixels, ours = job.ours(library)
                anchors = {name: job.metapixel(library, prepared, options) for name, options in ANCHORS.items()}
                checks = goal_checks(ours, anchors["metapixel -d 0"][1])
                met, total = met + all(checks.values()), total + 1
                missed = [k for k, ok in checks.items() if not ok]
                rows.append(
                    [
                        job.name,
                        "ours (defaults)",
                        *(_fmt(ours[k], k) for k in COLUMNS),
                        "met" if not missed else "MISSED " + ",".join(missed),
                    ]
                )
                for name, (_, scores) in anchors.items():
                    rows.append([job.name, name, *(_fmt(scores[k], k) for k in COLUMNS), ""])
                if views:
                    _save_views(job, ours_pixels, anchors["metapixel -d 0"][0], RESULTS)
                if frontier and label == TARGETS[0][0] and photo == photos[0]:
                    frontier_rows.extend(_frontier(job, library, prepared))
                print(f"  measured {job.name}", flush=True)
    print()
    _print_table(rows)
    print(f"  defaults meet every goal in {met} of {total} jobs")
    if frontier_rows:
        _print_frontier(frontier_rows)
    if views:
        print(f"\n1:1 crops (target | ours | metapixel -d 0) and whole mosaics at {SCREEN} px: {RESULTS}/")
    return 0


def _demo_library(photo: str, unseen: bool, size: int | None, tile_dir: Any) -> tuple[Any, Any, str]:
    """The demo library (without ``photo``'s own photos when ``unseen``), its tile files for
    metapixel in ``tile_dir``, and where it came from."""
    from pathlib import Path

    from benchmarks.engine import _demo_photo_names, _library_tiles
    from mosaic import build_library

    sources, origin = _library_tiles(_demo_photo_names((photo,)) if unseen else (), size)
    library, _ = build_library(sources)
    tile_dir.mkdir()
    for number, (name, data) in enumerate(sources):
        (tile_dir / f"{number:05d}-{Path(name).name}").write_bytes(data)
    return library, tile_dir, origin


def _own_library(source: Any, tile_dir: Any) -> tuple[Any, Any, str]:
    """A folder or zip of photos as the product reads it (``build_library_from``), and its
    tiles as PNG files in ``tile_dir``: metapixel gets the very square crops ours does, not
    photos it would squash to a square itself."""
    from mosaic.sources import build_library_from

    library, skipped = build_library_from(source)
    tile_dir.mkdir()
    for number, tile in enumerate(library.atlas):
        Image.fromarray(tile).save(tile_dir / f"{number:05d}.png")
    left_out = f"; {len(skipped)} files left out (first: {skipped[0][0]}: {skipped[0][1]})" if skipped else ""
    return library, tile_dir, f"photos in {source}{left_out}"


def _frontier(job: Job, library: Any, library_dir: Any) -> list[list[str]]:
    """Our correction 0..100 % against metapixel --cheat 0..100 % (its overlay of the target), at
    its default distance (anti-repetition like ours) and at -d 0: far ΔE00 against the share
    recognisable. Each -d 0 point is also checked against our whole frontier: the lowest
    correction of ours at least as good on both figures."""
    ours = {level: job.ours(library, correction=level)[1] for level in LEVELS}
    rows = []
    for level in LEVELS:
        varied = job.metapixel(library, library_dir, (f"--cheat={level}",))[1]
        repeating = job.metapixel(library, library_dir, ("-d", "0", f"--cheat={level}"))[1]
        mine = ours[level]
        better = mine["delta_e"] < varied["delta_e"] and mine["recognisable"] >= varied["recognisable"]
        beaten_by = [k for k, o in ours.items() if _at_least_as_good(o, repeating)]
        rows.append(
            [
                job.name,
                f"{level}",
                f"{mine['delta_e']:.2f} / {mine['recognisable']:.1%}",
                f"{varied['delta_e']:.2f} / {varied['recognisable']:.1%}",
                "better" if better else "NOT better",
                f"{repeating['delta_e']:.2f} / {repeating['recognisable']:.1%}",
                f"ours at {beaten_by[0]} %" if beaten_by else "none of ours",
            ]
        )
    return rows


def _at_least_as_good(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    return bool(ours["delta_e"] <= theirs["delta_e"] and ours["recognisable"] >= theirs["recognisable"])


def _print_frontier(rows: list[list[str]]) -> None:
    header = [
        "job",
        "level %",
        "ours ΔE00 / recognisable",
        "metapixel --cheat ΔE00 / recognisable",
        "same level",
        "metapixel -d 0 --cheat",
        "at least as good on both",
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(
        "\nfrontier: far ΔE00 against the share recognisable, our --correction against metapixel's --cheat "
        "(goal: ours better at every level)"
    )
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def frontier_main(photo: str, label: str, tile: int, library_dir: Any = None) -> int:
    """Only the frontier of one job (``python -m benchmarks.fidelity frontier [--photo NAME]
    [--library-dir DIR] [1MP] [16]``)."""
    import tempfile
    from pathlib import Path

    from benchmarks.baselines import prepare_metapixel_library
    from benchmarks.engine import TARGETS

    work = Path(tempfile.mkdtemp(prefix="bench-frontier-"))
    if library_dir is not None:
        try:
            library, tile_dir, _ = _own_library(library_dir, work / "tiles")
        except ValueError as exc:  # as in ``run``
            print(f"{library_dir}: {exc}")
            return 1
    else:
        library, tile_dir, _ = _demo_library(photo, True, None, work / "tiles")
    prepare_metapixel_library(tile_dir, work / "metapixel", tile)
    size = dict((k.replace(" ", ""), v) for k, v in TARGETS)[label]
    job = Job(photo, label.replace("MP", " MP"), size, tile, work)
    _print_frontier(_frontier(job, library, work / "metapixel"))
    return 0


def main() -> int:
    """``make bench``: the quality targets (the engine benchmark's photo at 1, 4 and 12 MP)."""
    from benchmarks.engine import TARGET_PHOTO

    return run((TARGET_PHOTO,), [])


def _take(args: list[str], flag: str) -> str | None:
    """Remove ``flag VALUE`` from ``args`` and return VALUE (None when the flag is absent)."""
    if flag not in args:
        return None
    at = args.index(flag)
    if at + 1 >= len(args):
        raise SystemExit(f"{flag} needs a value")
    value = args[at + 1]
    del args[at : at + 2]
    return value


USAGE = """usage: python -m benchmarks.fidelity [1MP|4MP|12MP ...] [--photo NAME|file:PATH ...]
                                     [--library N | --library-dir DIR]
       python -m benchmarks.fidelity sweep [--photo ...] [--library N | --library-dir DIR]
       python -m benchmarks.fidelity frontier [1MP|4MP|12MP] [8|16|32] [--photo ...] [--library-dir DIR]"""


def _rest_checked(args: list[str]) -> tuple[str, str, int]:
    """The mode (``quality``, ``sweep`` or ``frontier``) of what is left once the flags are
    taken, and the frontier's size label and tile size (``1MP``, 16 unless given); every other
    word is checked: a typo fails before the work, with the usage."""
    from benchmarks.engine import TARGETS, TILE_SIZES

    mode = args[0] if args[:1] in (["sweep"], ["frontier"]) else "quality"
    rest = args[1:] if mode != "quality" else args
    labels = {label.replace(" ", "") for label, _ in TARGETS}
    tiles = {str(t) for t in TILE_SIZES}
    allowed = {"quality": labels, "sweep": set(), "frontier": labels | tiles}[mode]
    unknown = [a for a in rest if a not in allowed]
    if unknown:
        raise SystemExit(f"{' '.join(unknown)}: not understood here\n{USAGE}")
    sizes, tile_sizes = [a for a in rest if a in labels], [a for a in rest if a in tiles]
    if mode == "frontier" and (len(sizes) > 1 or len(tile_sizes) > 1):
        raise SystemExit(f"frontier measures one job: one size and one tile size at most\n{USAGE}")
    return mode, (sizes or ["1MP"])[0], int((tile_sizes or ["16"])[0])


if __name__ == "__main__":
    import sys
    from pathlib import Path

    from benchmarks.photos import photo as load_photo

    args = sys.argv[1:]
    if {"-h", "--help"} & set(args):
        print(USAGE)
        raise SystemExit(0)
    chosen: list[str] = []
    while (name := _take(args, "--photo")) is not None:
        if name.startswith("file:"):
            try:
                load_photo(name)  # a typo fails now, not after the library is built
            except ValueError as exc:
                raise SystemExit(f"--photo {name}: {exc}") from None
        chosen.append(name)
    size = None
    given = _take(args, "--library")
    if given is not None:
        if not given.isdigit() or int(given) < 1:
            raise SystemExit(f"--library takes a number of tiles (1 or more), got {given!r}")
        size = int(given)
    own = _take(args, "--library-dir")
    if own is not None:
        if size is not None:
            raise SystemExit(
                "--library (the demo library's first tiles) and --library-dir (your photos) exclude each other"
            )
        if not Path(own).expanduser().exists():
            raise SystemExit(f"--library-dir {own}: no such folder or zip")
    mode, label, tile = _rest_checked(args)
    if mode == "frontier":
        if size is not None:
            raise SystemExit("--library N is for the quality run and sweep; frontier takes --library-dir")
        raise SystemExit(frontier_main(chosen[0] if chosen else "chelsea", label, tile, own))
    if mode == "sweep":
        from benchmarks.photos import SWEEP

        raise SystemExit(
            run(tuple(chosen) or SWEEP, ["1MP"], frontier=False, views=False, library_size=size, library_dir=own)
        )
    from benchmarks.engine import TARGET_PHOTO

    raise SystemExit(run(tuple(chosen) or (TARGET_PHOTO,), args, library_size=size, library_dir=own))
