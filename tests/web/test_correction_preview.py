"""The create page's "tiles ↔ photo" examples tint a tile as the engine does: the JavaScript port
(``webapp/static/correction.js``) run in a real Chromium against ``mosaic.correction.offsets``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mosaic.correction import offsets

pytestmark = [pytest.mark.browser]

TINT = Path(__file__).resolve().parents[2] / "webapp" / "static" / "correction.js"


def test_the_preview_tints_a_tile_as_the_engine_does(browser_context: Any) -> None:
    rng = np.random.default_rng(11)
    means = rng.integers(0, 256, (300, 3)).astype(np.int32)
    cells = rng.integers(0, 256, (300, 3)).astype(np.uint8)
    cells[:60] = np.clip(means[:60] + rng.integers(-12, 13, (60, 3)), 0, 255)  # near: within budget
    unbounded = np.full((300, 3), 255, np.int32)  # no clip allowance: the bare move
    page = browser_context.new_page()
    page.goto("about:blank")
    page.add_script_tag(path=str(TINT))
    for percent in (0, 25, 50, 75, 100):
        engine = offsets(cells, means, -unbounded, unbounded, percent)
        preview = np.array(
            page.evaluate(
                "([means, cells, percent]) => means.map((m, i) => PMCorrection.offset(m, cells[i], percent))",
                [means.tolist(), cells.tolist(), percent],
            )
        )
        differ = np.abs(preview - engine)
        assert differ.max() <= 1, f"at {percent} %: the preview is {differ.max()} off the engine"
        assert (differ == 0).mean() >= 0.95, f"at {percent} %: rounding differs on too many channels"
