"""The correction's colour budget: a tile's hue and saturation move at most what is left of
``budget(percent)`` ΔE00 after its lightness move, and ΔE00 itself is the published formula."""

from __future__ import annotations

import numpy as np
import pytest

from mosaic.colour_difference import chroma_difference, ciede2000
from mosaic.correction import BUDGET, budget, offsets, tile_colours, within_budget
from mosaic.signatures import srgb_to_lab

# Pairs and ΔE00 from Sharma, Wu and Dalal's test data for CIEDE2000 (2005), table 1.
SHARMA = [
    ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
    ((50.0, -1.0, 2.0), (50.0, 0.0, 0.0), 2.3669),
    ((50.0, 2.49, -0.001), (50.0, -2.49, 0.0011), 7.2195),
    ((50.0, 2.5, 0.0), (56.0, -27.0, -3.0), 31.9030),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ((22.7233, 20.0904, -46.6940), (23.0331, 14.9730, -42.5619), 2.0373),
    ((2.0776, 0.0795, -1.1350), (0.9033, -0.0636, -0.5514), 0.9082),
]


@pytest.mark.parametrize(("first", "second", "expected"), SHARMA)
def test_ciede2000_is_the_published_formula(first: tuple, second: tuple, expected: float) -> None:
    assert ciede2000(np.array(first), np.array(second)) == pytest.approx(expected, abs=1e-4)
    assert ciede2000(np.array(second), np.array(first)) == pytest.approx(expected, abs=1e-4)


def test_ciede2000_agrees_with_scikit_image_on_random_colours() -> None:
    from skimage.color import deltaE_ciede2000

    rng = np.random.default_rng(7)
    first = np.c_[rng.uniform(0, 100, 5000), rng.uniform(-100, 100, (5000, 2))]
    second = first + rng.normal(0, 8, first.shape)
    assert np.allclose(ciede2000(first, second), deltaE_ciede2000(first, second), atol=1e-9)


def test_the_chroma_part_is_ciede2000_of_colours_of_one_lightness() -> None:
    """The budget's fast path: float32, no hue angles, yet the published formula's value, also
    for grey, near-grey, far and nearly opposite hues."""
    rng = np.random.default_rng(11)
    first = np.c_[rng.uniform(0, 100, 6000), rng.uniform(-110, 110, (6000, 2))]
    first[:500, 1:] = 0  # grey
    first[500:1500, 1:] *= 0.02  # near grey
    second = np.concatenate(
        [
            first[:2000] + rng.normal(0, 6, (2000, 3)),
            first[2000:4000] * [1, -1, -1] * rng.uniform(0.2, 1.5, (2000, 1)) + rng.normal(0, 1, (2000, 3)),
            np.c_[first[4000:, 0], rng.uniform(-110, 110, (2000, 2))],
        ]
    )
    second[:, 0] = first[:, 0]
    fast = chroma_difference(first[:, 1:], second[:, 1:])
    assert fast.dtype == np.float32
    assert np.allclose(fast, ciede2000(first, second), rtol=2e-5, atol=1e-4)


