"""CIEDE2000: the colour difference a person sees, between two CIELAB colours.

Euclidean distance in CIELAB overstates differences in saturated colours and misjudges
blues; CIEDE2000 (Sharma, Wu and Dalal, "The CIEDE2000 color-difference formula", 2005)
weights lightness, chroma and hue by where the colours sit, and about 1 ΔE00 is the
smallest difference most people notice side by side. The correction budgets each tile's
colour move in it (``correction``), the unit the benchmark reports "colour moved" in.

Vectorised NumPy, elementwise, so a colour's difference does not depend on the others in
the array: a band computes what the whole render computes.

Only the lightness term depends on L*: ΔE00² = (ΔL'/S_L)² + the chroma-and-hue part², and
that part depends only on a*, b*. ``chroma_difference`` computes it fast, for the budget,
which evaluates it on most cells of a render several times: float32 in cache-sized blocks,
and no trigonometry but one sine and one exponential (the hue angles and their mean are
unit vectors, the hue weighting T a polynomial in them).
"""

from __future__ import annotations

import math

import numpy as np

_25_POW_7 = 25.0**7
BLOCK = 16384  # rows per step of ``chroma_difference``: its temporaries stay in cache
# atan on [-1, 1] within 2.5e-7 rad: an odd polynomial, minimax-fitted
_ATAN = (0.9999961115, -0.3331736797, 0.1980781486, -0.1323333955, 0.0796236279, -0.0336041834, 0.0068117814)
_COS, _SIN = ({d: f(math.radians(d)) for d in (30, 6, 63, 275)} for f in (math.cos, math.sin))


