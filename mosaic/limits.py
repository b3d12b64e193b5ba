"""The engine's limits: the one home of each number (``dal.config.Settings`` defaults to these).

Callers may pass tighter or looser limits explicitly; the engine never reads configuration.
"""

from __future__ import annotations

MAX_TILE_SIZE = 64  # library tiles are stored at 64 px; larger tiles would be upscaled blur
DEFAULT_MAX_OUTPUT_PIXELS = 40_000_000  # a 35 x 25 cm print at 300 DPI
DEFAULT_MAX_INPUT_PIXELS = 60_000_000  # decoded before any check would be a decompression bomb
