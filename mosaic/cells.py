"""Cells of several sizes: where the grid keeps small cells and where a calm block takes one photo.

The grid of base cells (one tile each) is cut into blocks of the largest cell size, aligned to
the grid's top-left corner; a block is a quadtree of sizes 1×, 2×, 4× the base tile. A block of
``s`` × ``s`` base cells becomes one cell of size ``s`` when it is *calm* at the matching
resolution (the cell image, ``SUB`` × ``SUB`` pixels per base cell), and when each of its four
quarters is one cell of the size below (if that size is allowed):

- its colour: every base cell's mean CIELAB colour lies within ``CALM_DELTA_E`` (ΔE76) of the
  block's mean, and
- its structure: the RMS luma gradient between neighbouring pixels of the cell image (Y′,
  0..100) is under ``CALM_GRADIENT``.

``split`` (0–100, default 50) scales both thresholds by (100 − split) / 50: higher keeps more
small cells, 100 none large. The plan reads the cell image only, block by block, so a run of
rows that starts on a multiple of the largest size (``parts.plan_parts(..., align=)``) plans
alone exactly what the whole grid plans there. This plan is where a block *may* be large: the
choice splits a block further where its photo fits it badly (``sized``, split by fit), and
``plan_of`` reads the plan a choice was made on back from the choice.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np
from PIL import Image

from .grid import block_sums
from .signatures import SUB, srgb_to_lab

SIZES = (1, 2, 4)  # the sizes a cell may take, in base tiles
CALM_DELTA_E = 4.0  # at split 50: the farthest a base cell's colour may lie from its block's mean
CALM_GRADIENT = 2.0  # at split 50: the RMS luma step between neighbouring cell-image pixels
_LUMA_PER_MILLE = np.array([299, 587, 114], np.float32)  # ``signatures.luma``'s Rec. 601 weights
PLANS_KEPT = 64  # parts whose plan painting finds again (``kept_plan``): a part's choice, then its painting
_plans: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()
_plans_lock = threading.Lock()


def check_cell_sizes(sizes: object) -> None:
    """ValueError unless ``sizes`` is a rising tuple of ``SIZES`` that starts with 1."""
    if (
        not isinstance(sizes, tuple)
        or not sizes
        or sizes[0] != 1
        or any(type(s) is not int or s not in SIZES for s in sizes)
        or list(sizes) != sorted(set(sizes))
    ):
        raise ValueError(f"cell sizes must rise from 1 and be among {SIZES}, e.g. (1, 2, 4); got {sizes!r}")


def parse_cell_sizes(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``; ValueError with what is wrong."""
    try:
        sizes = tuple(sorted(int(part) for part in text.replace(" ", "").split(",")))
    except ValueError:
        raise ValueError(f"cell sizes must be a list like 1,2,4; got {text!r}") from None
    check_cell_sizes(sizes)
    return sizes


def check_tile_size(sizes: tuple[int, ...], tile_size: int, largest_tile: int) -> None:
    """ValueError unless every cell of ``sizes`` fits the library's tiles and shows a layout."""
    if len(sizes) > 1 and tile_size < SUB:
        raise ValueError(f"cells of several sizes need tiles of {SUB} pixels or more, got {tile_size}")
    if sizes[-1] * tile_size > largest_tile:
        raise ValueError(
            f"a cell of {sizes[-1]} tiles of {tile_size} px is {sizes[-1] * tile_size} px, "
            f"over the library's {largest_tile} px tiles: use a smaller tile size or fewer sizes"
        )


def thresholds(split: int) -> tuple[float, float]:
    """(ΔE76, RMS gradient) under which a block is calm, at eagerness ``split``."""
    scale = (100 - split) / 50
    return CALM_DELTA_E * scale, CALM_GRADIENT * scale


