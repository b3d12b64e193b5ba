"""mosaic.print_planner: paper -> grid -> paper round-trips, and known prints."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mosaic.print_planner import paper_for_grid, plan_for_paper


def test_a_metre_wide_print_at_300_dpi() -> None:
    plan = plan_for_paper(100.0, 300, 32)
    assert plan.tiles_across == 369  # 100 / 2.54 * 300 = 11811 px -> 369.1 tiles of 32
    assert plan.width_px == 11808
    assert plan.width_cm == pytest.approx(99.97, abs=0.01)


@given(st.integers(1, 5000), st.integers(1, 64), st.integers(50, 1200))
def test_grid_to_paper_to_grid_round_trips(tiles: int, tile_size: int, dpi: int) -> None:
    paper = paper_for_grid(tiles, tile_size, dpi)
    assert plan_for_paper(paper.width_cm, dpi, tile_size).tiles_across == tiles


@given(st.floats(1.0, 500.0), st.integers(1, 64), st.integers(50, 1200))
def test_paper_to_grid_is_within_half_a_tile(width_cm: float, tile_size: int, dpi: int) -> None:
    plan = plan_for_paper(width_cm, dpi, tile_size)
    wanted_px = width_cm / 2.54 * dpi
    assert abs(plan.width_px - wanted_px) <= tile_size / 2 + 1e-6 or plan.tiles_across == 1


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        plan_for_paper(0, 300, 16)
    with pytest.raises(ValueError, match="positive"):
        paper_for_grid(10, 16, 0)
