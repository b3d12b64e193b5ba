"""CIEDE2000: the colour difference a person sees, between two CIELAB colours.

Euclidean distance in CIELAB overstates differences in saturated colours and misjudges
blues; CIEDE2000 (Sharma, Wu and Dalal, "The CIEDE2000 color-difference formula", 2005)
weights lightness, chroma and hue by where the colours sit, and about 1 ΔE00 is the
smallest difference most people notice side by side. The correction budgets each tile's
colour move in it (``correction``), the unit the benchmark reports "colour moved" in.

Vectorised NumPy, elementwise, so a colour's difference does not depend on the others in
the array: a band computes what the whole render computes.
"""

from __future__ import annotations

import numpy as np

_25_POW_7 = 25.0**7


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