def plan_cells(cells: np.ndarray, sizes: tuple[int, ...], split: int) -> np.ndarray:
    """``(rows, cols) uint8``: the size of the cell that covers each base cell.

    ``cells``: a cell image (``SUB`` pixels per base cell) whose first row is a multiple of
    the largest size. A cell of size ``s`` has its top-left base cell on multiples of ``s``.
    """
    if len(sizes) == 1:
        return np.ones((cells.shape[0] // SUB, cells.shape[1] // SUB), np.uint8)
    return plan_with_colours(cells, sizes, split, base_lab(cells))


def base_lab(cells: np.ndarray) -> np.ndarray:
    """``(rows, cols, 3) float64``: each base cell's mean colour (a box mean, Pillow's rounding)
    in CIELAB."""
    return srgb_to_lab(np.asarray(Image.fromarray(cells).reduce(SUB)))


def plan_with_colours(cells: np.ndarray, sizes: tuple[int, ...], split: int, lab: np.ndarray) -> np.ndarray:
    """``plan_cells`` given the base cells' colours (``base_lab``), which ``sized`` reads too."""
    rows, cols = cells.shape[0] // SUB, cells.shape[1] // SUB
    plan = np.ones((rows, cols), np.uint8)
    if len(sizes) == 1:
        return plan
    colour_limit, gradient_limit = thresholds(split)
    energy = _gradient_energy(cells, sizes[-1])
    below = np.ones((rows, cols), bool)  # where the size below covers whole blocks (size 1: all)
    for size in sizes[1:]:
        r, c = rows // size, cols // size
        if r == 0 or c == 0:
            break
        area = lab[: r * size, : c * size]
        centre = block_sums(area, size) / (size * size)
        farthest = np.zeros((r, c))  # the largest squared distance of a base cell from its block's mean
        for i in range(size):
            for j in range(size):
                np.maximum(farthest, ((area[i::size, j::size] - centre) ** 2).sum(axis=2), out=farthest)
        spread = np.sqrt(farthest)
        gradient = np.sqrt(block_sums(energy[: r * size, : c * size], size) / (size * size))
        whole = below[: r * size, : c * size].reshape(r, size, c, size).all(axis=(1, 3))
        calm = whole & (spread <= colour_limit) & (gradient <= gradient_limit)
        merged = np.repeat(np.repeat(calm, size, axis=0), size, axis=1)
        plan[: r * size, : c * size][merged] = size
        below = np.zeros((rows, cols), bool)
        below[: r * size, : c * size] = merged
    return plan


def _gradient_energy(cells: np.ndarray, largest: int) -> np.ndarray:
    """``(rows, cols)``: the mean squared luma step to the right and down neighbours, per base
    cell; steps out of a block of the ``largest`` size are left out (a block is read alone).
    In float32: a threshold on a mean of squares needs no more, and a part's cell image is
    millions of pixels."""
    # Integer weights: every product and sum is an integer under 2^24, exact in float32 in any
    # order a BLAS sums it, so the luma is the same on every CPU; then one elementwise scale.
    y = cells.astype(np.float32) @ _LUMA_PER_MILLE
    y *= np.float32(100 / 255 / 1000)
    edge = SUB * largest
    across, down = np.diff(y, axis=1), np.diff(y, axis=0)
    across *= across
    down *= down
    across[:, edge - 1 :: edge] = 0
    down[edge - 1 :: edge, :] = 0
    step = np.zeros(y.shape, np.float32)
    step[:, :-1] += across
    step[:-1, :] += down
    return block_sums(step, SUB) / (2 * SUB * SUB)


def origins(plan: np.ndarray, size: int) -> np.ndarray:
    """``(rows // size, cols // size) bool``: where a cell of ``size`` has its top-left base cell."""
    r, c = plan.shape[0] // size, plan.shape[1] // size
    return plan[: r * size : size, : c * size : size] == size


def level_image(cells: np.ndarray, size: int) -> np.ndarray:
    """The cell image of cells of ``size``: ``SUB`` pixels per cell, each the box mean of its block."""
    if size == 1:
        return cells
    rows, cols = cells.shape[0] // (SUB * size), cells.shape[1] // (SUB * size)
    block = np.ascontiguousarray(cells[: rows * SUB * size, : cols * SUB * size])
    return np.asarray(Image.fromarray(block).reduce(size))


def keep_plan(cells: np.ndarray, sizes: tuple[int, ...], split: int, plan: np.ndarray) -> None:
    """Keep ``plan_cells(cells, sizes, split)`` (``plan``) of a part for its painting (``kept_plan``)."""
    key = _plan_key(cells, sizes, split)
    plan = plan.copy()
    plan.flags.writeable = False  # shared by every painting of these cells
    with _plans_lock:
        _plans[key] = plan
        _plans.move_to_end(key)
        while len(_plans) > PLANS_KEPT:
            _plans.popitem(last=False)


def kept_plan(cells: np.ndarray, sizes: tuple[int, ...], split: int) -> np.ndarray:
    """``plan_cells(cells, sizes, split)``: the one the part's choice kept (``keep_plan``), found
    by the cells' bytes, or planned anew (a choice made in another process)."""
    with _plans_lock:
        plan = _plans.get(_plan_key(cells, sizes, split))
    return plan_cells(cells, sizes, split) if plan is None else plan


def _plan_key(cells: np.ndarray, sizes: tuple[int, ...], split: int) -> tuple[object, ...]:
    digest = hashlib.blake2b(np.ascontiguousarray(cells).data, digest_size=16).digest()
    return digest, cells.shape, sizes, split


def plan_of(upper: np.ndarray, choice: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """The plan a choice was made on: ``upper`` (``plan_cells``, from the target alone) where a
    block kept its size, smaller where the choice split it (``sized.choose_part`` splits a block
    whose photo fits it badly). A block of ``upper``'s size ``s`` or larger is one cell of ``s``
    where all its base cells hold one candidate: a split block never does (``choose_part``)."""
    rows, cols = choice.shape
    plan = np.ones((rows, cols), np.uint8)
    covered = np.zeros((rows, cols), bool)
    for size in reversed(sizes[1:]):
        r, c = rows // size, cols // size
        if r == 0 or c == 0:
            continue
        block = choice[: r * size, : c * size].reshape(r, size, c, size)
        uniform = (block == block[:, :1, :, :1]).all(axis=(1, 3))
        corner = (slice(0, r * size, size), slice(0, c * size, size))
        take = uniform & (upper[corner] >= size) & ~covered[corner]
        merged = np.repeat(np.repeat(take, size, axis=0), size, axis=1)
        plan[: r * size, : c * size][merged] = size
        covered[: r * size, : c * size] |= merged
    return plan
