"""``photomosaics render`` end to end with click's runner: outputs, libraries, clear errors."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result
from PIL import Image

from dal.config import CONNECTION_STRING_ENV, StorageClients
from photomosaics.cli import main

COLOURS = [
    (220, 40, 40),
    (40, 200, 60),
    (30, 60, 210),
    (240, 220, 40),
    (20, 20, 20),
    (245, 245, 245),
    (200, 120, 30),
    (120, 40, 160),
]


def _jpeg(colour: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="JPEG", quality=95)
    return out.getvalue()


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Built libraries are cached per test, never in the home folder."""
    monkeypatch.setenv("PHOTOMOSAICS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "libraries"


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A 96x64 photo-like gradient."""
    image = Image.linear_gradient("L").resize((96, 64)).convert("RGB")
    image.paste((200, 40, 40), (10, 10, 40, 40))
    path = tmp_path / "target.jpg"
    image.save(path, quality=95)
    return path


@pytest.fixture
def tiles_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tiles"
    folder.mkdir()
    for i, colour in enumerate(COLOURS):
        (folder / f"t{i}.jpg").write_bytes(_jpeg(colour))
    (folder / "readme.txt").write_text("not a tile")
    return folder


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=True)


def assert_clean_failure(result: Result, *fragments: str) -> None:
    """A non-zero exit with a message, not a traceback."""
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.output, result.output


def test_render_with_a_folder_library(target: Path, tiles_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.png"
    result = run(
        "render", str(target), "--library", str(tiles_dir), "--tile-size", "4", "--tiles-across", "24", "-o", str(out)
    )
    assert result.exit_code == 0, result.output
    assert "skipped 1 file" in result.output
    with Image.open(out) as mosaic:
        assert (mosaic.format, mosaic.size) == ("PNG", (96, 64))
        # the red square of the target comes out reddish: the mosaic follows the picture
        r, g, b = mosaic.convert("RGB").crop((16, 16, 32, 32)).resize((1, 1), Image.Resampling.BOX).getpixel((0, 0))
        assert r > 120 and g < 110 and b < 110


def test_a_photo_whose_name_is_not_utf8_is_a_tile_like_any_other(target: Path, tiles_dir: Path, tmp_path: Path) -> None:
    (tiles_dir / os.fsdecode(b"caf\xe9.jpg")).write_bytes(_jpeg((90, 160, 200)))  # Latin-1, as old cameras wrote
    result = run(
        "render", str(target), "--library", str(tiles_dir), "--tiles-across", "12", "-o", str(tmp_path / "o.png")
    )
    assert result.exit_code == 0, result.output  # the library's cache key hashed the name and raised
    assert "9 in the library" in result.output and (tmp_path / "o.png").is_file()


def test_an_output_that_is_the_photo_itself_is_refused_and_the_photo_kept(
    target: Path, tiles_dir: Path, tmp_path: Path
) -> None:
    photo = target.read_bytes()
    (tmp_path / "link.jpg").symlink_to(target)
    common = ["render", str(target), "--library", str(tiles_dir), "--tiles-across", "12"]
    for extra in (["-o", str(target)], ["-o", str(tmp_path / "ok.png"), "-o", str(tmp_path / "link.jpg")]):
        assert_clean_failure(run(*common, *extra), "is the photo itself: choose another file", "--output")
    assert_clean_failure(run(*common, "-o", str(tmp_path / "ok.png"), "--tile-map", str(target)), "--tile-map")
    assert target.read_bytes() == photo and not (tmp_path / "ok.png").exists()


def test_one_file_named_twice_is_written_once_and_the_tile_map_may_not_be_an_output(
    target: Path, tiles_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    common = ["render", str(target), "--library", str(tiles_dir), "--tiles-across", "12"]
    result = run(*common, "-o", "m.jpg", "-o", str(tmp_path / "m.jpg"), "-o", "./m.jpg")
    assert result.exit_code == 0, result.output
    assert result.output.count("wrote ") == 1, result.output
    with Image.open(tmp_path / "m.jpg") as written:
        written.load()  # whole: one writer, not three racing for one file
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    assert_clean_failure(run(*common, "-o", "n.jpg", "--tile-map", "./n.jpg"), "--tile-map", "also an --output")
    assert not (tmp_path / "n.jpg").exists()


def test_more_tiles_across_than_the_output_limit_allows_says_how_many_fit(
    target: Path, tiles_dir: Path, tmp_path: Path
) -> None:
    common = ["render", str(target), "--library", str(tiles_dir), "-t", "4", "-o", str(tmp_path / "m.png")]
    result = run(*common, "--tiles-across", "1000", "--max-output-pixels", "40000")
    assert result.exit_code == 0, result.output
    fit = next(line for line in result.output.splitlines() if " tiles of 4 px" in line).split("x", 1)[0]
    assert f"note: 1,000 tiles across would be over the 40,000-pixel limit (--max-output-pixels): {fit} across fit" in (
        result.output
    )
    with Image.open(tmp_path / "m.png") as written:
        assert written.width == int(fit) * 4 and written.width * written.height <= 40_000
    assert (
        "tiles across would be over" not in run(*common, "--tiles-across", "20", "--max-output-pixels", "40000").output
    )


def test_correction_and_overlay_reach_the_engine(target: Path, tiles_dir: Path, tmp_path: Path) -> None:
    """--correction 0 places the library's tiles untouched; --overlay paints the target over them."""
    outputs = {}
    flags = {"plain": ["--correction", "0"], "overlay": ["--correction", "0", "--overlay", "100", "--match-contrast"]}
    for name, extra in flags.items():
        out = tmp_path / f"{name}.png"
        common = ["--library", str(tiles_dir), "--tile-size", "8", "--tiles-across", "12", "--variety", "0"]
        result = run("render", str(target), *common, *extra, "-o", str(out))
        assert result.exit_code == 0, result.output
        outputs[name] = np.asarray(Image.open(out).convert("RGB"), np.float64)
    reference = np.asarray(Image.open(target).convert("RGB").resize(outputs["plain"].shape[1::-1]), np.float64)
    assert np.abs(outputs["overlay"] - reference).mean() < np.abs(outputs["plain"] - reference).mean()


def test_render_to_dzi_writes_the_deep_zoom_layout(target: Path, tiles_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "mosaic.dzi"
    result = run(
        "render", str(target), "--library", str(tiles_dir), "--tile-size", "4", "--tiles-across", "24", "-o", str(out)
    )
    assert result.exit_code == 0, result.output
    assert 'Width="96"' in out.read_text() and 'Height="64"' in out.read_text()
    files = tmp_path / "mosaic_files"
    top = max(int(p.name) for p in files.iterdir() if p.is_dir())
    assert top == 7  # ceil(log2(96)): levels 0 (1 px) .. 7 (full size)
    with Image.open(files / str(top) / "0_0.jpg") as full:
        assert full.size == (96, 64)  # one tile holds it all
    with Image.open(files / "0" / "0_0.jpg") as dot:
        assert dot.size == (1, 1)


def test_several_outputs_come_from_one_render(target: Path, tiles_dir: Path, tmp_path: Path) -> None:
    jpeg, dzi, png = tmp_path / "m.jpg", tmp_path / "m.dzi", tmp_path / "m.png"
    result = run(
        "render",
        str(target),
        "--library",
        str(tiles_dir),
        "--tile-size",
        "4",
        "--tiles-across",
        "24",
        "-o",
        str(jpeg),
        "-o",
        str(dzi),
        "-o",
        str(png),
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("wrote ") == 3 and result.output.count("tiles of 4 px") == 1
    with Image.open(jpeg) as j, Image.open(png) as lossless, Image.open(tmp_path / "m_files" / "7" / "0_0.jpg") as top:
        assert (j.format, j.size, top.size) == ("JPEG", (96, 64), (96, 64))
        exact = np.asarray(lossless.convert("RGB"), dtype=np.int16)
        for lossy in (j, top):  # the same render behind every output
            assert np.abs(np.asarray(lossy.convert("RGB"), dtype=np.int16) - exact).mean() < 8


def test_an_unknown_second_output_type_fails_before_rendering(target: Path, tiles_dir: Path, tmp_path: Path) -> None:
    result = run(
        "render", str(target), "--library", str(tiles_dir), "-o", str(tmp_path / "m.jpg"), "-o", str(tmp_path / "m.gif")
    )
    assert_clean_failure(result, "unknown image type '.gif'")
    assert not (tmp_path / "m.jpg").exists()


@pytest.mark.parametrize(("suffix", "side"), [(".jpg", 65_501), (".webp", 16_384)])
def test_a_mosaic_too_large_for_its_format_is_refused_before_rendering(
    tiles_dir: Path, tmp_path: Path, suffix: str, side: int
) -> None:
    """A panorama's mosaic over the encoder's limit was rendered whole, then failed to save (a
    traceback for WebP); it is a usage error now, before the library is even built."""
    tall = tmp_path / "tall.png"
    Image.new("RGB", (1, side), (90, 90, 90)).save(tall)
    out = tmp_path / f"m{suffix}"
    result = run(
        "render",
        str(tall),
        "--library",
        str(tiles_dir),
        "--tile-size",
        "1",
        "--tiles-across",
        "1",
        "-o",
        str(out),
        "-o",
        str(tmp_path / "m.png"),
    )
    assert_clean_failure(result, f"1x{side:,} px", "at most")
    assert "rendering" not in result.output
    assert not out.exists() and not (tmp_path / "m.png").exists()


def test_a_built_library_is_cached_until_its_photos_change(
    target: Path, tiles_dir: Path, tmp_path: Path, private_cache: Path
) -> None:
    args = ["render", str(target), "--library", str(tiles_dir), "-t", "4", "--tiles-across", "24"]
    first = run(*args, "-o", str(tmp_path / "a.png"))
    assert first.exit_code == 0 and "using the cached index" not in first.output
    # eight photos cannot keep the default variety, and the render says so
    assert "note: with 8 photos a photo may sit next to itself; variety 3 needs 196 photos or more" in first.output
    assert len(list(private_cache.glob("*.zip"))) == 1
    second = run(*args, "-o", str(tmp_path / "b.png"))
    assert "using the cached index" in second.output and "8 tiles" in second.output
    assert "skipped 1 file" in second.output
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    (tiles_dir / "t_new.jpg").write_bytes(_jpeg((10, 120, 120)))
    third = run(*args, "-o", str(tmp_path / "c.png"))
    assert third.exit_code == 0 and "using the cached index" not in third.output and "9 in the library" in third.output
    uncached = run(*args, "--no-cache", "-o", str(tmp_path / "d.png"))
    assert "using the cached index" not in uncached.output


def test_a_cached_library_is_rebuilt_when_the_code_reading_photos_changes(
    tiles_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tiles built before a decoder fix (an ICC profile now converted) must not outlive it."""
    from mosaic import sources
    from photomosaics import library_cache

    decoder = tmp_path / "images.py"
    decoder.write_text("# the decoder, version 1\n")
    monkeypatch.setattr(sources, "BUILDER_MODULES", (*sources.BUILDER_MODULES, str(decoder)))  # the key's code list
    before = library_cache.source_key(tiles_dir)
    assert library_cache.source_key(tiles_dir) == before
    decoder.write_text("# the decoder, version 2\n")
    assert library_cache.source_key(tiles_dir) != before


def test_the_cache_keeps_the_libraries_used_last(private_cache: Path) -> None:
    import os

    from photomosaics import library_cache
    from tests.support.pipelines import synthetic_library

    library = synthetic_library(6)
    for n in range(library_cache.KEPT):
        library_cache.store(f"k{n}", library, [])
        os.utime(private_cache / f"k{n}.zip", (n, n))  # stored in this order, a second apart
    assert library_cache.load("k0") is not None  # used again: now the most recent
    library_cache.store("new", library, [])
    assert sorted(p.stem for p in private_cache.glob("*.zip")) == sorted(
        ["new", "k0", *(f"k{n}" for n in range(2, library_cache.KEPT))]
    )
    assert not (private_cache / "k1.json").exists()  # its notes went with it
    assert library_cache.load("k1") is None


def test_the_demo_library_is_cached_under_a_key_of_its_code_and_photos(
    target: Path, tmp_path: Path, private_cache: Path
) -> None:
    from workers.demo_library import demo_source_key

    args = ["render", str(target), "--library", "demo", "-t", "4", "--tiles-across", "24"]
    first = run(*args, "-o", str(tmp_path / "a.png"))
    assert first.exit_code == 0 and "using the cached demo library" not in first.output, first.output
    assert [p.stem for p in private_cache.glob("*.zip")] == [demo_source_key()]
    second = run(*args, "-o", str(tmp_path / "b.png"))
    assert second.exit_code == 0 and "using the cached demo library (2100 tiles)" in second.output, second.output
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()  # the same library
    assert demo_source_key(640) != demo_source_key()  # what it is built from is in the key


def test_render_with_a_zip_library_in_slices_to_jpeg(target: Path, tmp_path: Path) -> None:
    archive_path = tmp_path / "tiles.zip"
    with zipfile.ZipFile(archive_path, "w") as archive:
        for i, colour in enumerate(COLOURS):
            archive.writestr(f"photos/sub{i % 2}/t{i}.jpg", _jpeg(colour))
        archive.writestr("__MACOSX/photos/._t0.jpg", b"\0\5\26\7")
    out = tmp_path / "out.jpg"
    result = run(
        "render",
        str(target),
        "-l",
        str(archive_path),
        "-t",
        "8",
        "--tiles-across",
        "12",
        "--slices",
        "3",
        "--variety",
        "0",
        "--correction",
        "0",
        "-o",
        str(out),
    )
    assert result.exit_code == 0, result.output
    with Image.open(out) as mosaic:
        assert (mosaic.format, mosaic.size) == ("JPEG", (96, 64))


def test_a_library_whose_photos_were_all_left_out_says_why(
    target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mosaic.sources

    monkeypatch.setattr(mosaic.sources, "MAX_FILE_BYTES", 100)  # stands in for a 50 MiB photo
    archive_path = tmp_path / "big.zip"
    with zipfile.ZipFile(archive_path, "w") as archive:
        archive.writestr("huge.jpg", _jpeg((10, 20, 30)))
    result = run("render", str(target), "--library", str(archive_path), "-o", str(tmp_path / "out.jpg"))
    assert_clean_failure(result, "no usable image among 0 files", "huge.jpg: larger than")


def test_render_with_the_demo_library(target: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo.png"
    result = run("render", str(target), "--library", "demo", "--tile-size", "2", "--tiles-across", "16", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "in the library" in result.output and "note:" not in result.output  # 2,100 photos keep the variety
    with Image.open(out) as mosaic:
        assert mosaic.size == (32, 22)  # 16 across, round(64 * 16 / 96) = 11 down


def test_render_with_a_library_in_storage(
    target: Path,
    tiles_dir: Path,
    tmp_path: Path,
    storage: StorageClients,
    unique: str,
    azurite_connection_string: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dal.blobs.libraries import LibraryStore

    LibraryStore(storage, prefix=f"t{unique}").create_from("colours", "test", tiles_dir)
    monkeypatch.setenv(CONNECTION_STRING_ENV, azurite_connection_string)
    monkeypatch.setenv("PHOTOMOSAICS_NAME_PREFIX", f"t{unique}")
    out = tmp_path / "stored.png"
    result = run("render", str(target), "--library", "colours", "-t", "4", "--tiles-across", "8", "-o", str(out))
    assert result.exit_code == 0, result.output
    with Image.open(out) as mosaic:
        assert mosaic.size == (32, 20)  # round(64 * 8 / 96) = 5 rows
    assert_clean_failure(
        run("render", str(target), "--library", "nosuch", "-o", str(tmp_path / "x.png")), "does not exist"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tile-size", "0"], "0 is not in the range 1<=x<=64"),
        (["--tile-size", "65"], "65 is not in the range"),
        (["--overlay", "150"], "150 is not in the range 0<=x<=100"),
        (["--correction", "101"], "101 is not in the range 0<=x<=100"),
        (["--max-uses", "0"], "0 is not in the range x>=1"),
        (["--cell-sizes", "2,4"], "cell sizes must rise from 1"),
        (["--cell-sizes", "1,2", "--overlay", "30"], "several sizes work without an overlay"),
        (["--cell-sizes", "1,2", "--use-every-photo"], "cells of several sizes cannot use every photo"),
        (["--cell-sizes", "1,4", "--tile-size", "32"], "over the library's 64 px tiles"),
        (["--cell-sizes", "1,2", "--split", "101"], "101 is not in the range 0<=x<=100"),
        (
            ["--max-uses", "2", "--tiles-across", "12"],
            "96 cells need more than 8 tiles x 2 uses: raise max_uses to at least 12",
        ),
    ],
)
def test_bad_options_are_clear_errors(
    target: Path, tiles_dir: Path, tmp_path: Path, extra: list[str], message: str
) -> None:
    result = run("render", str(target), "--library", str(tiles_dir), "-o", str(tmp_path / "o.png"), *extra)
    assert_clean_failure(result, message)
    assert not (tmp_path / "o.png").exists()


def test_a_huge_file_that_is_no_image_is_refused_from_its_header(tiles_dir: Path, tmp_path: Path) -> None:
    """A 4 GB video given as the photo was read whole to learn that it is not one."""
    import tracemalloc

    video = tmp_path / "holiday.jpg"
    with video.open("wb") as sparse:
        sparse.truncate(1 << 30)  # 1 GiB of nothing on disk
    tracemalloc.start()
    try:
        result = run("render", str(video), "--library", str(tiles_dir), "-o", str(tmp_path / "o.png"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_clean_failure(result, "holiday.jpg: not an image in an accepted format")
    assert peak < 64 << 20, f"{peak >> 20} MiB held to refuse a 1 GiB file"


def test_slices_are_limited_by_the_setting(
    target: Path, tiles_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOTOMOSAICS_MAX_SLICES", "2")
    result = run("render", str(target), "--library", str(tiles_dir), "-o", str(tmp_path / "o.png"), "--slices", "3")
    assert_clean_failure(result, "at most 2 slices (PHOTOMOSAICS_MAX_SLICES), got 3")
    assert not (tmp_path / "o.png").exists()


def test_missing_and_broken_inputs_are_clear_errors(
    target: Path, tiles_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = str(tmp_path / "o.png")
    assert_clean_failure(
        run("render", str(tmp_path / "nope.jpg"), "--library", str(tiles_dir), "-o", out), "does not exist"
    )
    not_image = tmp_path / "notes.jpg"
    not_image.write_text("hello")
    assert_clean_failure(run("render", str(not_image), "--library", str(tiles_dir), "-o", out), "not an image")
    truncated = tmp_path / "cut.jpg"
    truncated.write_bytes(target.read_bytes()[:300])
    assert_clean_failure(run("render", str(truncated), "--library", str(tiles_dir), "-o", out), "cut.jpg")
    assert_clean_failure(
        run("render", str(target), "--library", str(tiles_dir), "-o", str(tmp_path / "o.bmpx")), "unknown image type"
    )
    assert_clean_failure(
        run("render", str(target), "--library", str(tiles_dir), "-o", str(tmp_path / "no" / "o.png")), "does not exist"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.txt").write_text("no photos")
    assert_clean_failure(run("render", str(target), "--library", str(empty), "-o", out), "no usable image")
    monkeypatch.delenv(CONNECTION_STRING_ENV, raising=False)
    assert_clean_failure(run("render", str(target), "--library", "holiday", "-o", out), CONNECTION_STRING_ENV)
    assert not Path(out).exists()


def test_render_with_fair_use_places_no_tile_more_than_max_uses_times(
    target: Path, tiles_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "fair.png"
    args = [
        "render",
        str(target),
        "--library",
        str(tiles_dir),
        "--tile-size",
        "8",
        "--tiles-across",
        "4",
        "--correction",
        "0",
    ]
    result = run(*args, "--max-uses", "1", "--slices", "2", "-o", str(out))  # 4 x 3 = 12 cells, 8 tiles x 1 use
    assert_clean_failure(result, "12 cells need more than 8 tiles x 1 uses")
    assert run(*args, "--max-uses", "2", "--slices", "2", "-o", str(out)).exit_code == 0
    with Image.open(out) as mosaic:
        cells = np.asarray(mosaic.convert("RGB")).reshape(3, 8, 4, 8, 3)[:, 4, :, 4].reshape(-1, 3)  # flat tiles
    _, counts = np.unique(cells, axis=0, return_counts=True)
    assert counts.max() <= 2 and counts.sum() == 12


def test_a_render_writes_the_same_bytes_for_any_slicing(target: Path, tiles_dir: Path, tmp_path: Path) -> None:
    from mosaic.deepzoom import write_dzi
    from mosaic.render import render
    from photomosaics.render_library import load_library
    from workers.imaging.slicing import encode_output

    out = tmp_path / "m.jpg"
    result = run(
        "render",
        str(target),
        "--library",
        str(tiles_dir),
        "--tile-size",
        "16",
        "--tiles-across",
        "100",
        "--slices",
        "3",
        "--seed",
        "s",
        "-o",
        str(out),
        "-o",
        str(tmp_path / "m.dzi"),
    )
    assert result.exit_code == 0, result.output
    assert "it needs about" in result.output and "GB of memory" in result.output
    image = Image.open(target).convert("RGB")
    mosaic = render(image, load_library(str(tiles_dir), echo=False), tile_size=16, tiles_across=100, seed="s", slices=1)
    assert out.read_bytes() == encode_output(mosaic), "the pipeline's JPEG encoder and options, one slice or three"
    write_dzi(mosaic, tmp_path / "e.dzi")
    for tile in (tmp_path / "e_files").rglob("*.jpg"):
        assert (tmp_path / "m_files" / tile.relative_to(tmp_path / "e_files")).read_bytes() == tile.read_bytes()


def test_a_render_too_big_for_memory_is_refused_before_any_work(
    target: Path, tiles_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from photomosaics import render_outputs

    monkeypatch.setattr(render_outputs, "RENDER_BYTES_PER_PIXEL", 1e15)
    out = tmp_path / "m.jpg"
    result = run(
        "render", str(target), "--library", str(tiles_dir), "--tile-size", "4", "--tiles-across", "24", "-o", str(out)
    )
    assert_clean_failure(result, "needs about", "through the pipeline", "photomosaics run")
    assert not out.exists()


def test_render_writes_the_tile_map_of_the_placement_it_rendered(target: Path, tiles_dir: Path, tmp_path: Path) -> None:
    import csv

    from mosaic.images import open_image
    from mosaic.render import placed_tiles, render_with_placement
    from photomosaics.render_library import load_library

    out, tile_map = tmp_path / "m.png", tmp_path / "map.csv"
    args = [
        "render",
        str(target),
        "--library",
        str(tiles_dir),
        "--tile-size",
        "16",
        "--tiles-across",
        "12",
        "--slices",
        "3",
    ]
    result = run(*args, "--seed", "s", "-o", str(out), "--tile-map", str(tile_map))
    assert result.exit_code == 0, result.output
    assert "wrote " + str(tile_map) + " (12x8 cells" in result.output

    library = load_library(str(tiles_dir))
    pixels, choice = render_with_placement(
        open_image(target.read_bytes()), library, tile_size=16, tiles_across=12, slices=3, seed="s"
    )
    with Image.open(out) as image:
        assert np.array_equal(np.asarray(image.convert("RGB")), pixels)
    which, mirrored = placed_tiles(choice, library)
    with tile_map.open(newline="") as listed:
        rows = list(csv.reader(listed))
    assert rows[0] == ["col", "row", "tile", "mirrored"] and len(rows) == 1 + 12 * 8
    for col, row, name, flipped in rows[1:]:
        c, r = int(col), int(row)
        assert (name, flipped) == (library.names[which[r, c]], str(int(mirrored[r, c])))
    assert_clean_failure(
        run(*args, "-o", str(out), "--tile-map", str(tmp_path / "nowhere" / "map.csv")), "does not exist"
    )


def test_cells_of_several_sizes_reach_the_engine_and_the_tile_map_gives_their_rectangles(
    tiles_dir: Path, tmp_path: Path
) -> None:
    import csv

    calm = tmp_path / "calm.png"  # a flat half: large cells; a striped half: small ones
    image = Image.new("RGB", (64, 32), (240, 220, 40))
    for x in range(32, 64, 2):
        image.paste((20, 20, 20), (x, 0, x + 1, 32))
    image.save(calm)
    out, tile_map = tmp_path / "m.png", tmp_path / "map.csv"
    args = ["render", str(calm), "--library", str(tiles_dir), "-t", "8", "--tiles-across", "16", "--variety", "0"]
    result = run(*args, "--cell-sizes", "1,2,4", "-o", str(out), "--tile-map", str(tile_map))
    assert result.exit_code == 0, result.output
    with tile_map.open(newline="") as stream:
        rows = list(csv.reader(stream))
    assert rows[0] == ["col", "row", "tile", "mirrored", "size"]
    sizes = {(int(r[0]), int(r[1])): int(r[4]) for r in rows[1:]}
    assert sizes[(0, 0)] == 4 and sizes[(15, 7)] == 1
    assert sum(s * s for s in sizes.values()) == 16 * 8  # the cells cover the grid once


def test_render_using_every_photo_places_each_one_or_names_the_tiles_across_it_needs(
    target: Path, tiles_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "every.png"
    args = ["render", str(target), "--library", str(tiles_dir), "--tile-size", "8", "--correction", "0"]
    result = run(*args, "--use-every-photo", "--tiles-across", "3", "-o", str(out))  # 3 x 2 = 6 cells, 8 photos
    assert_clean_failure(result, "choose at least 4 tiles across to use every photo")
    assert not out.exists()
    assert run(*args, "--use-every-photo", "--tiles-across", "4", "-o", str(out)).exit_code == 0
    with Image.open(out) as mosaic:
        cells = np.asarray(mosaic.convert("RGB")).reshape(3, 8, 4, 8, 3)[:, 4, :, 4].reshape(-1, 3)  # flat tiles
    assert len(np.unique(cells, axis=0)) == 8  # every one of the 8 photos, in 12 cells
