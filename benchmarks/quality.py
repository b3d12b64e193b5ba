"""The two quality scores of the engine benchmark, the same for every implementation.

- colour: mean CIEDE2000 between the cell-averaged mosaic and the cell-averaged target
  (lower is better): does each cell have the right colour?
- structure: SSIM of the luminance at a quarter of the output resolution (higher is
  better): do edges and gradients inside cells follow the photo?
The target is first resampled to the mosaic's size (some programs round the size up).
"""

from __future__ import annotations

import numpy as np
from PIL import Image


def scores(mosaic: np.ndarray, target: Image.Image, tile_size: int) -> tuple[float, float]:
    """``(mean ΔE00 at cell resolution, SSIM at ¼ resolution)`` of ``mosaic`` against ``target``."""
    from skimage.color import deltaE_ciede2000, rgb2lab
    from skimage.metrics import structural_similarity

    height, width = mosaic.shape[:2]
    reference = target.convert("RGB")
    if reference.size != (width, height):
        reference = reference.resize((width, height), Image.Resampling.LANCZOS)
    rows, cols = height // tile_size, width // tile_size
    box = (0, 0, cols * tile_size, rows * tile_size)
    mosaic_image = Image.fromarray(mosaic)
    m_cells = np.asarray(mosaic_image.crop(box).reduce(tile_size), np.float64) / 255.0
    r_cells = np.asarray(reference.crop(box).reduce(tile_size), np.float64) / 255.0
    delta_e = float(deltaE_ciede2000(rgb2lab(m_cells), rgb2lab(r_cells)).mean())
    m_quarter = np.asarray(mosaic_image.reduce(4).convert("L"), np.float64)
    r_quarter = np.asarray(reference.reduce(4).convert("L"), np.float64)
    ssim = float(structural_similarity(m_quarter, r_quarter, data_range=255.0))
    return delta_e, ssim
