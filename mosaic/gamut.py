"""The in-gamut colours a tile library should reach, and the grades that recolour a crop to reach one.

The colours are the in-gamut CIELAB colours on a grid ``COVERAGE_STEP`` apart; one is
*covered* when a tile's mean is within ``COVERAGE_RADIUS`` (ΔE76) of it (``colour_coverage``).
A ``Grade`` recolours a crop in CIELAB (a lightness curve, a hue rotation, a chroma scale and
shift), keeping its detail; ``fit_grade`` finds the one that moves a crop's mean to a target
colour. The demo library (``workers.demo_library``) uses both to fill the gaps its real crops leave. Only look-up
tables and elementwise IEEE arithmetic (no ``pow``, ``sin`` or BLAS): the same tiles anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .signatures import lab_to_linear_rgb, lab_to_srgb, srgb_to_lab

__all__ = [
    "COVERAGE_RADIUS",
    "COVERAGE_STEP",
    "Grade",
    "apply_grade",
    "colour_coverage",
    "covered_by",
    "fit_grade",
    "grid_neighbours",
    "in_gamut_grid",
    "mean_lab",
]

COVERAGE_STEP = 5.0  # the CIELAB grid of colours the library should reach (L*, a*, b* step)
COVERAGE_RADIUS = 10.0  # a grid colour is covered when a tile's mean is this close (ΔE76)


def _ladder(low: float, ratio: float, steps: int) -> np.ndarray:
    values = [low]
    for _ in range(steps - 1):
        values.append(values[-1] * ratio)
    return np.array(values)


# The lightness curve's parameters tried: 2^-10 .. 2^10 in steps of 2^(1/8), by products only.
_K_LADDER = _ladder(2.0**-10, float(np.sqrt(np.sqrt(np.sqrt(2.0)))), 161)


@dataclass(frozen=True)
class Grade:
    """A colour grade in CIELAB: ``L' = 100·x / (x + k·(1 − x))`` with ``x = L/100``, then
    ``(a', b') = s·R·(a, b) + shift``, R the rotation with cosine ``cos`` and sine ``sin``."""

    k: float
    cos: float
    sin: float
    scale: float
    shift: tuple[float, float]


def _grid(step: float) -> tuple[np.ndarray, np.ndarray]:
    """The CIELAB colours on a ``step`` grid, and which of them sRGB can show."""
    lightness = np.arange(0.0, 100.0 + 1e-9, step)
    ab = np.arange(-128.0, 128.0, step)
    grid = np.stack(np.meshgrid(lightness, ab, ab, indexing="ij"), axis=-1)
    inside = np.ones(grid.shape[:3], bool)
    for channel in lab_to_linear_rgb(grid):
        inside &= (channel >= -1e-9) & (channel <= 1 + 1e-9)
    return grid, inside


def in_gamut_grid(step: float = COVERAGE_STEP) -> np.ndarray:
    """The CIELAB colours on a ``step`` grid that sRGB can show: ``(n, 3)`` float64."""
    grid, inside = _grid(step)
    return grid[inside]


def grid_neighbours(step: float, radius: float) -> np.ndarray:
    """For each colour of ``in_gamut_grid(step)``, the indices of those within ``radius`` of
    it (itself included), as an ``(n, m)`` table padded with -1."""
    _, inside = _grid(step)
    index = np.full(inside.shape, -1, np.int64)
    index[inside] = np.arange(int(inside.sum()))
    reach = int(radius // step)
    span = range(-reach, reach + 1)
    offsets = [
        (i, j, k) for i in span for j in span for k in span if (i * i + j * j + k * k) * step * step <= radius * radius
    ]
    padded = np.pad(index, reach, constant_values=-1)
    where = np.argwhere(inside) + reach
    return np.stack([padded[where[:, 0] + i, where[:, 1] + j, where[:, 2] + k] for i, j, k in offsets], axis=1)


def mean_lab(rgb: np.ndarray) -> np.ndarray:
    """``(n, h, w, 3) uint8`` images -> ``(n, 3)`` CIELAB of each image's mean sRGB colour."""
    means = np.clip(np.rint(rgb.reshape(rgb.shape[0], -1, 3).mean(axis=1)), 0, 255).astype(np.uint8)
    return srgb_to_lab(means)


