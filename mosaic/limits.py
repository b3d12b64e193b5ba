"""The engine's limits: the one home of each number (``dal.config.Settings`` defaults to these).

Callers may pass tighter or looser limits explicitly; the engine never reads configuration.
"""

from __future__ import annotations

MAX_TILE_SIZE = 64  # library tiles are stored at 64 px; larger tiles would be upscaled blur
# The largest mosaic asked for explicitly (tiles across): a 1 m x 70 cm print at 300 DPI. No
# role holds it whole: processors render bands of at most MAX_SLICE_PIXELS, the controller
# stitches through libvips from disk (workers.stitching).
DEFAULT_MAX_OUTPUT_PIXELS = 400_000_000
# The size chosen when none is asked for (no tiles across): a 35 x 25 cm print at 300 DPI.
# Defaults are the product: a photo dropped with default settings must come back fast.
DEFAULT_AUTO_OUTPUT_PIXELS = 40_000_000
# The most output pixels one slice may hold (a processor's band: 150 MB of pixels); a bigger
# job gets more slices than asked for (``mosaic.grid.min_slices``).
MAX_SLICE_PIXELS = 50_000_000
# The most cells a "each tile at most N times" (max_uses) job may have: the fair assignment is
# one min-cost flow over cells x K arcs in one process (``mosaic.fair``). At 200,000 cells it
# took 19 s and 1.0 GB (K = 16); a 400 MP grid of 8 px tiles (6 million cells) would need
# tens of GB. The default 40 MP mosaic at 16 px tiles has 156,000 cells and fits.
MAX_FAIR_CELLS = 200_000
# The most cells a "use every photo" job may have: its whole grid is chosen in one process (the
# controller), around the pins (``mosaic.cover``). The default 40 MP mosaic at 8 px tiles has
# 625,000 cells; 2 million is a 128 MP mosaic at 8 px.
MAX_COVER_CELLS = 2_000_000
DEFAULT_MAX_INPUT_PIXELS = 60_000_000  # decoded before any check would be a decompression bomb
# The most pixels a side the encoders write: libjpeg's JPEG_MAX_DIMENSION (65,500, not the
# format's 65,535; libvips and Pillow both use libjpeg) and libwebp's 16,383.
JPEG_MAX_SIDE = 65_500
WEBP_MAX_SIDE = 16_383
