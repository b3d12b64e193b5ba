""" "Use every photo" on a person's library: every photo placed at least once, the promises kept.

A library of ``photos`` small generated photos (64 px crops of the ``camera_photos`` bases at
varied places, gains and mirror states: distinct, camera-like colours and texture; near
duplicates are not grouped here, every photo counts) and the chelsea photo at a size whose grid
has at least ``cells`` cells (tile 16). The engine renders it with ``use_every_photo`` on (the
job option; found on ``RenderOptions`` or as a keyword of ``render_with_placement``), and the
placement says how many of the photos appear; ``benchmarks.fidelity.job_scores`` gives the
up-close figures of the fidelity benchmark (share of cells recognisable, colour moved, the
largest share of one tile in an 8 x 8 window). ``measure`` answers None while the engine has no
such option.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import math
from typing import Any

import numpy as np
from PIL import Image

OPTION = "use_every_photo"
TILE = 16


def _library(count: int) -> Any:
    from benchmarks.camera_photos import BASES, SIZE, _base
    from mosaic.library import TileLibrary

    rng = np.random.default_rng(77)
    tiles = np.empty((count, 64, 64, 3), np.uint8)
    for i in range(count):
        side = int(rng.integers(96, 640))
        x, y = int(rng.integers(0, SIZE[0] - side)), int(rng.integers(0, SIZE[1] - side))
        crop = np.asarray(_base(i % BASES).crop((x, y, x + side, y + side)).resize((64, 64), Image.Resampling.BOX))
        gains = rng.uniform(0.35, 1.6, 3)
        tiles[i] = np.clip(crop * gains, 0, 255).astype(np.uint8)
    return TileLibrary.from_tiles(tiles, [f"photo-{i:05d}.jpg" for i in range(count)])


def _options_with_option() -> tuple[Any, dict[str, Any]] | None:
    """(options, extra keywords of render_with_placement) asking for every photo; None without it."""
    from mosaic.options import DEFAULT_OPTIONS
    from mosaic.render import render_with_placement

    if OPTION in {f.name for f in dataclasses.fields(DEFAULT_OPTIONS)}:
        return dataclasses.replace(DEFAULT_OPTIONS, **{OPTION: True}), {}
    if OPTION in inspect.signature(render_with_placement).parameters:
        return DEFAULT_OPTIONS, {OPTION: True}
    return None


def measure(photos: int = 1000, cells: int = 1200) -> dict[str, Any] | None:
    from benchmarks.fidelity import GOALS, job_scores
    from benchmarks.photos import target_jpeg
    from mosaic import open_image, plan_grid
    from mosaic.library_features import candidate_tiles
    from mosaic.render import render_with_placement

    asked = _options_with_option()
    if asked is None:
        return None
    options, extra = asked
    across = math.ceil(math.sqrt(cells * 4 / 3))
    size = (across * TILE, math.ceil(cells / across) * TILE)
    data = target_jpeg("chelsea", size)
    target = Image.open(io.BytesIO(data)).convert("RGB")
    library = _library(photos)
    grid = plan_grid(size[0], size[1], tile_size=TILE, tiles_across=across)
    image = open_image(data)
    pixels, choice = render_with_placement(
        image, library, tile_size=TILE, grid=grid, seed="bench", options=options, **extra
    )
    candidates = candidate_tiles(library, TILE, options)
    scores = job_scores(pixels, target, candidates, choice)
    placed = np.unique(choice.ravel() % len(library)).size
    checks = {
        key: scores[key] >= bound if sense == ">=" else scores[key] <= bound for key, (sense, bound, _) in GOALS.items()
    }
    return {
        "photos": photos,
        "cells": int(choice.size),
        "placed": int(placed),
        "scores": {k: float(v) for k, v in scores.items()},
        "checks": checks,
    }
