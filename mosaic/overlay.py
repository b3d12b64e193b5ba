"""The overlay (``RenderOptions.overlay``, off by default): the target painted over the tiles.

Each tile's colours are moved part of the way toward the target at sub-cell resolution (4×4
patches per tile), keeping the tile's detail: the photo with a tile texture on top. It wins
pixel fidelity and, up close, the tiles stop being photographs; the default correction
moves whole tiles instead (``correction``).

Integer arithmetic throughout, so a band overlaid alone is the same band overlaid within
the whole, on any machine; in-place and in strips, so no full-size temporary is made.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

OVERLAY_BYTES = 1 << 20  # output bytes overlaid per step: the strip's arrays stay in cache


def overlay_toward(
    out: np.ndarray,
    cells: np.ndarray,
    placed_sub: np.ndarray,
    percent: int,
    local: np.ndarray | None = None,
    cell: int | None = None,
) -> np.ndarray:
    """Move each tile's colours ``percent`` % of the way to the target, keeping its detail.

    The correction is (target − tile) at sub-cell resolution, smoothly upsampled (bilinear
    to half the output resolution, then doubled) and added to the tile pixels with
    saturation: at 100 % every sub-cell has the target's mean colour. All integer
    arithmetic, in place, in strips of rows; tile sizes that are not a whole number of
    sub-cells wide go through Pillow's resize (``_overlay_resized``).

    ``local``: a percent per sub-cell (``(H, W)`` ints, 0..100) used instead of ``percent``
    (``detail.local_overlay``); always two passes then, so the rounding does not depend on
    which percents a band happens to hold. ``cell``: sub-cells per cell side; the
    correction is then interpolated within each cell only, its edges repeated as the
    band's are. Across a tile border the tiles' colours jump, so a correction interpolated
    across it draws a ramp (a bevelled rim on every tile, strongest where neighbouring
    tiles differ most); within the cell, each tile's rim gets its own correction. (The
    general path, ``_overlay_resized``, for tile sizes that are not a multiple of the
    sub-cells, interpolates across borders as before.)
    """
    if percent <= 0:
        return out
    passes = 1 if percent <= 50 and local is None else 2  # each pass adds at most ±127
    amount: int | np.ndarray = percent if local is None else local[:, :, None]
    denominator = 100 * passes
    height, width = out.shape[:2]
    sub_h, sub_w = cells.shape[:2]
    factor, rest = divmod(height, sub_h)
    if rest or factor * sub_w != width:
        return _overlay_resized(out, _correction(cells, placed_sub, amount, denominator), passes)
    double = 2 if factor >= 4 and factor % 2 == 0 else 1  # rows and columns doubled at the end
    m = factor // double  # bilinear ×m from sub-cells to half (or full) resolution
    step = max(1, OVERLAY_BYTES // max(1, width * factor * 3))  # sub rows per strip
    for y in range(0, sub_h, step):
        end = min(sub_h, y + step)
        top, bottom = max(0, y - 1), min(sub_h, end + 1)  # one halo row each side
        part = amount[top:bottom] if isinstance(amount, np.ndarray) else amount  # an array when local is given
        shift = _correction(cells[top:bottom], placed_sub[top:bottom], part, denominator)
        before = shift[:1] if y == 0 else shift[:0]  # the band's edges repeat the edge row
        after = shift[-1:] if end == sub_h else shift[:0]
        padded = np.concatenate([before, shift, after])
        half = _upsample(padded, m, double, y, cell)  # (rows * m, W, 3) int8
        rows = half.shape[0]
        view = out[y * factor : end * factor].reshape(rows, double, width, 3)
        _saturating_add(view, half, passes)
    return out


def _correction(cells: np.ndarray, placed: np.ndarray, percent: int | np.ndarray, denominator: int) -> np.ndarray:
    """``round((cells − placed) · percent / denominator)`` as int16, within ±127."""
    diff = cells.astype(np.int32) - placed
    rounded = (2 * percent * diff + denominator) // (2 * denominator)
    return np.clip(rounded, -127, 127).astype(np.int16)


def _bilinear_weights(m: int) -> list[tuple[int, int, int]]:
    """Bilinear ×m (pixel centres aligned, as Pillow): per phase (self weight, neighbour weight, side)."""
    out = []
    for j in range(m):
        position = 2 * j + 1 - m  # offset of the phase from the source pixel centre, in 1/(2m)
        out.append((2 * m - abs(position), abs(position), -1 if position < 0 else 1))
    return out


def _upsample(padded: np.ndarray, m: int, double: int, first: int = 0, cell: int | None = None) -> np.ndarray:
    """Sub-cell rows (with one halo row above and below) -> the correction rows, int8.

    Bilinear ×m in both directions in exact integers (the weights of ×m have denominator
    2m), rounded once; then each column is repeated ``double`` times to the output width by
    one gather (the caller repeats the rows). Rows: ``rows * m``; width: ``sub_w * m * double``.
    """
    rows, sub_w = padded.shape[0] - 2, padded.shape[1]
    scale = 4 * m * m
    wide = np.int16 if 127 * scale + scale // 2 < 1 << 15 else np.int32
    vertical = np.empty((rows, m, sub_w, 3), wide)
    padded = padded.astype(wide, copy=False)
    body = padded[1:-1]
    above, below = padded[:-2], padded[2:]
    if cell is not None:  # a cell's first and last rows repeat themselves instead
        position = (first + np.arange(rows)) % cell
        above = padded[np.arange(rows) + (position == 0)]
        below = padded[np.arange(rows) + 2 - (position == cell - 1)]
    for j, (own, other, side) in enumerate(_bilinear_weights(m)):
        neighbour = above if side < 0 else below
        np.multiply(body, own, out=vertical[:, j])
        vertical[:, j] += neighbour * wide(other)
    vertical = vertical.reshape(rows * m, sub_w, 3)
    left = np.concatenate([vertical[:, :1], vertical[:, :-1]], axis=1)
    right = np.concatenate([vertical[:, 1:], vertical[:, -1:]], axis=1)
    if cell is not None:  # a cell's first and last columns repeat themselves instead
        left[:, ::cell] = vertical[:, ::cell]
        right[:, cell - 1 :: cell] = vertical[:, cell - 1 :: cell]
    phases = np.empty((rows * m, m, sub_w, 3), np.int8)
    for j, (own, other, side) in enumerate(_bilinear_weights(m)):
        total = vertical * wide(own)
        np.add(total, (left if side < 0 else right) * wide(other), out=total)  # +=, which numpy's stubs misjudge
        total += scale // 2
        if scale & (scale - 1) == 0:
            np.right_shift(total, scale.bit_length() - 1, out=total)
        else:
            np.floor_divide(total, scale, out=total)
        phases[:, j] = total
    flat = phases.reshape(rows * m, m * sub_w * 3)
    index = _output_columns(sub_w, m, double)
    out = np.empty((rows * m, index.size), np.int8)
    np.take(flat, index, axis=1, out=out, mode="clip")  # "clip": no bounds check (none can fail)
    return out.reshape(rows * m, -1, 3)


_COLUMN_CACHE: dict[tuple[int, int, int], np.ndarray] = {}


def _output_columns(sub_w: int, m: int, double: int) -> np.ndarray:
    """For each output byte of a row: where it is in the (phase, sub column, channel) layout."""
    key = (sub_w, m, double)
    index = _COLUMN_CACHE.get(key)
    if index is None:
        half = np.arange(sub_w * m * double) // double  # output column -> upsampled column
        source = (half % m) * sub_w + half // m  # phase block, then sub column
        index = (source[:, None] * 3 + np.arange(3)[None, :]).ravel().astype(np.intp)
        if len(_COLUMN_CACHE) > 16:
            _COLUMN_CACHE.clear()
        _COLUMN_CACHE[key] = index
    return index


def _saturating_add(view: np.ndarray, shift: np.ndarray, passes: int) -> None:
    """``view = clip(view + shift, 0, 255)`` in uint8, ``passes`` times; ``shift`` int8 is broadcast.

    Saturation by clamping first: ``max(v, −s)`` where s < 0 and ``min(v, 255 − s)`` where
    s > 0, then a wrapping add that can no longer wrap. ``view`` may have a broadcast axis 1.
    """
    zero = np.zeros(shift.shape[-2:], np.int8)  # an array, not a scalar: NumPy's SIMD loops
    negative = np.maximum(np.negative(shift), zero).view(np.uint8)
    ceiling = np.invert(np.maximum(shift, zero).view(np.uint8))
    wrapping = shift.view(np.uint8)
    if view.ndim == shift.ndim + 1:
        negative, ceiling, wrapping = negative[:, None], ceiling[:, None], wrapping[:, None]
    for _ in range(passes):
        np.maximum(view, negative, out=view)
        np.minimum(view, ceiling, out=view)
        np.add(view, wrapping, out=view)


def _overlay_resized(out: np.ndarray, shift: np.ndarray, passes: int) -> np.ndarray:
    """The general case: Pillow's bilinear resize of the correction straight to the output size."""
    height, width = out.shape[:2]
    image = Image.fromarray((shift + 128).astype(np.uint8))
    if image.size != (width, height):
        image = image.resize((width, height), Image.Resampling.BILINEAR)
    full = (np.asarray(image) ^ np.uint8(128)).view(np.int8)  # u − 128 in two's complement
    _saturating_add(out, full, passes)
    return out
