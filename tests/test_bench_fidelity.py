"""The fidelity benchmark's measures: they see what they claim to see."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from benchmarks import fidelity
from mosaic import RenderOptions, render_with_placement
from mosaic.library_features import candidate_tiles
from tests.engine.conftest import random_library


def _target() -> Image.Image:
    import skimage.data

    return Image.fromarray(skimage.data.astronaut()).resize((192, 192))


def test_tiles_placed_untouched_are_all_recognisable_and_the_overlay_is_not() -> None:
    library = random_library(120, seed=5)
    target = _target()
    candidates = candidate_tiles(library, 16, RenderOptions())
    kwargs = {"tile_size": 16, "tiles_across": 12, "seed": "f"}
    plain, choice = render_with_placement(target, library, options=RenderOptions(correction=0), **kwargs)
    scores = fidelity.job_scores(plain, target, candidates, choice)
    assert scores["recognisable"] == 1.0 and scores["contrast"] == 1.0 and scores["colour_moved"] < 1e-6
    painted, same = render_with_placement(target, library, options=RenderOptions(correction=0, overlay=90), **kwargs)
    overlaid = fidelity.job_scores(painted, target, candidates, same)
    assert overlaid["recognisable"] < 0.5  # the fake mosaic: tiles no longer photographs...
    assert overlaid["delta_e"] < scores["delta_e"] / 2  # ...and closer to the photo from afar


def test_another_program_s_tiles_are_identified_mirror_included() -> None:
    library = random_library(60, seed=6)
    candidates = fidelity.candidates_of(library.tiles(16))
    rng = np.random.default_rng(2)
    placed = rng.integers(0, len(candidates), (5, 7))
    mosaic = candidates[placed].transpose(0, 2, 1, 3, 4).reshape(5 * 16, 7 * 16, 3)
    assert np.array_equal(fidelity.identify(mosaic, candidates), placed.ravel())


def test_window_share_and_goals() -> None:
    tiles = np.arange(16 * 16).reshape(16, 16)
    assert fidelity.window_share(tiles) == 1 / 64
    tiles[:8, :8] = 7
    assert fidelity.window_share(tiles) == 1.0
    good = {
        "recognisable": 1.0,
        "contrast": 1.0,
        "colour_moved": 3.0,
        "window_share": 0.06,
        "delta_e": 3.0,
        "ssim": 0.9,
    }
    assert all(fidelity.goal_checks(good, {"delta_e": 5.0, "ssim": 0.8}).values())
    assert not fidelity.goal_checks({**good, "colour_moved": 6.0}, None)["colour_moved"]


def test_a_smaller_library_is_the_first_tiles_of_the_unseen_one() -> None:
    from benchmarks.engine import _library_tiles

    tiles, origin = _library_tiles(("astronaut",), 40)
    assert len(tiles) == 40 and "first 40 tiles" in origin
    assert not any("astronaut" in name for name, _ in tiles)


def test_the_library_size_must_be_a_number_of_tiles() -> None:
    import subprocess
    import sys

    for given in ("0", "many"):
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.fidelity", "sweep", "--library", given],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1
        assert f"--library takes a number of tiles (1 or more), got '{given}'" in done.stderr


def test_a_photo_and_a_library_of_your_own(tmp_path) -> None:
    from benchmarks.fidelity import _own_library
    from benchmarks.photos import photo, slug

    rng = np.random.default_rng(3)
    folder = tmp_path / "my photos"
    folder.mkdir()
    for number in range(12):
        Image.fromarray(rng.integers(0, 256, (40, 60, 3), np.uint8)).save(folder / f"holiday {number}.jpg")
    (folder / "notes.txt").write_text("not a photo")
    library, tile_dir, origin = _own_library(folder, tmp_path / "tiles")
    assert len(library) == 12 and str(folder) in origin and "notes.txt" in origin
    files = sorted(tile_dir.iterdir())  # metapixel's tiles: the very square crops ours uses
    assert len(files) == 12
    with Image.open(files[5]) as tile:
        assert np.array_equal(np.asarray(tile), library.atlas[5])

    upright = tmp_path / "portrait.jpg"  # stored sideways, as cameras do, with EXIF orientation 6
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rng.integers(0, 256, (30, 50, 3), np.uint8)).save(upright, exif=exif)
    assert photo(f"file:{upright}").size == (30, 50)
    assert slug(f"file:{upright}") == "file-portrait" and slug("dark:coffee") == "dark-coffee"


def test_your_own_photo_and_library_are_checked_before_the_work(tmp_path) -> None:
    import subprocess
    import sys

    cases = {
        ("frontier", "--library-dir", str(tmp_path)): f"{tmp_path}: no usable image among 0 files",
        ("--photo", "file:/nowhere/x.jpg"): "--photo file:/nowhere/x.jpg: cannot read /nowhere/x.jpg as a photo",
        ("--library-dir", "/nowhere"): "--library-dir /nowhere: no such folder or zip",
        ("--library", "5", "--library-dir", "/"): "--library (the demo library's first tiles) and --library-dir",
        ("--photo",): "--photo needs a value",
        ("12MP",): "12MP: not understood here",  # sweep runs at 1 MP only
        ("frontier", "7", "1MP"): "7: not understood here",
        ("frontier", "1MP", "4MP"): "frontier measures one job",
        ("frontier", "--library", "40"): "--library N is for the quality run and sweep",
    }
    for given, said in cases.items():
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.fidelity", *(given if given[0] == "frontier" else ("sweep", *given))],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1 and said in done.stdout + done.stderr, (given, done.stdout, done.stderr)
    done = subprocess.run([sys.executable, "-m", "benchmarks.fidelity", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m benchmarks.fidelity")


def test_the_held_out_library_takes_each_picture_once_as_square_crops(tmp_path) -> None:
    from benchmarks import wallpapers

    rng = np.random.default_rng(4)

    def picture(path, size) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), np.uint8)).save(path)

    images = tmp_path / "usr/share/wallpapers/Lake/contents/images"
    picture(images / "1920x1080.png", (1920, 1080))
    picture(images / "1280x1024.png", (320, 256))  # a smaller size of the same picture
    (images / "1024x768.png").symlink_to("1920x1080.png")  # sorts first: kept, were links not skipped
    picture(tmp_path / "usr/share/wallpapers/Lake/contents/images_dark/1920x1080.png", (400, 225))
    picture(tmp_path / "usr/share/backgrounds/Dune_3840x2160.png", (640, 360))
    picture(tmp_path / "usr/share/backgrounds/Dune.png", (320, 180))
    picture(tmp_path / "usr/share/backgrounds/thumbnail.png", (20, 20))  # under SMALLEST
    chosen = wallpapers.pictures(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in chosen] == [
        "usr/share/backgrounds/Dune_3840x2160.png",
        "usr/share/wallpapers/Lake/contents/images/1920x1080.png",
    ]
    out = tmp_path / "crops"
    assert wallpapers.write_library(tmp_path, out) == 2 * wallpapers.PER_SIDE**2
    sizes = set()
    for crop in out.iterdir():
        with Image.open(crop) as image:
            sizes.add(image.size)
    assert sizes == {(wallpapers.TILE, wallpapers.TILE)}


def test_the_astronomy_library_takes_the_deep_sky_photos_and_the_bodies_maps_only(tmp_path) -> None:
    from benchmarks import astronomy

    def picture(path, size, mode="RGB") -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new(mode, size, 90).save(path)

    picture(tmp_path / astronomy.DEEP_SKY / "m42.png", (512, 512))
    picture(tmp_path / astronomy.DEEP_SKY / "abell31.png", (256, 256), "L")
    picture(tmp_path / astronomy.TEXTURES / "mars.png", (2048, 1024))
    picture(tmp_path / astronomy.TEXTURES / "gear.png", (64, 64))  # an icon, not a body
    picture(tmp_path / astronomy.TEXTURES / "saturn_rings_radial.png", (512, 16))
    (tmp_path / astronomy.TEXTURES / "moon.png").symlink_to("mars.png")  # a link: not a picture of its own
    chosen = astronomy.pictures(tmp_path)
    assert [p.name for p in chosen] == ["abell31.png", "m42.png", "mars.png"]
    out = tmp_path / "library"
    assert astronomy.write_library(tmp_path, out) == 3
    written = {}
    for path in out.iterdir():
        with Image.open(path) as image:
            written[path.name] = (image.format, image.mode, image.size)
    assert written == {
        "deep-sky-abell31.jpg": ("JPEG", "RGB", (256, 256)),
        "deep-sky-m42.jpg": ("JPEG", "RGB", (512, 512)),
        "body-mars.jpg": ("JPEG", "RGB", (astronomy.LONGEST, astronomy.LONGEST // 2)),
    }


def test_the_reach_benchmark_judges_again_with_a_held_out_library_and_refuses_rows_of_another(tmp_path) -> None:
    from benchmarks import reach

    library = tmp_path / "held-out"
    library.mkdir()
    for i in range(24):  # 24 greys and blues: a narrow library
        Image.new("RGB", (64, 64), (10 * i, 10 * i, 40 + 8 * i)).save(library / f"{i:02d}.jpg")
    row = {"photo": "coffee", "library": "held-out", "tiles": 24, "warn": False}
    row |= {"far_delta_e": 9.0, "far_ssim": 0.9, "metapixel_delta_e": 8.0, "metapixel_ssim": 0.8}
    (judged,) = reach.judge([row], None, library)
    assert judged["library"] == "held-out" and judged["far_delta_e"] == 9.0  # the far scores kept
    assert judged["preview_delta_e"] > 0 and judged["nearest_delta_e"] > 0
    assert judged["warn"] == (judged["preview_delta_e"] > judged["nearest_delta_e"])
    with pytest.raises(SystemExit, match="rows of the demo library; give the same --library-dir"):
        reach.judge([{**row, "library": "demo"}], None, library)
