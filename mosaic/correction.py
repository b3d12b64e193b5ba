"""Whole-tile colour correction: each placed tile moved as one piece toward its cell's colour.

A photomosaic promises two things: from afar the target, up close every cell a real
photograph. Painting the target over the tiles (``overlay``) keeps only the
first. This correction keeps both: every pixel of a placed tile gets the same offset, so
its layout and its contrast are the photo's own, and only its mean colour moves.

The move is made in CIELAB, where distance follows perceived colour difference: the
tile's mean lightness (L*) goes ``LIGHTNESS`` × ``percent`` % of the way to its cell's
mean (at most all the way), its mean chroma (a*, b*) ``percent`` %, but the chroma only
as far as a budget allows: the whole move stays within ``budget(percent)`` ΔE00 (``BUDGET``,
4.5, at the default 50 %), lightness kept whole (``within_budget``). The sRGB offset
between the tile's mean and that colour is added to every pixel (gamma-encoded sRGB, where
a uniform offset keeps the tile's luma layout exactly).

Why lightness and chroma differ. From afar the eye reads the photo's structure from
lightness, so it moves furthest (measured at 50 %: moving lightness 87.5 % instead of 50 %
raised SSIM at the cell grid from below a repeating program's to above it), and a tile made
darker or lighter is still the same photograph. Hue and saturation are what up close says
"recoloured", and where the library has no tile near a cell's colour they are what would
move far: a deep-blue night sky rendered from a library with no blue photos moved its
tiles 8.7 ΔE00 halfway (the median), tinted copies rather than photos. The budget keeps
the median tile within 5 ΔE00 of its photograph there too; cutting lightness instead, or
the whole move along its line, lost the far structure to a program that repeats one tile
(``docs/engine.md``).

The offset is bounded per channel by the tile's own range (its ``TAIL``-th darkest and
brightest pixels), so at most a sliver of highlights or shadows clips: a bright tile in a
black cell stops where it would lose its highlights, and the matcher prefers tiles that fit
(``signatures``: the cost of a candidate counts what the correction cannot fix). Where the
range stops it short, the default render (``reach``, ``contract``) also narrows the tile's
contrast around its mean, by a gain of at least ``GAIN_FLOOR``, to make room: a tile keeps
nine tenths of its contrast (0.91 before the 8-bit rounding and the clipped tail, which take
about a hundredth) and all of its layout, and a pale sky or a dark room built from a library
with few pale or dark photos comes out even instead of speckled (``docs/engine.md``).

Where the tiles of an even patch of the photo would each stop at their own distance from
its colour, ``levelling`` gives them one lightness goal, read from the patch's cells within
the rows painted together. Everything else reads only the cell's own pixels and its tile,
and the Lab round trip is lookup tables and elementwise arithmetic: a band corrected alone
equals the band within the whole render.
"""

from __future__ import annotations

import math

import numpy as np

from .colour_difference import BLOCK, chroma_difference
from .grid import block_sums
from .overlay import _saturating_add
from .signatures import SUB, lab_to_srgb, srgb_to_lab

LIGHTNESS = 1.75  # lightness moves this many times ``percent`` (at most all the way), chroma ``percent``
TAIL = 0.03  # share of a tile's pixels per side that may clip under the offset
BUDGET = 4.5  # ΔE00 a tile's mean colour may move at the default 50 %: its own colours, seen side by side
GAIN_FLOOR = 0.91  # the least share of its contrast a tile keeps to reach further: 0.9 once rounded and clipped
FLAT = 4.0  # luma spread (std) below which a tile is not narrowed: it frees little, its 8-bit rounding would show
SLACK = 0.01  # ΔE00 a chroma move may end above the budget before it is bisected onto it
SETTLED = 0.005  # a chroma move may end this share of its whole chroma ΔE00 short of the budget before it is bisected
CORRECT_BYTES = 1 << 20  # output bytes corrected per step: the strip stays in cache


