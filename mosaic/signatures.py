"""Colour signatures: what the matcher compares, for target cells and for tiles alike.

A cell (or a tile) is summarised by ``SUB`` × ``SUB`` sub-cells of 8-bit RGB (the cell image,
or the tile box-reduced by Pillow). The feature vector is

    sqrt(structure) · (Y' of each sub-cell − mean Y')     SUB² values: edges, gradients
    sqrt(structure) · SUB · (RMS of Y' inside sub-cells)  1 value: texture (tiles only)
    sqrt(colour) · (2.5 (mean L* − 50), mean a*, mean b*) 3 values: the colour
    sqrt(colour) · 24 · grey(C* / 6)                      1 value: how far from grey

Structure is compared on gamma-encoded luma Y' (0..100), the signal the eye and SSIM read
edges from; colour on the CIELAB mean, where Euclidean distance follows perceived colour
difference (the ΔE the benchmark scores). Chroma layout inside a cell is left out: measured,
it cost structure more than it gained colour.

Texture is the detail a tile shows inside its sub-cells at the size it is placed. A cell
cannot carry it (the cell image has one pixel per sub-cell), so a cell's texture value is 0:
the target is taken as smooth inside its sub-cells, and a tile's texture counts as a
mismatch of that energy, summed over the SUB² sub-cells like the layout. Texture the target
does not have, or has elsewhere, only lowers structural similarity (SSIM's covariance term
is ~0 for unrelated detail, its contrast term punishes the extra variance); measured, it is
what made smooth photos (moon) lose to a program that repeats its flattest tile.

``colour`` sets the balance between colour and the rest; the benchmark chose the default.

The colour is weighed knowing the correction that follows (``correction``). Lightness
counts 2.5 times: the correction moves it most of the way, but the move is paid up close
(colour moved) and its remainder from afar, where the eye and SSIM read lightness first. The
last value is the mean chroma C* through a curve that is steep near grey and flat beyond a
dozen units: grey(x) = 1 − 1 / (1 + x + x²/2), which rises like 1 − exp(−x) with exactly
rounded operations only, so every machine rounds it alike. It speaks only for grey or
nearly grey cells, where a tile's chroma is what the colour budget can least take away:
without it a grey photo gets tinted tiles from a library of colourful ones (moon: far ΔE00
4.8 without it, 2.2 with it). A saturated cell hardly sees it, so a blue sky with no blue
tiles keeps its calm tiles. L* is centred so that its 2.5-fold range stays within the
bound; distances do not change.

Features are rounded to integers no larger than ``BOUND``: every dot product the matcher
computes in float32 is then an exact integer, whatever the BLAS, CPU or chunking — the same
pixels on every worker. Lab comes from look-up tables and elementwise IEEE arithmetic only,
for the same reason.
"""

from __future__ import annotations

import math

import numpy as np

SUB = 4  # sub-cells per cell side: the cell image has SUB x SUB pixels per cell
BOUND = 440.0  # |feature| <= BOUND keeps 3 * dims * BOUND^2 < 2^24 (exact in float32)
TEXTURE = SUB * SUB  # the column of the texture value, between the layout and the colour
COLOUR = 4  # L*, a*, b* and the grey measure: the last columns
FEATURES = SUB * SUB + 1 + COLOUR
LIGHTNESS_WEIGHT = 2.5  # L* counts this many times a*, b* (|2.5 (L* - 50)| <= 125 < 128)
GREY_WEIGHT, GREY_CHROMA = 4.0, 6.0  # the grey measure: its slope at grey, and the C* where it bends

# sRGB (D65) -> linear light, exact per 8-bit value.
_LINEAR = np.array(
    [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (i / 255 for i in range(256))],
    dtype=np.float64,
)
_F_STEPS = 1 << 16
_EPS = 216 / 24389
_KAPPA = 24389 / 27
_F = np.array(
    [
        math.copysign(abs(t) ** (1 / 3), t) if t > _EPS else (_KAPPA * t + 16) / 116
        for t in (i / _F_STEPS for i in range(_F_STEPS + 1))
    ],
    dtype=np.float64,
)
_WHITE = (0.95047, 1.0, 1.08883)
_M = (
    (0.4124564, 0.3575761, 0.1804375),
    (0.2126729, 0.7151522, 0.0721750),
    (0.0193339, 0.1191920, 0.9503041),
)