def colour_coverage(
    means: np.ndarray, radius: float = COVERAGE_RADIUS, step: float = COVERAGE_STEP
) -> dict[str, float]:
    """Shares of the in-gamut CIELAB grid within ``radius`` (ΔE76) of one of ``means`` ``(n, 3)``:
    ``all``, ``dark`` (L* <= 30) and ``saturated`` (chroma >= 50)."""
    grid = in_gamut_grid(step)
    near = covered_by(means, step, radius)
    dark, saturated = grid[:, 0] <= 30, np.hypot(grid[:, 1], grid[:, 2]) >= 50
    return {"all": float(near.mean()), "dark": float(near[dark].mean()), "saturated": float(near[saturated].mean())}


def covered_by(means: np.ndarray, step: float, radius: float) -> np.ndarray:
    """Which colours of ``in_gamut_grid(step)`` lie within ``radius`` of one of ``means``
    ``(n, 3)``: each mean looks only at the grid colours in the box around it."""
    grid, inside = _grid(step)
    hit = np.zeros(inside.shape, bool)
    origin = grid[0, 0, 0]
    reach = int(radius // step) + 1
    base = np.floor((means - origin) / step).astype(np.int64)
    for offset in np.ndindex(2 * reach + 1, 2 * reach + 1, 2 * reach + 1):
        cell = base + np.array(offset) - reach + 1
        ok = np.all((cell >= 0) & (cell < np.array(inside.shape)), axis=1)
        cell = cell[ok]
        colour = origin + cell * step
        near = ((colour - means[ok]) ** 2).sum(axis=1) <= radius * radius
        hit[tuple(cell[near].T)] = True
    return hit[inside]


# --- colour grades ---


def _apply_lab(lab: np.ndarray, grade: Grade) -> np.ndarray:
    x = np.clip(lab[..., 0] / 100, 0.0, 1.0)
    lightness = 100 * x / np.maximum(x + grade.k * (1 - x), 1e-12)
    a, b = lab[..., 1], lab[..., 2]
    a2 = grade.scale * (grade.cos * a - grade.sin * b) + grade.shift[0]
    b2 = grade.scale * (grade.sin * a + grade.cos * b) + grade.shift[1]
    return np.stack([lightness, a2, b2], axis=-1)


def apply_grade(rgb: np.ndarray, grade: Grade) -> np.ndarray:
    """``(..., 3) uint8`` sRGB graded in CIELAB, back to ``uint8`` sRGB."""
    return lab_to_srgb(_apply_lab(srgb_to_lab(rgb), grade))


def fit_grade(thumb: np.ndarray, target: np.ndarray) -> tuple[Grade, np.ndarray]:
    """The grade that moves ``thumb``'s (``(h, w, 3) uint8``) mean colour to ``target``, and
    the mean it reaches (clipping at the gamut's edge can stop it short)."""
    lab = srgb_to_lab(thumb).reshape(-1, 3)
    x = np.clip(lab[:, 0] / 100, 0.0, 1.0)
    mean_ab = lab[:, 1:].mean(axis=0)
    chroma = float(np.sqrt(mean_ab[0] * mean_ab[0] + mean_ab[1] * mean_ab[1]))
    aim = target.astype(np.float64).copy()
    # Mean lightness for each k of a fixed geometric ladder (falls as k grows), then k by
    # linear interpolation on that curve: one vectorised step instead of a bisection.
    curve = (100 * x[None, :] / np.maximum(x[None, :] + _K_LADDER[:, None] * (1 - x[None, :]), 1e-12)).mean(axis=1)
    grade, reached = None, target
    for _ in range(2):  # aim past the target by what clipping took off the first time
        k = float(np.interp(-aim[0], -curve, _K_LADDER))
        aim_chroma = float(np.sqrt(aim[1] * aim[1] + aim[2] * aim[2]))
        if chroma > 2.0 and aim_chroma > 2.0:
            cos = float((mean_ab[0] * aim[1] + mean_ab[1] * aim[2]) / (chroma * aim_chroma))
            sin = float((mean_ab[0] * aim[2] - mean_ab[1] * aim[1]) / (chroma * aim_chroma))
            scale = min(max(aim_chroma / chroma, 0.5), 2.0)
        else:
            cos, sin, scale = 1.0, 0.0, 1.0
        rotated = scale * np.array([cos * mean_ab[0] - sin * mean_ab[1], sin * mean_ab[0] + cos * mean_ab[1]])
        shift = aim[1:] - rotated
        grade = Grade(k, cos, sin, scale, (float(shift[0]), float(shift[1])))
        reached = mean_lab(apply_grade(thumb, grade)[None])[0]
        aim = aim + (target - reached)
    assert grade is not None
    return grade, reached


# --- choosing the tiles ---
