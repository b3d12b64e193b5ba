"""The print planner API: paper to grid and back, its refusals, and agreement with the engine."""

from __future__ import annotations

from typing import Any

import pytest

from mosaic.print_planner import plan_for_paper


def test_paper_to_grid_and_back(client: Any) -> None:
    # 1 m wide at 300 DPI with 16 px tiles: 11,811 px, 738 tiles (11,808 px, 99.97 cm), each tile
    # 16 / 300 inch = 1.35 mm (a large cell of 4 tiles, 5.4 mm).
    paper = client.get("/api/print-plan/for-paper?tile_size=16&dpi=300&width_cm=100").json
    assert paper == {
        "tiles_across": 738,
        "tile_size": 16,
        "dpi": 300,
        "width_px": 11808,
        "width_cm": 99.97,
        "tile_mm": 1.4,
    }
    assert paper["tiles_across"] == plan_for_paper(100, 300, 16).tiles_across
    back = client.get(f"/api/print-plan/for-grid?tile_size=16&dpi=300&tiles_across={paper['tiles_across']}").json
    assert back == paper  # the round trip: the grid prints at the width that planned it
    a4 = client.get("/api/print-plan/for-paper?tile_size=8&dpi=150&width_cm=21").json
    assert a4["tiles_across"] == round(21 / 2.54 * 150 / 8) == 155


@pytest.mark.parametrize(
    "query, status",
    [
        ("for-paper?tile_size=16&dpi=300", 400),  # no width
        ("for-grid?tile_size=16&dpi=300", 400),  # no grid
        ("for-grid?tile_size=16&dpi=300&tiles_across=0", 400),
        ("for-grid?tile_size=16&dpi=300&tiles_across=10001", 400),
        ("for-paper?tile_size=16&dpi=300&width_cm=0", 400),
        ("for-paper?tile_size=16&dpi=300&width_cm=nan", 400),
        ("for-paper?tile_size=16&dpi=300&width_cm=ten", 400),
        ("for-paper?tile_size=65&dpi=300&width_cm=10", 400),
        ("for-paper?tile_size=16&dpi=0&width_cm=10", 400),
        ("for-paper?tile_size=1&dpi=2400&width_cm=1000", 422),  # 944,882 tiles across: over the grid limit
    ],
)
def test_bad_requests_get_a_clear_error(client: Any, query: str, status: int) -> None:
    answer = client.get(f"/api/print-plan/{query}")
    assert answer.status_code == status and set(answer.json) == {"error", "detail"}, answer.json