def cell_pixels(tile_size: int) -> int:
    """Pixels per cell side in the cell image: ``SUB``, or 1 for tiles smaller than ``SUB``.

    Tiles of 1–3 pixels show no layout, so they are matched on colour alone, and a cell
    image 16 times the size of the output would be absurd.
    """
    return SUB if tile_size >= SUB else 1


def colour_features(rgb: np.ndarray) -> np.ndarray:
    """``(n, 3) uint8`` colours -> the ``features(structure=0, colour=1)`` of flat cells of them."""
    out = np.zeros((rgb.shape[0], FEATURES), np.float64)
    out[:, -COLOUR:] = colour_columns(srgb_to_lab(rgb)) * (BOUND / 128.0)
    return np.clip(np.rint(out), -BOUND, BOUND).astype(np.float32)


def colour_columns(lab: np.ndarray) -> np.ndarray:
    """``(n, 3)`` mean CIELAB -> ``(n, COLOUR)``: weighted L*, a*, b* and the grey measure, in
    units of a* (each at most 128 in size)."""
    chroma = np.sqrt(lab[:, 1] * lab[:, 1] + lab[:, 2] * lab[:, 2])
    x = chroma / GREY_CHROMA
    grey = (GREY_WEIGHT * GREY_CHROMA) * (1.0 - 1.0 / (1.0 + x + 0.5 * x * x))
    return np.stack([LIGHTNESS_WEIGHT * (lab[:, 0] - 50.0), lab[:, 1], lab[:, 2], grey], axis=1)


def _f(t: np.ndarray) -> np.ndarray:
    index = np.clip(np.rint(t * _F_STEPS), 0, _F_STEPS).astype(np.intp)
    return _F[index]


def srgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """``(..., 3) uint8`` sRGB -> ``(..., 3) float64`` CIELAB (D65), deterministic."""
    if rgb.dtype != np.uint8:
        raise TypeError(f"expected uint8 RGB, got {rgb.dtype}")
    r, g, b = (_LINEAR[rgb[..., i]] for i in range(3))
    fx, fy, fz = (_f((m[0] * r + m[1] * g + m[2] * b) / w) for m, w in zip(_M, _WHITE))
    return np.stack([116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)], axis=-1)


# The inverse: CIELAB (D65) -> linear sRGB, and linear light -> the nearest 8-bit value.
_XYZ_TO_RGB = (
    (3.2404542, -1.5371385, -0.4985314),
    (-0.9692660, 1.8760108, 0.0415560),
    (0.0556434, -0.2040259, 1.0572252),
)
_LINEAR_EDGES = (_LINEAR[1:] + _LINEAR[:-1]) / 2


def _finv(t: np.ndarray) -> np.ndarray:
    return np.where(t > 6 / 29, t * t * t, (3 * (6 / 29) ** 2) * (t - 4 / 29))


def lab_to_linear_rgb(lab: np.ndarray) -> list[np.ndarray]:
    """``(..., 3)`` CIELAB (D65) -> the linear-light R, G, B channels, unclipped (outside
    0..1: a colour sRGB cannot show)."""
    fy = (lab[..., 0] + 16) / 116
    xyz = [_finv(fy + lab[..., 1] / 500) * _WHITE[0], _finv(fy) * _WHITE[1], _finv(fy - lab[..., 2] / 200) * _WHITE[2]]
    return [m[0] * xyz[0] + m[1] * xyz[1] + m[2] * xyz[2] for m in _XYZ_TO_RGB]


def lab_to_srgb(lab: np.ndarray) -> np.ndarray:
    """``(..., 3)`` CIELAB (D65) -> ``uint8`` sRGB, out-of-gamut colours clipped per channel;
    the exact inverse of ``srgb_to_lab`` on its outputs."""
    return np.stack([linear_to_srgb(c) for c in lab_to_linear_rgb(lab)], axis=-1)