def _random_pairs(seed: int, share: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    start = srgb_to_lab(rng.integers(0, 256, (4000, 3)).astype(np.uint8))
    target = srgb_to_lab(rng.integers(0, 256, (4000, 3)).astype(np.uint8))
    return start, start + share * (target - start)


def test_the_budget_cuts_chroma_only_and_keeps_every_lightness_move() -> None:
    start, goal = _random_pairs(3, 0.3)
    pulled = within_budget(start, goal, BUDGET)
    assert np.array_equal(pulled[:, 0], goal[:, 0])  # lightness: whole
    moved = ciede2000(start, pulled)
    within = ciede2000(start, goal) <= BUDGET
    assert np.array_equal(pulled[within], goal[within])  # a move within budget is untouched
    lightness_alone = ciede2000(start, start + (goal - start) * [1, 0, 0])
    fits = ~within & (lightness_alone < BUDGET)
    assert fits.sum() > 100 and np.percentile(moved[fits], 99) <= BUDGET + 0.02
    assert (moved[fits] >= lightness_alone[fits] - 1e-9).all()
    # The chroma kept points the same way as the goal's, only shorter.
    chroma, wanted = (pulled - start)[:, 1:], (goal - start)[:, 1:]
    cross = chroma[:, 0] * wanted[:, 1] - chroma[:, 1] * wanted[:, 0]
    assert np.allclose(cross, 0, atol=1e-6) and ((chroma * wanted).sum(axis=1) >= -1e-9).all()
    over = lightness_alone >= BUDGET  # lightness alone is over: the tile keeps its own chroma
    assert over.any() and np.allclose(pulled[over, 1:], start[over, 1:])


def test_the_budget_grows_with_the_correction_and_is_gone_at_100() -> None:
    assert budget(50) == BUDGET
    assert budget(25) < budget(50) < budget(75) < budget(99)
    assert budget(100) == float("inf")


def test_a_tile_far_from_its_cell_moves_its_colour_no_more_than_the_budget() -> None:
    """A grey tile in a deep-blue cell of about its lightness (a sky the library has no photo
    for): halfway would be about 17 ΔE00 of colour; the tile stays nearly grey."""
    tile = np.full((1, 8, 8, 3), 110, np.uint8)
    tile[0, ::2] = 100  # some structure, far from clipping
    means, low, high = tile_colours(tile)
    blue = np.array([[30, 100, 200]], np.uint8)
    shift = offsets(blue, means, low, high, 50)
    start = srgb_to_lab(means.astype(np.uint8))
    halfway = start + 0.5 * (srgb_to_lab(blue) - start)
    assert ciede2000(start, halfway)[0] > 3 * BUDGET
    moved = ciede2000(start, srgb_to_lab((means + shift).astype(np.uint8)))
    assert BUDGET - 1 <= moved[0] <= BUDGET + 0.6  # + the 8-bit rounding of the offset
    assert shift[0, 2] > shift[0, 0]  # toward blue, only a little


def _first_crossing(start: np.ndarray, goal: np.ndarray, limit: float) -> np.ndarray:
    """Brute force: the smallest share of each chroma move whose ΔE00 (float64) is over
    ``limit`` (1 if none): a scan of 101 shares, then 40 halvings."""
    move = (goal - start) * [0, 1, 1]
    base = start + (goal - start) * [1, 0, 0]
    shares = np.linspace(0, 1, 101)
    over = np.stack([ciede2000(start, base + s * move) > limit for s in shares])
    high = np.where(over.any(axis=0), shares[over.argmax(axis=0)], 1.0)
    low = np.maximum(high - shares[1], 0)
    for _ in range(40):
        mid = (low + high) / 2
        fits = ciede2000(start, base + mid[:, None] * move) <= limit
        low, high = np.where(fits, mid, low), np.where(fits, high, mid)
    return np.where(over.any(axis=0), low, 1.0)


@pytest.mark.parametrize("limit", [budget(25), BUDGET, budget(75)])
@pytest.mark.parametrize("through_grey", [False, True])
def test_the_budget_lands_where_brute_force_finds_it(limit: float, through_grey: bool) -> None:
    """Each chroma move ends within 0.02 of its share a fine search finds, never more than
    0.02 ΔE00 over the budget: also for moves through grey, where the hue turns fast."""
    rng = np.random.default_rng(int(limit * 10) + through_grey)
    start = np.c_[rng.uniform(5, 95, 1500), rng.normal(0, 25, (1500, 2))]
    if through_grey:
        chroma = -start[:, 1:] * rng.uniform(0.3, 3, (1500, 1)) + rng.normal(0, 2, (1500, 2))
    else:
        chroma = rng.normal(0, 40, (1500, 2))
    goal = np.c_[start[:, 0] + rng.normal(0, limit / 2, 1500), chroma]
    pulled = within_budget(start, goal, limit)
    assert np.array_equal(pulled[:, 0], goal[:, 0])
    wanted, kept = (goal - start)[:, 1:], (pulled - start)[:, 1:]
    share = (kept * wanted).sum(axis=1) / (wanted * wanted).sum(axis=1)
    free = ciede2000(start, start + (goal - start) * [1, 0, 0]) < limit
    assert free.sum() > 1000 and (ciede2000(start, goal)[free] > limit).sum() > 500
    assert ciede2000(start, pulled)[free].max() <= limit + 0.02
    assert np.abs(share - _first_crossing(start, goal, limit))[free].max() <= 0.02
    assert np.allclose(share[~free], 0)