def ciede2000(lab1: np.ndarray, lab2: np.ndarray) -> np.ndarray:
    """``(..., 3)`` CIELAB pairs -> ``(...)`` ΔE00 (kL = kC = kH = 1)."""
    l1, a1, b1 = (lab1[..., i].astype(np.float64) for i in range(3))
    l2, a2, b2 = (lab2[..., i].astype(np.float64) for i in range(3))
    c_mean = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    c7 = c_mean**7
    g = 0.5 * (1 - np.sqrt(c7 / (c7 + _25_POW_7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p = np.degrees(np.arctan2(b1, a1p)) % 360
    h2p = np.degrees(np.arctan2(b2, a2p)) % 360
    chroma_product = c1p * c2p
    no_hue = chroma_product == 0

    dl = l2 - l1
    dc = c2p - c1p
    dh = h2p - h1p
    dh = np.where(dh > 180, dh - 360, np.where(dh < -180, dh + 360, dh))
    dh = np.where(no_hue, 0.0, dh)
    dhh = 2 * np.sqrt(chroma_product) * np.sin(np.radians(dh) / 2)

    l_mean = (l1 + l2) / 2
    cp_mean = (c1p + c2p) / 2
    h_sum = h1p + h2p
    h_mean = np.where(np.abs(h1p - h2p) <= 180, h_sum / 2, np.where(h_sum < 360, (h_sum + 360) / 2, (h_sum - 360) / 2))
    h_mean = np.where(no_hue, h_sum, h_mean)
    t = (
        1
        - 0.17 * np.cos(np.radians(h_mean - 30))
        + 0.24 * np.cos(np.radians(2 * h_mean))
        + 0.32 * np.cos(np.radians(3 * h_mean + 6))
        - 0.20 * np.cos(np.radians(4 * h_mean - 63))
    )
    rotation = 30 * np.exp(-(((h_mean - 275) / 25) ** 2))
    cp7 = cp_mean**7
    rc = 2 * np.sqrt(cp7 / (cp7 + _25_POW_7))
    sl = 1 + 0.015 * (l_mean - 50) ** 2 / np.sqrt(20 + (l_mean - 50) ** 2)
    sc = 1 + 0.045 * cp_mean
    sh = 1 + 0.015 * cp_mean * t
    rt = -np.sin(np.radians(2 * rotation)) * rc
    lightness, chroma, hue = dl / sl, dc / sc, dhh / sh
    return np.sqrt(lightness**2 + chroma**2 + hue**2 + rt * chroma * hue)


def chroma_difference(ab1: np.ndarray, ab2: np.ndarray) -> np.ndarray:
    """``(n, 2)`` a*, b* pairs -> ``(n,)`` float32: the chroma-and-hue part of their ΔE00
    (``ciede2000`` of two colours of the same L*), within about 1e-4 ΔE00 of it.

    Hues within float32 noise of opposite are the exception: there the formula itself jumps
    (the mean hue turns half a circle), and this may land on the other side of the jump.
    """
    out = np.empty(len(ab1), np.float32)
    for i in range(0, len(ab1), BLOCK):
        a1, b1 = np.ascontiguousarray(ab1[i : i + BLOCK].T, np.float32)
        a2, b2 = np.ascontiguousarray(ab2[i : i + BLOCK].T, np.float32)
        out[i : i + BLOCK] = _chroma_block(a1, b1, a2, b2)
    return out


def _chroma_block(a1: np.ndarray, b1: np.ndarray, a2: np.ndarray, b2: np.ndarray) -> np.ndarray:
    cm = (np.sqrt(a1 * a1 + b1 * b1) + np.sqrt(a2 * a2 + b2 * b2)) / 2
    k = 1.5 - 0.5 * _seventh_share(cm)  # 1 + G
    a1, a2 = k * a1, k * a2
    c1, c2 = np.sqrt(a1 * a1 + b1 * b1), np.sqrt(a2 * a2 + b2 * b2)
    dc, da, db = c2 - c1, a2 - a1, b2 - b1
    # ΔH' = 2 √(C1'C2') sin(Δh'/2), its sign the cross product's; near hues from the cross
    # product, far ones from |Δa'b'|² - ΔC'²: each where float32 keeps its digits.
    cross, dot = a1 * db - da * b1, a1 * a2 + b1 * b2
    same = dot >= 0  # hues at most 90° apart
    near = cross * np.sqrt(2 / np.maximum(c1 * c2 + dot, 1e-30))
    far = np.copysign(np.sqrt(np.maximum(da * da + db * db - dc * dc, 0)), cross)
    dh = np.where(same, near, far)
    # The mean hue is the bisector of the two hue directions u1, u2 (a zero chroma has none):
    # u1 + u2, or for far hues (u2 - u1) turned a right angle toward the shorter arc.
    r1, r2 = 1 / np.maximum(c1, 1e-30), 1 / np.maximum(c2, 1e-30)
    x1, y1, x2, y2 = a1 * r1, b1 * r1, a2 * r2, b2 * r2
    turn = np.copysign(np.float32(1), cross)
    x = np.where(same, x1 + x2, turn * (y2 - y1))
    y = np.where(same, y1 + y2, turn * (x1 - x2))
    norm = 1 / np.maximum(np.sqrt(x * x + y * y), 1e-30)
    t, rotation = _hue_weights(x * norm, y * norm)
    cp = (c1 + c2) / 2
    rt = -np.sin(rotation) * 2 * _seventh_share(cp)
    chroma, hue = dc / (1 + 0.045 * cp), dh / (1 + 0.015 * cp * t)
    return np.sqrt(np.maximum(chroma * chroma + hue * hue + rt * chroma * hue, 0))


def _seventh_share(c: np.ndarray) -> np.ndarray:
    """√(C⁷ / (C⁷ + 25⁷)), by multiplications."""
    c2 = c * c
    c7 = c2 * c2 * c2 * c
    return np.sqrt(c7 / (c7 + np.float32(_25_POW_7)))


def _hue_weights(c: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """T and 2Δθ (radians) of the mean hue, given as its cosine and sine."""
    c2, s2 = c * c - s * s, 2 * s * c
    c3, s3 = c * c2 - s * s2, s * c2 + c * s2
    c4, s4 = c2 * c2 - s2 * s2, 2 * s2 * c2
    t = (
        1
        - 0.17 * (c * _COS[30] + s * _SIN[30])
        + 0.24 * c2
        + 0.32 * (c3 * _COS[6] - s3 * _SIN[6])
        - 0.20 * (c4 * _COS[63] + s4 * _SIN[63])
    )
    # The angle from 275°, by tan of its half; beyond ±90° the exponential is below 3e-6, so
    # it is held at ±90°.
    x, y = c * _COS[275] + s * _SIN[275], s * _COS[275] - c * _SIN[275]
    half = np.where(x > 0, y / np.maximum(1 + x, 1), np.copysign(np.float32(1), y))
    acc: np.floating | np.ndarray = np.float32(_ATAN[-1])
    for coefficient in _ATAN[-2::-1]:
        acc = acc * (half * half) + np.float32(coefficient)
    angle = half * acc * np.float32(2 * 180 / np.pi / 25)  # (h̄' - 275°) / 25°
    return t, np.exp(-(angle * angle)) * np.float32(np.radians(60))