def srgb_to_linear(rgb: np.ndarray) -> np.ndarray:
    """``uint8`` sRGB -> linear light (float64, 0..1), exact per 8-bit value."""
    return _LINEAR[rgb]


def linear_to_srgb(linear: np.ndarray) -> np.ndarray:
    """Linear light -> the nearest ``uint8`` sRGB value (outside 0..1 clipped)."""
    return np.searchsorted(_LINEAR_EDGES, linear).astype(np.uint8)


def _mean(parts: list[np.ndarray]) -> np.ndarray:
    """Mean of equally shaped arrays by explicit adds (a fixed summation order)."""
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total / len(parts)


def luma(rgb: np.ndarray) -> np.ndarray:
    """``(..., 3) uint8`` -> Rec. 601 gamma luma Y' on a 0..100 scale (float64)."""
    return (0.299 * 100 / 255) * rgb[..., 0] + (0.587 * 100 / 255) * rgb[..., 1] + (0.114 * 100 / 255) * rgb[..., 2]


def features(sub_rgb: np.ndarray, *, structure: float, colour: float) -> np.ndarray:
    """``(n, SUB, SUB, 3) uint8`` sub-cells -> ``(n, FEATURES) float32`` integer-valued features."""
    n = sub_rgb.shape[0]
    if sub_rgb.shape[1:] != (SUB, SUB, 3):
        raise ValueError(f"expected (n, {SUB}, {SUB}, 3) sub-cells, got {sub_rgb.shape}")
    flat = sub_rgb.reshape(n, SUB * SUB, 3)
    y = luma(flat)
    cells = [flat[:, i] for i in range(SUB * SUB)]
    y_mean = _mean([y[:, i] for i in range(SUB * SUB)])
    lab_mean = _mean([srgb_to_lab(c) for c in cells])
    ws, wc = math.sqrt(structure), math.sqrt(colour)
    scale = _scale(ws, wc)
    out = np.empty((n, FEATURES), dtype=np.float64)
    out[:, : SUB * SUB] = (y - y_mean[:, None]) * (ws * scale)
    out[:, TEXTURE] = 0.0  # a cell's interior is taken as smooth; tiles: ``with_texture``
    out[:, -COLOUR:] = colour_columns(lab_mean) * (wc * scale)
    return np.clip(np.rint(out), -BOUND, BOUND).astype(np.float32)


def _scale(ws: float, wc: float) -> float:
    return BOUND / max(ws * 100.0, wc * 128.0, 1e-9)


def with_texture(
    tile_features: np.ndarray, tiles: np.ndarray, sub_rgb: np.ndarray, *, structure: float, colour: float
) -> np.ndarray:
    """``tile_features`` (from ``features`` of the tiles' sub-cells) with their texture column set.

    ``tiles``: ``(n, s, s, 3) uint8`` at the placed size; ``sub_rgb`` their sub-cells. The
    texture is the RMS of Y' minus its sub-cell's Y', over the tile (sub-cells of ``s / SUB``
    pixels; for sizes that are not a multiple of SUB, the nearest sub-cell).
    """
    n, s = tiles.shape[0], tiles.shape[1]
    position = (np.arange(s) * SUB) // s  # each pixel row/column -> its sub-cell
    rms = np.empty(n, np.float64)
    step = max(1, (1 << 20) // (s * s))  # tiles per step: bounded temporaries
    for start in range(0, n, step):
        own = luma(sub_rgb[start : start + step])[:, position][:, :, position]
        rms[start : start + step] = np.sqrt(np.mean((luma(tiles[start : start + step]) - own) ** 2, axis=(1, 2)))
    ws = math.sqrt(structure)
    out = tile_features.copy()
    out[:, TEXTURE] = np.clip(np.rint(rms * (SUB * ws * _scale(ws, math.sqrt(colour)))), -BOUND, BOUND)
    return out
