"""The library seen at one placed size: each candidate's tile, sub-cells, matching features
and search index (mirror images after the tiles), computed once per library and cached."""

from __future__ import annotations

import numpy as np
from PIL import Image

from .library import TileLibrary
from .options import RenderOptions
from .signatures import SUB, features, with_texture
from .tile_index import TileIndex, build_index


def _weights(options: RenderOptions, tile_size: int) -> tuple[float, float]:
    if options.colour_first or tile_size < SUB:
        return 0.0, 1.0
    return 1.0, options.colour_weight


def tile_features(library: TileLibrary, tile_size: int, options: RenderOptions) -> np.ndarray:
    """Features of every candidate: the tiles, then (with ``mirror``) their mirror images."""
    structure, colour = _weights(options, tile_size)
    return library.cached(
        ("features", tile_size, structure, colour, _mirror(options, tile_size)),
        lambda: with_texture(
            features(candidate_sub_cells(library, tile_size, options), structure=structure, colour=colour),
            candidate_tiles(library, tile_size, options),
            candidate_sub_cells(library, tile_size, options),
            structure=structure,
            colour=colour,
        ),
    )


def tile_index(library: TileLibrary, tile_size: int, options: RenderOptions) -> TileIndex | None:
    """The search index over ``tile_features`` (None for libraries small enough to scan), cached."""
    structure, colour = _weights(options, tile_size)
    return library.cached(
        ("index", tile_size, structure, colour, _mirror(options, tile_size)),
        lambda: build_index(tile_features(library, tile_size, options)),
    )


def _mirror(options: RenderOptions, tile_size: int) -> bool:
    """Mirror images only matter where layout is matched (a flat colour is its own mirror)."""
    return options.mirror and not options.colour_first and tile_size >= SUB


def candidate_sub_cells(library: TileLibrary, tile_size: int, options: RenderOptions) -> np.ndarray:
    sub = library.sub_cells(tile_size)
    if not _mirror(options, tile_size):
        return sub
    return library.cached(("sub-mirror", tile_size), lambda: np.concatenate([sub, sub[:, :, ::-1]]))


def candidate_tiles(library: TileLibrary, tile_size: int, options: RenderOptions) -> np.ndarray:
    tiles = library.tiles(tile_size)
    if not _mirror(options, tile_size):
        return tiles
    return library.cached(("tiles-mirror", tile_size), lambda: np.concatenate([tiles, tiles[:, :, ::-1]]))


def _sub_cells(cells: np.ndarray) -> np.ndarray:
    rows, cols = cells.shape[0] // SUB, cells.shape[1] // SUB
    return cells.reshape(rows, SUB, cols, SUB, 3).transpose(0, 2, 1, 3, 4).reshape(-1, SUB, SUB, 3)


def _box_means(tiles: np.ndarray) -> np.ndarray:
    """``(N, 3) uint8`` box mean of each tile, with Pillow's rounding (as cell images have)."""
    n, s = tiles.shape[0], tiles.shape[1]
    sheet = Image.fromarray(np.ascontiguousarray(tiles.reshape(n * s, s, 3)))
    return np.asarray(sheet.reduce(s)).reshape(n, 3).copy()
