"""Matching and composition: exact on synthetic tiles, deterministic across bands, varied."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mosaic import (
    SUB,
    RenderOptions,
    TileLibrary,
    band_cells,
    cell_image,
    open_image,
    plan_bands,
    plan_grid,
    render,
    render_band,
)
from mosaic.library_features import _sub_cells, _weights, tile_features
from mosaic.matching import best, ranked_neighbours
from mosaic.parts import plan_parts
from mosaic.signatures import features
from mosaic.tile_choice import choose_tiles
from mosaic.variety import (
    feasible_distance,
    graph_size,
    seed_number,
    tile_classes,
    tile_graph,
    tiles_needed,
    walk,
)

from .conftest import encode, flat_library, random_library

PLAIN = RenderOptions(variety=0, correction=0)
COLOURS = [(255, 0, 0), (0, 128, 0), (20, 20, 200), (240, 240, 240), (30, 30, 30), (250, 200, 0)]


@pytest.mark.parametrize("options", [PLAIN, RenderOptions(variety=0), RenderOptions(variety=0, colour_first=True)])
@pytest.mark.parametrize("tile_size", [1, 3, 16, 64])
def test_flat_library_reproduces_a_flat_target_exactly(options: RenderOptions, tile_size: int) -> None:
    library = flat_library(COLOURS)
    for colour in COLOURS:
        target = Image.new("RGB", (12, 8), colour)
        out = render(target, library, tile_size=tile_size, options=options)
        assert out.shape == (8 * tile_size, 12 * tile_size, 3)
        assert np.all(out == colour)


def test_each_cell_gets_its_own_colour_on_a_patchwork() -> None:
    library = flat_library(COLOURS)
    rng = np.random.default_rng(5)
    layout = rng.integers(0, len(COLOURS), (6, 9))
    target = Image.fromarray(np.array(COLOURS, np.uint8)[layout]).resize((9 * 8, 6 * 8), Image.Resampling.NEAREST)
    out = render(target, library, tile_size=5, tiles_across=9, options=PLAIN)
    expected = np.array(COLOURS, np.uint8)[layout].repeat(5, axis=0).repeat(5, axis=1)
    assert np.array_equal(out, expected)


def test_a_target_made_of_library_tiles_gets_those_tiles_back() -> None:
    library = random_library(60, seed=2)
    rng = np.random.default_rng(8)
    layout = rng.integers(0, len(library), (5, 7))
    tiles = library.tiles(16)
    target = tiles[layout].transpose(0, 2, 1, 3, 4).reshape(5 * 16, 7 * 16, 3)
    out = render(Image.fromarray(target), library, tile_size=16, tiles_across=7, options=PLAIN)
    assert np.array_equal(out, target)


def test_structure_matching_tells_edges_apart_where_mean_colour_cannot() -> None:
    atlas = np.full((2, 64, 64, 3), 200, np.uint8)
    atlas[0, :, :32] = 20  # dark on the left
    atlas[1, :, 32:] = 20  # dark on the right
    library = TileLibrary.from_tiles(atlas, ["left", "right"])
    target = Image.fromarray(np.concatenate([atlas[1], atlas[0]], axis=1))
    cells = cell_image(target, plan_grid(128, 64, tile_size=8, tiles_across=2))
    choice = choose_tiles(cells, library, tile_size=8, seed="", options=RenderOptions(variety=0, mirror=False))
    assert choice.tolist() == [[1, 0]]
    colour_only = RenderOptions(variety=0, mirror=False, colour_first=True)
    assert choose_tiles(cells, library, tile_size=8, seed="", options=colour_only).tolist() == [[0, 0]]


def test_mirror_images_of_tiles_are_candidates_too() -> None:
    atlas = np.full((1, 64, 64, 3), 200, np.uint8)
    atlas[0, :, :32] = 20  # dark on the left only
    library = TileLibrary.from_tiles(atlas, ["left"])
    target = Image.fromarray(atlas[0, :, ::-1].copy())  # dark on the right
    out = render(target, library, tile_size=16, tiles_across=1, options=PLAIN)
    assert np.array_equal(out, library.tiles(16)[0, :, ::-1])
    plain = render(
        target, library, tile_size=16, tiles_across=1, options=RenderOptions(variety=0, correction=0, mirror=False)
    )
    assert np.array_equal(plain, library.tiles(16)[0])


def _stitch(
    image: Image.Image,
    library: TileLibrary,
    *,
    tile_size: int,
    slices: int,
    seed: str,
    options: RenderOptions,
    tiles_across: int,
) -> np.ndarray:
    """What the pipeline does: the controller cuts cells into bands of whole parts, workers render
    each alone."""
    grid = plan_grid(image.width, image.height, tile_size=tile_size, tiles_across=tiles_across)
    cells = cell_image(image, grid)
    parts = plan_parts(grid)
    bands = [
        render_band(
            band_cells(cells, band, tile_size=tile_size).copy(),
            library,
            tile_size=tile_size,
            seed=seed,
            row_offset=band.start,
            options=options,
            parts=parts,
        )
        for band in reversed(parts.bands(slices))  # any order, any process
    ]
    return np.concatenate(bands[::-1], axis=0)


@pytest.mark.parametrize(("slices", "tile_size"), [(1, 6), (3, 6), (7, 6), (3, 2)])
@pytest.mark.parametrize("options", [RenderOptions(), PLAIN])
def test_bands_rendered_alone_and_stitched_equal_the_whole_render(
    photo: Image.Image, library200: TileLibrary, slices: int, tile_size: int, options: RenderOptions
) -> None:
    # 130 rows: two parts (mosaic.parts), so the slicings cut between them
    kwargs = {"tile_size": tile_size, "slices": slices, "tiles_across": 130, "seed": "req-1", "options": options}
    whole = render(photo, library200, **kwargs)
    assert np.array_equal(whole, render(photo, library200, **{**kwargs, "slices": 1}))  # any slicing, one mosaic
    stitched = _stitch(photo, library200, **kwargs)
    assert np.array_equal(whole, stitched)
    again = render(photo, library200, **kwargs)
    assert np.array_equal(whole, again)  # redelivery gives the same pixels


def test_the_seed_changes_the_varied_choice_but_not_the_plain_one(photo: Image.Image, library200: TileLibrary) -> None:
    cells = cell_image(photo, plan_grid(photo.width, photo.height, tile_size=8, tiles_across=30))
    varied = [choose_tiles(cells, library200, tile_size=8, seed=s, options=RenderOptions()) for s in ("a", "b")]
    plain = [choose_tiles(cells, library200, tile_size=8, seed=s, options=PLAIN) for s in ("a", "b")]
    assert not np.array_equal(*varied)
    assert np.array_equal(*plain)


def _repeats_within(choice: np.ndarray, distance: int) -> int:
    rows, cols = choice.shape
    count = 0
    for dy in range(0, distance + 1):
        for dx in range(-distance, distance + 1):
            if dy == 0 and dx <= 0:
                continue
            a = choice[: rows - dy, max(0, -dx) : cols - max(0, dx)]
            b = choice[dy:, max(0, dx) : cols - max(0, -dx)]
            count += int((a == b).sum())
    return count


@pytest.mark.parametrize("distance", [1, 2, 3])
@pytest.mark.parametrize("slices", [1, 4])
def test_variety_never_repeats_a_tile_within_the_distance_even_across_bands(distance: int, slices: int) -> None:
    # A flat target is the worst case: every cell wants the same few tiles.
    library = random_library(220, seed=4)  # enough for distance 3: 4 classes of 49
    target = Image.new("RGB", (24, 20), (120, 140, 160))
    options = RenderOptions(variety=distance, correction=0)
    grid = plan_grid(24, 20, tile_size=4)
    cells = cell_image(target, grid)
    choice = np.concatenate(
        [
            choose_tiles(
                band_cells(cells, band), library, tile_size=4, seed="s", row_offset=band.start, options=options
            )
            for band in plan_bands(grid.tiles_down, slices)
        ]
    )
    assert choice.shape == (20, 24)
    assert _repeats_within(choice % len(library), distance) == 0  # a mirror image is the same tile
    plain = choose_tiles(cells, library, tile_size=4, seed="s", options=PLAIN)
    assert _repeats_within(plain % len(library), distance) > 0


def _max_window_share(tiles: np.ndarray, size: int = 8) -> float:
    """The largest share of any one tile among the cells of any ``size`` × ``size`` window."""
    windows = np.lib.stride_tricks.sliding_window_view(tiles, (size, size)).reshape(-1, size * size)
    return max(np.bincount(w).max() for w in windows) / (size * size)


@pytest.mark.parametrize("slices", [1, 5])
def test_defaults_keep_every_8x8_window_under_a_tenth_for_one_tile_on_a_flat_target(slices: int) -> None:
    # Counted on the choice (a mirror image is the same tile), not on pixels.
    library = random_library(220, seed=4)
    target = Image.new("RGB", (30, 26), (120, 140, 160))
    grid = plan_grid(30, 26, tile_size=4)
    cells = cell_image(target, grid)
    choice = np.concatenate(
        [
            choose_tiles(band_cells(cells, band), library, tile_size=4, seed="s", row_offset=band.start)
            for band in plan_bands(grid.tiles_down, slices)
        ]
    ) % len(library)
    assert _repeats_within(choice, RenderOptions().variety) == 0
    assert _max_window_share(choice) <= 0.10
    plain = choose_tiles(cells, library, tile_size=4, seed="s", options=PLAIN) % len(library)
    assert _max_window_share(plain) == 1.0  # the flat target alone would be one tile


def _flat_choice(distance: int) -> tuple[TileLibrary, np.ndarray, np.ndarray, np.ndarray]:
    """A flat 36 × 64-cell target chosen with ``distance`` in one band: the library, the
    choice (mirrors as their tiles), the features of one cell and those of the candidates."""
    library = random_library(220, seed=4)
    target = Image.new("RGB", (36, 64), (120, 140, 160))
    cells = cell_image(target, plan_grid(36, 64, tile_size=4))
    options = RenderOptions(variety=distance, correction=0)
    choice = choose_tiles(cells, library, tile_size=4, seed="s", options=options) % len(library)
    structure, colour = _weights(options, 4)
    wanted = features(_sub_cells(cells[:SUB]), structure=structure, colour=colour)[:1]
    return library, choice, wanted, tile_features(library, 4, options)


@pytest.mark.parametrize("distance", [1, 2, 3])
def test_a_flat_area_takes_the_first_tiles_of_its_list_and_no_row_repeats_a_period(distance: int) -> None:
    # Cells choose in phase order: in a flat area each phase takes the next tile of the
    # cells' candidate list, so the area uses exactly its (d+1)(d+2) first tiles (a random
    # order reaches about twice as deep), and no row is a lattice.
    library, choice, wanted, candidates = _flat_choice(distance)
    # The band's last rows draw from a share of the library (a neighbouring band may follow)
    # and choose first; the rows above them give way, a few rows further up each time.
    inner = choice[:32]
    listed = ranked_neighbours(wanted, candidates, tile_graph(candidates, graph_size(distance)))[0]
    first_tiles = list(dict.fromkeys(listed % len(library)))[: (distance + 1) * (distance + 2)]  # a mirror is its tile
    assert sorted(np.unique(inner)) == sorted(first_tiles)
    assert _repeats_within(inner, distance) == 0
    period = distance + 1
    assert all((row[:-period] != row[period:]).any() for row in inner)


@pytest.mark.parametrize("distance", [1, 2, 3])
def test_no_row_of_a_flat_area_takes_the_worse_tiles_every_time(distance: int) -> None:
    # The rows of a row phase must not take the same places of the list in every flat area:
    # if the first rows took the best tiles and the last rows the worst, every (d+1)-th row
    # would come out darker or paler, stripes across a sky seen from afar. Each row's cells
    # mix early and late places, so the rows' mean places differ by a place or less.
    library, choice, wanted, candidates = _flat_choice(distance)
    inner = choice[:32]
    listed = ranked_neighbours(wanted, candidates, tile_graph(candidates, graph_size(distance)))[0]
    place = {tile: k for k, tile in enumerate(dict.fromkeys(listed % len(library)))}
    places = np.vectorize(place.get)(inner)
    by_row_phase = [places[k :: distance + 1].mean() for k in range(distance + 1)]
    assert max(by_row_phase) - min(by_row_phase) <= 1.0, by_row_phase


@pytest.mark.parametrize("distance", [1, 2, 3])
def test_the_rows_at_a_band_border_choose_first_from_their_share_of_the_library(distance: int) -> None:
    # A band's last d rows may use only their class of the library (the next band cannot see
    # them). They choose before the rows inside, so on a flat target each takes its own
    # row's d + 2 best tiles of its class, not what the rows inside leave over.
    library, choice, wanted, candidates = _flat_choice(distance)
    classes = tile_classes(len(library), distance, seed_number("s"))[np.arange(len(candidates)) % len(library)]
    for row in range(64 - distance, 64):
        members = np.flatnonzero(classes == row % (distance + 1))
        ranked, _ = best(wanted, candidates[members], members.size)
        first_of_class = list(dict.fromkeys(members[ranked[0]] % len(library)))[: distance + 2]
        assert set(choice[row].tolist()) <= set(first_of_class), row


@pytest.mark.parametrize("distance", [1, 3, 16])
def test_the_walk_never_repeats_a_symbol_within_the_distance_and_has_no_period(distance: int) -> None:
    sequence = walk(distance, 5000)
    assert len(sequence) >= 5000 and set(sequence.tolist()) == set(range(distance + 2))
    for gap in range(1, distance + 1):
        assert (sequence[gap:] != sequence[:-gap]).all()
    for period in range(distance + 1, 4 * (distance + 2)):
        assert (sequence[period:] != sequence[:-period]).any()
    assert np.array_equal(walk(distance, 5000), sequence)


@pytest.mark.parametrize("distance", range(7))
def test_tiles_needed_is_the_smallest_library_that_keeps_a_distance(distance: int) -> None:
    needed = tiles_needed(distance)
    assert feasible_distance(distance, needed) == distance
    assert distance == 0 or feasible_distance(distance, needed - 1) < distance


def test_a_library_of_tiles_needed_keeps_the_distance_on_a_flat_target_and_one_tile_fewer_does_not() -> None:
    target = Image.new("RGB", (24, 20), (120, 140, 160))
    cells = cell_image(target, plan_grid(24, 20, tile_size=4))
    options = RenderOptions(variety=2, correction=0)
    for count, repeats in ((tiles_needed(2), False), (tiles_needed(2) - 1, True)):
        library = random_library(count, seed=4)
        choice = choose_tiles(cells, library, tile_size=4, seed="s", options=options) % count
        assert (_repeats_within(choice, 2) > 0) == repeats, count


def test_variety_is_lowered_for_a_library_too_small_to_honour_it() -> None:
    library = random_library(12, seed=1)
    target = Image.new("RGB", (10, 10), (100, 100, 100))
    out = render(target, library, tile_size=4, options=RenderOptions(variety=5, correction=0))
    assert out.shape == (40, 40, 3)


def test_the_overlay_moves_colours_toward_the_target_and_100_reaches_it() -> None:
    library = flat_library([(200, 50, 50), (50, 50, 200)])
    target = Image.new("RGB", (4, 4), (120, 60, 120))
    errors = []
    for overlay in (0, 50, 100):
        out = render(target, library, tile_size=8, options=RenderOptions(variety=0, correction=0, overlay=overlay))
        errors.append(np.abs(out.astype(int) - (120, 60, 120)).mean())
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] <= 1.0


@pytest.mark.parametrize("tile_size", [1, 64])
def test_extreme_tile_sizes(photo: Image.Image, library200: TileLibrary, tile_size: int) -> None:
    out = render(photo, library200, tile_size=tile_size, tiles_across=12, seed="x")
    assert out.shape == (12 * tile_size, 12 * tile_size, 3)
    if tile_size == 64:
        first = out[:64, :64]
        assert any(np.array_equal(first, t) for t in library200.atlas) or RenderOptions().correction


def test_one_by_one_target(library200: TileLibrary) -> None:
    target = Image.new("RGB", (1, 1), (10, 200, 30))
    out = render(target, library200, tile_size=16, seed="x")
    assert out.shape == (16, 16, 3)


@pytest.mark.parametrize("mode", ["L", "P", "RGBA", "I;16", "CMYK"])
def test_inputs_of_any_mode_render(photo: Image.Image, library200: TileLibrary, mode: str) -> None:
    grey16 = mode == "I;16"
    source = Image.fromarray(np.asarray(photo.convert("L"), np.uint16) * 257) if grey16 else photo.convert(mode)
    fmt = "JPEG" if mode == "CMYK" else "PNG"
    image = open_image(encode(source, fmt))
    out = render(image, library200, tile_size=4, tiles_across=20, seed="m")
    assert out.shape == (80, 80, 3) and out.dtype == np.uint8
    if mode in ("L", "I;16"):
        grey = np.asarray(photo.convert("L").resize((20, 20), Image.Resampling.BOX), float)
        cell_means = out.reshape(20, 4, 20, 4, 3).mean(axis=(1, 3, 4))
        assert np.corrcoef(grey.ravel(), cell_means.ravel())[0, 1] > 0.8


def test_bad_cells_are_refused(library200: TileLibrary) -> None:
    with pytest.raises(ValueError, match="multiple of"):
        render_band(np.zeros((SUB + 1, SUB, 3), np.uint8), library200, tile_size=4, seed="")
    with pytest.raises(ValueError):
        render_band(np.zeros((SUB, SUB), np.uint8), library200, tile_size=4, seed="")
    with pytest.raises(ValueError):
        RenderOptions(overlay=101)


@pytest.mark.parametrize("options", [RenderOptions(), PLAIN])
def test_results_are_writable_arrays(library200: TileLibrary, options: RenderOptions) -> None:
    out = render(Image.new("RGB", (6, 6), (90, 30, 30)), library200, tile_size=8, seed="w", options=options)
    assert out.flags.writeable and out.dtype == np.uint8


@pytest.mark.parametrize("tile_size", [1, 2, 3])
def test_small_tiles_match_one_pixel_per_cell_by_colour(library200: TileLibrary, tile_size: int) -> None:
    grid = plan_grid(30, 20, tile_size=tile_size)
    rng = np.random.default_rng(9)
    target = Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8))
    cells = cell_image(target, grid)
    assert cells.shape == (20, 30, 3)  # one pixel per cell below SUB
    choice = choose_tiles(cells, library200, tile_size=tile_size, seed="", options=PLAIN)
    from mosaic.matching import nearest
    from mosaic.signatures import colour_features

    means = np.array([np.asarray(Image.fromarray(t).reduce(tile_size)).reshape(3) for t in library200.tiles(tile_size)])
    expected = nearest(colour_features(cells.reshape(-1, 3)), colour_features(means)).reshape(20, 30)
    assert np.array_equal(choice, expected)


def test_many_small_cells_go_through_the_colour_table(library200: TileLibrary) -> None:
    """Above 65,536 cells distinct colours are looked up in a table: same answer as unique()."""
    rng = np.random.default_rng(2)
    cells = rng.integers(0, 256, (300, 300, 3), dtype=np.uint8)
    choice = choose_tiles(cells, library200, tile_size=1, seed="", options=PLAIN)
    small = np.concatenate(
        [choose_tiles(cells[r : r + 100], library200, tile_size=1, seed="", options=PLAIN) for r in range(0, 300, 100)]
    )
    assert np.array_equal(choice, small)


def test_huge_bands_are_matched_in_strips_without_changing_the_guarantees(
    monkeypatch: pytest.MonkeyPatch, photo: Image.Image, library200: TileLibrary
) -> None:
    import importlib

    choice_module = importlib.import_module("mosaic.tile_choice")
    monkeypatch.setattr(choice_module, "STRIP_CELLS", 200)  # 40 cells across: strips of 8 rows
    assert choice_module.strips(20, 40, 0) == [(0, 8), (8, 16), (16, 20)]
    assert choice_module.strips(10, 40, 5) == [(0, 3), (3, 10)]  # cut at global row 8
    options = RenderOptions(correction=0)
    kwargs = {"tile_size": 4, "slices": 3, "tiles_across": 40, "seed": "strips", "options": options}
    whole = render(photo, library200, **kwargs)
    assert np.array_equal(whole, _stitch(photo, library200, **kwargs))  # one part, cut into strips
    grid = plan_grid(photo.width, photo.height, tile_size=4, tiles_across=40)
    cells = cell_image(photo, grid)
    choice = np.concatenate(
        [
            choose_tiles(
                band_cells(cells, band), library200, tile_size=4, seed="strips", row_offset=band.start, options=options
            )
            for band in plan_bands(grid.tiles_down, 3)
        ]
    )
    assert _repeats_within(choice % len(library200), 2) == 0


@pytest.mark.parametrize("distance", [1, 2])
def test_whole_band_and_pair_list_conflict_rounds_choose_alike(
    monkeypatch: pytest.MonkeyPatch, photo: Image.Image, library200: TileLibrary, distance: int
) -> None:
    """The rounds switch from whole-band scans to pair lists midway: either alone gives the same."""
    import importlib

    rounds = importlib.import_module("mosaic.rounds")
    grid = plan_grid(photo.width, photo.height, tile_size=8, tiles_across=48)
    cells = cell_image(photo, grid)
    options = RenderOptions(variety=distance, correction=0)
    choices = []
    for sparse_below in (1 << 40, 0, 32):  # whole band only, pair lists after one round, mixed
        monkeypatch.setattr(rounds, "_SPARSE_BELOW", sparse_below)
        choices.append(choose_tiles(cells, library200, tile_size=8, seed="rounds", options=options))
    assert np.array_equal(choices[0], choices[1]) and np.array_equal(choices[0], choices[2])
    assert _repeats_within(choices[0] % len(library200), distance) == 0
    plain = choose_tiles(cells, library200, tile_size=8, seed="rounds", options=PLAIN)
    assert (choices[0] != plain).sum() > 20  # conflicts were there to settle


def _reference_overlay(
    out: np.ndarray, cells: np.ndarray, placed: np.ndarray, percent: int | np.ndarray, cell: int | None = None
) -> np.ndarray:
    """The overlay written plainly: integer bilinear ×m per axis (edges repeat), doubled, saturating adds.

    ``percent``: one for all, or one per sub-cell (``(H, W, 1)``: then always two passes).
    ``cell``: sub-cells per cell side; the interpolation then stays inside each cell (its
    edges repeat, as the band's do).
    """
    passes = 1 if np.ndim(percent) == 0 and percent <= 50 else 2
    denominator = 100 * passes
    shift = np.clip((2 * percent * (cells.astype(np.int64) - placed) + denominator) // (2 * denominator), -127, 127)
    factor = out.shape[0] // cells.shape[0]
    double = 2 if factor >= 4 and factor % 2 == 0 else 1
    m = factor // double

    def taps(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        position = 2 * (np.arange(size * m) % m) + 1 - m
        own = np.arange(size * m) // m
        low, high = (0, size - 1) if cell is None else (own // cell * cell, own // cell * cell + cell - 1)
        other = np.clip(own + np.sign(position), low, np.minimum(high, size - 1))
        return own, other, np.abs(position)

    ry, ny, wy = taps(cells.shape[0])
    rx, nx, wx = taps(cells.shape[1])
    total = np.zeros((ry.size, rx.size, 3), np.int64)
    for rows, row_weight in ((ry, 2 * m - wy), (ny, wy)):
        for cols, col_weight in ((rx, 2 * m - wx), (nx, wx)):
            total += shift[rows][:, cols] * (row_weight[:, None, None] * col_weight[None, :, None])
    smooth = (total + 2 * m * m) // (4 * m * m)
    full = smooth.repeat(double, axis=0).repeat(double, axis=1)
    result = out.astype(np.int64)
    for _ in range(passes):
        result = np.clip(result + full, 0, 255)
    return result.astype(np.uint8)


@pytest.mark.parametrize("tile_size", [2, 8, 12, 16, 24, 64])
@pytest.mark.parametrize("percent", [40, 100])
@pytest.mark.parametrize("overlay_bytes", [1, 1 << 20])  # one sub-cell row per strip, or the whole band
def test_overlay_is_the_plain_integer_bilinear_correction(
    monkeypatch: pytest.MonkeyPatch, tile_size: int, percent: int, overlay_bytes: int
) -> None:
    import importlib

    overlay_module = importlib.import_module("mosaic.overlay")
    monkeypatch.setattr(overlay_module, "OVERLAY_BYTES", overlay_bytes)
    rng = np.random.default_rng(tile_size + percent)
    k = 1 if tile_size < SUB else SUB
    rows, cols = 5, 7
    cells = rng.integers(0, 256, (rows * k, cols * k, 3), dtype=np.uint8)
    placed = rng.integers(0, 256, (rows * k, cols * k, 3), dtype=np.uint8)
    out = rng.integers(0, 256, (rows * tile_size, cols * tile_size, 3), dtype=np.uint8)
    expected = _reference_overlay(out, cells, placed, percent)
    got = overlay_module.overlay_toward(out.copy(), cells, placed, percent)
    assert np.array_equal(got, expected)
    assert (got == 0).any() and (got == 255).any()  # saturation was exercised
    local = rng.integers(percent // 2, percent + 1, cells.shape[:2])  # a percent per sub-cell
    expected = _reference_overlay(out, cells, placed, local[:, :, None])
    got = overlay_module.overlay_toward(out.copy(), cells, placed, percent, local)
    assert np.array_equal(got, expected)
    if k == SUB:  # the correction interpolated within each cell only
        expected = _reference_overlay(out, cells, placed, local[:, :, None], cell=SUB)
        got = overlay_module.overlay_toward(out.copy(), cells, placed, percent, local, cell=SUB)
        assert np.array_equal(got, expected)