def tile_colours(tiles: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tile: its mean colour ``(N, 3) int32`` (rounded half up), and the lowest and
    highest offset ``(N, 3) int32`` each channel takes before more than ``TAIL`` of its
    pixels clip."""
    n = tiles.shape[0]
    flat = tiles.reshape(n, -1, 3)
    count = flat.shape[1]
    means = (2 * flat.astype(np.int64).sum(axis=1) + count) // (2 * count)
    k = int(TAIL * count)
    ordered = np.partition(flat, (k, count - 1 - k), axis=1)
    low = -ordered[:, k].astype(np.int32)
    high = 255 - ordered[:, count - 1 - k].astype(np.int32)
    return means.astype(np.int32), low, high


def cell_means(image: np.ndarray) -> np.ndarray:
    """A cell image (``SUB`` pixels per cell) -> each cell's mean colour, ``(cells, 3) uint8``
    rounded half up, row by row. The integer sums are taken as rows of pixels, not cell by cell
    (the same sums at a fraction of the cost: 2 ms instead of 17 ms for a 12 MP part at tile 8)."""
    total = block_sums(image.astype(np.uint16), SUB).reshape(-1, 3)  # a cell's sum is at most 16 x 255
    count = SUB * SUB
    return ((2 * total + count) // (2 * count)).astype(np.uint8)


def offsets(
    targets: np.ndarray,
    means: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    percent: int,
    lightness: np.ndarray | None = None,
) -> np.ndarray:
    """``(n, 3) int16``: the offset of each placed tile.

    ``targets``: each cell's mean colour ``(n, 3) uint8``; ``means``, ``low``, ``high``:
    its tile's (``tile_colours``, gathered by the choice); ``lightness``: an L* goal per tile
    in place of its own (``levelling``).
    """
    return np.clip(wanted(targets, means, percent, lightness), low, high).astype(np.int16)


def luma_spread(tiles: np.ndarray) -> np.ndarray:
    """``(N,) float32``: the standard deviation of each tile's luma (Rec. 601), a chunk of
    tiles at a time (a float copy of a large library at tile 64 would take gigabytes)."""
    flat = tiles.reshape(tiles.shape[0], tiles.shape[1] * tiles.shape[2], 3)
    weights = np.array([0.299, 0.587, 0.114], np.float32)
    step = max(1, CORRECT_BYTES // (flat.shape[1] * 3 * 4))
    return np.concatenate(
        [(flat[i : i + step].astype(np.float32) @ weights).std(axis=1) for i in range(0, len(flat), step)]
        or [np.zeros(0, np.float32)]
    )


def reach(
    targets: np.ndarray,
    means: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    spread: np.ndarray,
    percent: int,
    lightness: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``offsets`` where a tile whose range stops it short narrows its contrast to go on.

    Returns the offsets ``(n, 3) int16`` and each tile's gain ``(n,) float32``: 1 where the
    offset fits the tile's range, else the gain (at least ``GAIN_FLOOR``) around the tile's
    mean that leaves room for it, in the channel that needs the most (one gain for all three,
    so the tile's colours keep their relations). ``contract`` applies the gain, ``add_shift``
    the offset, bounded now by the narrowed range. ``spread``: each tile's ``luma_spread``;
    a tile under ``FLAT`` keeps gain 1 (rounding a nearly flat tile to 8 bits after a gain
    would blur the little layout it has: its luma correlation with the source would fall
    under 0.99). ``lightness``: an L* goal per tile in place of its own (``levelling``).
    """
    want = wanted(targets, means, percent, lightness)
    mean = means.astype(np.float64)
    above = np.maximum(255 - high - mean, 0)  # from the mean up to the bright tail
    below = np.maximum(mean + low, 0)  # from the mean down to the dark tail
    # a gain g frees (1 - g) of the way from the mean to each tail
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where((want > high) & (above > 0), 1 - (want - high) / above, 1.0)
        down = np.where((want < low) & (below > 0), 1 - (low - want) / below, 1.0)
    gain = np.clip(np.minimum(up, down).min(axis=1), GAIN_FLOOR, 1.0).astype(np.float32)
    gain[spread < FLAT] = 1
    freed = 1 - gain.astype(np.float64)[:, None]
    shift = np.clip(want, low - np.floor(freed * below), high + np.floor(freed * above)).astype(np.int16)
    gain[(shift == np.clip(want, low, high)).all(axis=1)] = 1  # a gain that frees no level only rounds the tile
    return shift, gain


def wanted(targets: np.ndarray, means: np.ndarray, percent: int, lightness: np.ndarray | None = None) -> np.ndarray:
    """``(n, 3) int32``: the offsets that move each tile's mean where the correction takes it,
    before its range bounds them. ``lightness`` (L* per tile), where given, replaces the
    lightness it would take; the chroma stays the one it would take, cut only if the whole move
    would then be over the budget."""
    if percent <= 0:
        return np.zeros(targets.shape, np.int32)
    start = srgb_to_lab(means.astype(np.uint8))
    share = np.array([min(1.0, LIGHTNESS * percent / 100.0), percent / 100.0, percent / 100.0])
    goal = within_budget(start, start + share * (srgb_to_lab(targets) - start), budget(percent))
    if lightness is not None:
        goal[:, 0] = lightness
        goal = within_budget(start, goal, budget(percent))
    return lab_to_srgb(goal).astype(np.int32) - means


def budget(percent: int) -> float:
    """The most (ΔE00) a tile's mean colour moves at ``percent``: ``BUDGET`` at 50 %, a third
    of it at 25 %, three times at 75 %, no limit at 100 % (the photo wins)."""
    return math.inf if percent >= 100 else BUDGET * percent / (100 - percent)


def within_budget(start: np.ndarray, goal: np.ndarray, limit: float) -> np.ndarray:
    """``goal`` ``(n, 3)`` Lab with each row's chroma move (a*, b*) cut so that the whole move
    from ``start`` is at most ``limit`` ΔE00, its lightness move kept whole.

    Lightness is the photo's structure seen from afar and a tile darkened or lightened is
    still the same photograph: cutting it (tried) lost the structure SSIM reads at the cell
    grid to a program that repeats one tile. Hue and saturation are what up close says
    "recoloured", and where the library has no tile near a cell's colour (a deep-blue sky
    from a library without blue photos) they are what would move far: the budget keeps
    them. A tile whose lightness move alone is over the budget keeps its own chroma.

    ΔE00² is the lightness term² plus a chroma-and-hue part² that does not depend on L*
    (``chroma_difference``), so the chroma may spend ``√(limit² - lightness term²)`` of that
    part, and rows whose lightness spends it all need no ΔE00 at all.
    """
    pulled = goal.copy()
    if not len(start):
        return pulled
    found = [_over_budget(start, goal, pulled, limit, slice(i, i + BLOCK)) for i in range(0, len(start), BLOCK)]
    rows, whole, alone = (np.concatenate(part) for part in zip(*found))
    if rows.size:
        ab = np.take(start, rows, axis=0)[:, 1:]
        chroma = np.take(goal, rows, axis=0)[:, 1:] - ab
        ceiling = np.sqrt((limit + SLACK) ** 2 - alone**2)
        share = _chroma_share(ab, chroma, whole, np.sqrt(limit**2 - alone**2), ceiling)
        for k in (1, 2):  # a column at a time: indexing whole rows costs more
            pulled[rows, k] = ab[:, k - 1] + share * chroma[:, k - 1]
    return pulled


def _over_budget(
    start: np.ndarray, goal: np.ndarray, pulled: np.ndarray, limit: float, block: slice
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For one ``block`` of rows (its temporaries stay in cache): the chroma kept where the
    lightness move alone spends the budget (written to ``pulled``), and the rows whose whole
    move is over it, with their chroma part of ΔE00 and their lightness term."""
    start, goal, pulled = start[block], goal[block], pulled[block]
    alone = _lightness_difference(start[:, 0], goal[:, 0] - start[:, 0])
    spent = np.flatnonzero(alone >= limit)
    for k in (1, 2):
        pulled[spent, k] = start[spent, k]
    free = np.flatnonzero(alone < limit)
    whole = chroma_difference(np.take(start, free, axis=0)[:, 1:], np.take(goal, free, axis=0)[:, 1:])
    over = whole > np.sqrt(limit**2 - alone[free] ** 2)
    return block.start + free[over], whole[over], alone[free[over]]


def _chroma_share(
    ab: np.ndarray, chroma: np.ndarray, whole: np.ndarray, spare: np.ndarray, ceiling: np.ndarray
) -> np.ndarray:
    """The share ``s`` of each ``chroma`` move from ``ab`` whose chroma part of ΔE00 is ``spare``
    (``whole`` at ``s = 1``; 0 at ``s = 0``), not above ``ceiling``.

    The part grows nearly in proportion to ``s``: a first guess ``spare / whole``, then the
    root of ``s (p + q s)`` through it and ``s = 1``, then one check. Rows the check finds
    above ``ceiling`` or more than ``SETTLED`` of a share below (large moves, moves through
    grey) are bisected between the shares known to fit and to be over.
    """
    first = spare / whole
    at = chroma_difference(ab, ab + first[:, None] * chroma)
    q = (whole - at / first) / np.maximum(1 - first, 1e-9)
    p = whole - q
    root = 2 * spare / np.maximum(p + np.sqrt(np.maximum(p * p + 4 * q * spare, 0)), 1e-9)
    share = np.clip(root, 0, 1)
    now = chroma_difference(ab, ab + share[:, None] * chroma)
    astray = np.flatnonzero((now > ceiling) | (now < spare - SETTLED * whole))
    if astray.size:
        guesses = np.stack([first[astray], share[astray]])
        fits = np.stack([at[astray], now[astray]]) <= spare[astray]
        low = np.where(fits, guesses, 0.0).max(axis=0)
        high = np.where(fits, 1.0, guesses).min(axis=0)
        share[astray] = _bisect(ab[astray], chroma[astray], spare[astray], low, high)
    return share


def _bisect(ab: np.ndarray, chroma: np.ndarray, spare: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """A share ``s`` of ``chroma`` in ``[low, high]`` (to 2⁻¹⁴) whose chroma part is within
    ``spare``, ``low``'s being within and ``high``'s over."""
    for _ in range(14):
        mid = (low + high) / 2
        fits = chroma_difference(ab, ab + mid[:, None] * chroma) <= spare
        low, high = np.where(fits, mid, low), np.where(fits, high, mid)
    return low


def _lightness_difference(lightness: np.ndarray, move: np.ndarray) -> np.ndarray:
    """ΔE00 of a lightness move alone (chroma and hue kept): ``|ΔL| / S_L``."""
    mean = lightness + move / 2 - 50
    return np.abs(move) / (1 + 0.015 * mean**2 / np.sqrt(20 + mean**2))


def offsets_rgb(targets: np.ndarray, means: np.ndarray, low: np.ndarray, high: np.ndarray, percent: int) -> np.ndarray:
    """``offsets`` interpolated in sRGB, in exact integers: for tiles of 1–3 pixels (up to
    40 M cells, no layout to keep), where a Lab round trip per cell would cost seconds."""
    diff = targets.astype(np.int32) - means
    shift = (2 * percent * diff + 100) // 200
    return np.clip(shift, low, high).astype(np.int16)


def add_shift(out: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """Move each cell of a composed mosaic ``out`` by its ``shift`` (``(rows, cols, 3)``), in place.

    Saturating uint8 adds of one row of offsets per cell row, repeated to the tile width
    and broadcast over the tile's rows (``overlay._saturating_add``): no int16 copy of the
    mosaic. Offsets beyond ±127 (only at high corrections) take more passes.
    """
    rows, cols = shift.shape[:2]
    s = out.shape[0] // rows
    step = max(1, CORRECT_BYTES // max(1, cols * s * s * 3))
    for r in range(0, rows, step):
        rest = shift[r : r + step].astype(np.int16)
        view = out[r * s : (r + rest.shape[0]) * s].reshape(rest.shape[0], s, cols * s, 3)
        while rest.any():  # one pass at the default; each adds at most ±127
            amount = np.clip(rest, -127, 127)
            _saturating_add(view, np.repeat(amount.astype(np.int8), s, axis=1), 1)
            rest = rest - amount
    return out


def contract(out: np.ndarray, gain: np.ndarray, means: np.ndarray) -> np.ndarray:
    """Narrow each cell of a composed mosaic ``out`` toward its tile's mean ``(rows, cols, 3)``
    by its ``gain`` ``(rows, cols)``, in place; cells at gain 1 are not touched.

    Only the cells that need it are read (a few in most photos), a chunk at a time.
    """
    rows, cols = gain.shape
    s = out.shape[0] // rows
    view = out.reshape(rows, s, cols, s, 3)
    r, c = np.nonzero(gain < 1)
    step = max(1, CORRECT_BYTES // (s * s * 3 * 4))
    for i in range(0, r.size, step):
        rr, cc = r[i : i + step], c[i : i + step]
        mean = means[rr, cc].astype(np.float32)[:, None, None, :]
        g = gain[rr, cc][:, None, None, None]
        view[rr, :, cc] = np.rint(mean + g * (view[rr, :, cc] - mean)).astype(np.uint8)
    return out


def shift_sub_cells(sub: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """The placed tiles' sub-cells ``(n, SUB, SUB, 3) uint8`` moved by their offsets ``(n, 3)``."""
    moved = sub.astype(np.int16) + shift[:, None, None, :]
    return np.clip(moved, 0, 255).astype(np.uint8)
