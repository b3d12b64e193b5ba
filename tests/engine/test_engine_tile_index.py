"""The search index for big libraries (mosaic.tile_index): exact where it claims, deterministic,
and invisible to the render guarantees (band = whole, same seed = same pixels, variety)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from PIL import Image

from mosaic import RenderOptions, band_cells, cell_image, plan_bands, plan_grid, render, render_band
from mosaic.matching import nearest, ranked_neighbours
from mosaic.parts import plan_parts
from mosaic.signatures import BOUND, FEATURES
from mosaic.tile_choice import choose_tiles
from mosaic.tile_index import DENSE_MAX, PROBES, build_index, nearest_tiles, ranked_around
from mosaic.variety import choose_varied, feasible_distance, tile_graph

from .conftest import random_library

tile_index = importlib.import_module("mosaic.tile_index")


def _clustered(count: int, seed: int) -> np.ndarray:
    """Integer features in clumps, like tiles cut from a few photos."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-300, 300, (40, FEATURES))
    points = centres[rng.integers(0, 40, count)] + rng.normal(0, 40, (count, FEATURES))
    return np.clip(np.rint(points), -BOUND, BOUND).astype(np.float32)


@pytest.fixture(scope="module")
def features() -> tuple[np.ndarray, np.ndarray]:
    return _clustered(DENSE_MAX + 1500, seed=1), _clustered(3000, seed=2)


def test_small_libraries_are_scanned_in_full() -> None:
    assert build_index(_clustered(DENSE_MAX, seed=3)) is None


def test_each_cell_gets_the_exact_best_of_the_lists_it_probes(features: tuple[np.ndarray, np.ndarray]) -> None:
    tiles, cells = features
    index = build_index(tiles)
    assert index is not None
    found = nearest_tiles(cells, tiles, index)
    exact = nearest(cells, tiles)
    d_found = ((tiles[found].astype(np.int64) - cells.astype(np.int64)) ** 2).sum(axis=1)
    d_exact = ((tiles[exact].astype(np.int64) - cells.astype(np.int64)) ** 2).sum(axis=1)
    assert (d_found >= d_exact).all()
    assert (found == exact).mean() > 0.9  # approximate, but rarely wrong
    # Brute force over the probed lists: the lowest distance there, then the lowest index.
    lists = nearest(tiles, index.centroids)
    centroid_d = ((cells[:, None, :].astype(np.int64) - index.centroids[None].astype(np.int64)) ** 2).sum(axis=2)
    for i in range(0, cells.shape[0], 97):
        probed = np.lexsort((np.arange(index.centroids.shape[0]), centroid_d[i]))[:PROBES]
        pool = np.flatnonzero(np.isin(lists, probed))
        d = ((tiles[pool].astype(np.int64) - cells[i].astype(np.int64)) ** 2).sum(axis=1)
        assert found[i] == pool[np.lexsort((pool, d))[0]]


def test_the_index_is_rebuilt_identically_and_answers_do_not_depend_on_the_split(
    features: tuple[np.ndarray, np.ndarray],
) -> None:
    tiles, cells = features
    first, second = build_index(tiles), build_index(tiles.copy())
    assert first is not None and second is not None
    for name in ("centroids", "order", "starts"):
        assert np.array_equal(getattr(first, name), getattr(second, name))
    assert np.array_equal(first.centroids, np.rint(first.centroids))  # integer: exact products
    assert np.abs(first.centroids).max() <= BOUND
    assert sorted(first.order.tolist()) == list(range(tiles.shape[0]))
    whole = nearest_tiles(cells, tiles, first)
    parts = np.concatenate([nearest_tiles(cells[a : a + 701], tiles, second) for a in range(0, cells.shape[0], 701)])
    assert np.array_equal(whole, parts)


def test_ranking_around_a_tile_matches_the_dense_ranking(features: tuple[np.ndarray, np.ndarray]) -> None:
    tiles, cells = features
    tiles, cells = tiles[:800], cells[:500]
    graph = tile_graph(tiles, 20)
    assert np.array_equal(
        ranked_around(cells, tiles, nearest(cells, tiles), graph), ranked_neighbours(cells, tiles, graph)
    )


@pytest.fixture
def indexed(monkeypatch: pytest.MonkeyPatch):
    """A small library that goes through the index (its cache is its own)."""
    monkeypatch.setattr(tile_index, "DENSE_MAX", 64)
    return random_library(220, seed=7)  # 220: enough for variety 3 (4 border classes of 49+)


@pytest.mark.parametrize("options", [RenderOptions(), RenderOptions(variety=0, correction=0)])
def test_indexed_bands_equal_the_whole_render(photo: Image.Image, indexed, options: RenderOptions) -> None:
    kwargs = {"tile_size": 8, "tiles_across": 130, "seed": "idx", "options": options}
    whole = render(photo, indexed, slices=4, **kwargs)
    structure_colour = (1.0, options.colour_weight)
    assert indexed.cached(("index", 8, *structure_colour, options.mirror), lambda: None) is not None  # it was used
    grid = plan_grid(photo.width, photo.height, tile_size=8, tiles_across=130)
    cells = cell_image(photo, grid)
    parts = plan_parts(grid)
    stitched = np.concatenate(
        [
            render_band(
                band_cells(cells, band, tile_size=8).copy(),
                indexed,
                tile_size=8,
                seed="idx",
                row_offset=band.start,
                options=options,
                parts=parts,
            )
            for band in parts.bands(4)
        ]
    )
    assert np.array_equal(whole, stitched)
    assert np.array_equal(whole, render(photo, indexed, slices=4, **kwargs))  # redelivery: same pixels


def test_indexed_variety_never_repeats_within_the_distance(photo: Image.Image, indexed) -> None:
    grid = plan_grid(photo.width, photo.height, tile_size=8, tiles_across=30)
    cells = cell_image(photo, grid)
    choice = np.concatenate(
        [
            choose_tiles(band_cells(cells, band, tile_size=8), indexed, tile_size=8, seed="v", row_offset=band.start)
            for band in plan_bands(grid.tiles_down, 3)
        ]
    ) % len(indexed)
    rows, cols = choice.shape
    d = RenderOptions().variety
    assert feasible_distance(d, len(indexed)) == d
    for dy in range(d + 1):
        for dx in range(-d, d + 1):
            if dy == 0 and dx <= 0:
                continue
            a = choice[: rows - dy, max(0, -dx) : cols - max(0, dx)]
            b = choice[dy:, max(0, dx) : cols - max(0, -dx)]
            assert not (a == b).any()


def test_a_search_the_caller_made_already_gives_the_same_choice(features: tuple[np.ndarray, np.ndarray]) -> None:
    """``sized`` hands its early-split search to ``choose_varied`` (``nearest_known``): the
    choice is the one ``choose_varied`` makes searching itself, with some cells absent."""
    tiles, cells = features
    index = build_index(tiles)
    rows, cols = 30, 100
    cells = cells[: rows * cols]
    present = np.random.default_rng(5).random((rows, cols)) < 0.4
    known = np.full(rows * cols, -1, np.int32)
    known[present.ravel()] = nearest_tiles(cells[present.ravel()], tiles, index)
    kwargs = dict(rows=rows, cols=cols, row_offset=0, distance=3, seed="k", index=index, present=present)
    kwargs["graph"] = tile_graph(tiles, 16)
    searched = choose_varied(cells, tiles, **kwargs)
    assert (searched[present] >= 0).all() and (searched[~present] < 0).all()
    assert np.array_equal(choose_varied(cells, tiles, nearest_known=known, **kwargs), searched)
