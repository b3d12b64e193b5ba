"""The whole product in a real headless Chromium: upload a photo, choose settings, watch the
progress reach 100 % with real controller, processor and responder processes, see the mosaic,
zoom into it with the deep-zoom viewer (OpenSeadragon on the job's pyramid) down to single
tiles, click one to learn which library photo it is, download it and check the file is that mosaic. Screenshots of every step go to
``artifacts/screenshots/`` (git-ignored), at laptop and phone widths.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pillow_heif
import pytest
from PIL import Image

from tests.support.prereqs import require
from tests.web.conftest import SHOTS, enter_operator_token

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PHONE = {"width": 390, "height": 844}


def photo_file(tmp_path: Path) -> Path:
    """A real photograph: the cat from scikit-image's sample data, as JPEG."""
    from workers.demo_library import _package_dir

    skimage = _package_dir("skimage")
    require(skimage is not None, "scikit-image is not installed (pip install -e '.[test]')")
    assert skimage is not None
    path = tmp_path / "cat.jpg"
    with Image.open(skimage / "data" / "chelsea.png") as image:
        image.convert("RGB").save(path, "JPEG", quality=92)
    return path


def wait_until(page: Any, expression: str, timeout: float = 30.0) -> None:
    """Poll ``expression`` until it is true. Playwright's ``wait_for_function`` would compile it
    with ``eval`` inside the page, which the app's CSP (rightly) forbids."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        page.wait_for_timeout(100)


def shot(page: Any, name: str, *, full_page: bool = True) -> None:
    if full_page:  # from the top, or the sticky header lands mid-picture
        page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)


def test_make_a_mosaic_in_the_browser(live_app: dict[str, Any], browser_context: Any, tmp_path: Path) -> None:
    base = live_app["url"]
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: "Content Security Policy" in msg.text and errors.append(msg.text))

    page.goto(base + "/")
    page.locator('.library-option[data-library="demo"]').wait_for()
    shot(page, "01-create-empty")

    # A file the browser cannot read is still sent; the server's refusal is shown, nothing is made.
    notes = tmp_path / "notes.txt"
    notes.write_text("not a photo")
    page.set_input_files("#image", str(notes))
    page.locator("#final-dims").filter(has_text="planned on upload").wait_for()
    page.locator("#submit").click()
    page.locator("#form-error").filter(has_text="not an image").wait_for()
    assert page.url == base + "/"
    shot(page, "02a-create-refused")

    # An iPhone's photo (HEIC): Chromium cannot show it, so the server reads it (POST /api/plan
    # answers its size and a small picture beside the reach): the picture is shown and the grid
    # is planned as for any other photo.
    heic = tmp_path / "IMG_0001.HEIC"
    with Image.open(photo_file(tmp_path)) as source:
        pillow_heif.from_pillow(source.convert("RGB")).save(heic, format="HEIF", quality=80)
    page.set_input_files("#image", str(heic))
    page.locator("#photo-info").filter(has_text="shown as the server read it").wait_for()
    page.locator("#final-dims").filter(has_text="×").wait_for()
    with Image.open(photo_file(tmp_path)) as source:
        info = page.locator("#photo-info").inner_text()
        assert f"{source.width:,} × {source.height:,} px" in info
        assert f" · {max(1, math.floor(heic.stat().st_size / 1024 + 0.5))} KB · " in info, info  # not "0.0 MB"
        shown = page.locator("#preview").evaluate("img => [img.hidden, img.naturalWidth, img.naturalHeight]")
        assert shown[0] is False and shown[1] > 0, shown
        assert abs(shown[1] / shown[2] - source.width / source.height) < 0.02, shown  # the photo, upright
    shot(page, "02-create-heic")

    page.set_input_files("#image", str(photo_file(tmp_path)))
    page.locator("#final-dims").filter(has_text="×").wait_for()
    page.locator('.library-option[data-library="demo"]').click()
    page.locator("#tile_size").fill("12")
    # The print planner: an A4 print at 30 DPI with 12 px tiles is round(21 / 2.54 * 30 / 12) = 21 tiles across.
    page.locator("#print-planner summary").click()
    page.locator("#paper").select_option("21")
    page.locator("#dpi").fill("30")
    page.locator("#print-out").filter(has_text="21 tiles across of 12 px").wait_for()
    page.locator("#print-use").click()
    page.locator("#final-dims").filter(has_text="252 ×").wait_for()  # 21 tiles of 12 px
    assert page.locator("#tiles_across").input_value() == "21"
    page.locator("#print-back").filter(has_text="(21 tiles across) prints 21.34 cm wide at 30 DPI").wait_for()
    shot(page, "02b-print-planner")
    # The product's defaults: tiles big enough to see what each photo shows when zoomed in, and
    # enough of them across for the photo to read from afar.
    page.locator("#tile_size").fill("32")
    page.locator("#tiles_across").fill("100")
    page.locator("#final-dims").filter(has_text="3,200 ×").wait_for()
    # Before the job the page asks whether the library reaches the photo's colours (POST /api/plan):
    # the demo library reaches the cat's, so nothing is said.
    page.locator('#reach[data-checked^="demo:"]').wait_for(state="attached")
    assert page.locator("#reach").is_hidden()
    # 67 rows of tiles are one part of the grid (mosaic.parts): one slice, whatever the slider asked.
    page.locator("#slices").fill("4")
    assert page.locator("#slices").get_attribute("max") == "1" and page.locator("#slices_out").inner_text() == "1"
    # Tiles <-> photo: the example tiles (three of the library's photos) follow the slider.
    wait_until(page, "document.querySelectorAll('#correction-swatches canvas').length === 3")
    page.locator("#correction").fill("30")
    page.locator("#correction_out").filter(has_text="30 %").wait_for()
    assert page.locator("#correction-swatches").get_attribute("data-percent") == "30"
    # ... and back to the default, which the job is made with: the screenshots show what a person gets.
    page.locator("#correction").fill("50")
    page.locator("#correction_out").filter(has_text="50 %").wait_for()
    assert page.locator("#correction-swatches").get_attribute("data-percent") == "50"
    shot(page, "02-create-ready")

    # The form sends the slider's value. Chromium does not show a multipart body with a file to
    # the test, so the page keeps the value it appends (in sessionStorage: the page then moves on).
    page.evaluate(
        """() => {
          const append = FormData.prototype.append;
          FormData.prototype.append = function (name, value) {
            if (name === "correction") sessionStorage.setItem("sentCorrection", value);
            return append.apply(this, arguments);
          };
        }"""
    )
    page.locator("#submit").click()
    page.wait_for_url("**/jobs/*")
    assert page.evaluate("sessionStorage.getItem('sentCorrection')") == "50"
    request_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    page.locator(".band").first.wait_for()
    assert page.locator(".band").count() == 1
    # (attached: a one-slice job may be done, and the stage hidden for the viewer, before a screenshot)
    page.locator(".band img").first.wait_for(state="attached", timeout=60_000)
    page.wait_for_timeout(200)  # the slice fades in
    shot(page, "03-progress")  # usually with some slices in place and others still waiting

    page.locator("#viewer-card").wait_for(state="visible", timeout=90_000)
    assert page.locator("#percent").inner_text() == "100 %"
    assert page.locator("#status").inner_text().lower() == "done"
    wait_until(page, "document.getElementById('viewport').dataset.loaded === '1'", timeout=60)
    page.locator("details.log summary").click()
    wait_until(page, "document.querySelectorAll('#events tr').length >= 3")  # refreshed after the end event
    shot(page, "04-result")

    job = page.request.get(f"{base}/api/jobs/{request_id}").json()
    assert (job["status"], job["progress"], job["slices_done"]) == ("done", 1, [0])
    width, height = job["output_width"], job["output_height"]
    assert (width, job["tile_size"], job["tiles_across"]) == (3200, 32, 100)
    assert "colour correction 50 %" in job["events"][0]["message"]

    # The deep-zoom viewer (OpenSeadragon from npm) opened the job's pyramid, at full view...
    dzi = page.request.get(f"{base}{job['dzi_url']}")
    assert dzi.status == 200 and f'Width="{width}"' in dzi.text()
    assert page.locator("#viewport canvas").count() >= 1
    full_view = float(page.locator("#viewport").get_attribute("data-image-zoom"))
    assert 0 < full_view < 2
    page.locator("#viewport").scroll_into_view_if_needed()
    shot(page, "04b-deepzoom-full-view", full_page=False)

    # ... and "Tiles" zooms until one mosaic tile (32 px) is about 120 screen px: single tiles.
    page.locator("#zoom-tile").click()
    wait_until(page, "Math.abs(Number(document.getElementById('viewport').dataset.imageZoom) - 120 / 32) < 0.05")
    wait_until(page, "document.getElementById('viewport').dataset.loaded === '1'", timeout=30)
    box = page.locator("#viewport").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2 - 150, box["y"] + box["height"] / 2 - 80, steps=5)
    page.mouse.up()
    page.wait_for_timeout(1500)  # the pan animation settles and its tiles load
    wait_until(page, "document.getElementById('viewport').dataset.loaded === '1'", timeout=30)
    shot(page, "05-zoomed-to-tiles", full_page=False)
    # The viewer asked the app for top-level pyramid tiles (510 px each).
    top = math.ceil(math.log2(max(width, height)))
    tile = page.request.get(f"{base}/api/jobs/{request_id}/dzi_files/{top}/1_0.jpg")
    assert tile.status == 200 and tile.headers["content-type"] == "image/jpeg"

    # Which photo is this? A click on a tile names it and shows the library photo, as the
    # engine placed it (the job's tile map, read from storage here).
    # (by the element: the viewer took the focus on the drag, and the page scrolled to it)
    page.locator("#viewport").click(position={"x": box["width"] * 0.4, "y": box["height"] * 0.45})
    page.locator("#tile-info").wait_for(state="visible")
    wait_until(
        page, "document.getElementById('tile-photo').complete && document.getElementById('tile-photo').naturalWidth > 0"
    )
    where = page.locator("#tile-where").inner_text()
    col, row = (int(n) - 1 for n in where.removeprefix("tile ").split(" (")[0].split(", "))
    from dal.blobs.tile_maps import TileMap, load_job_map

    stored = load_job_map(live_app["pipeline"].services.blobs.download, request_id, job["slices"])
    name, _, mirrored = TileMap.decode(stored).at(col, row)
    assert page.locator("#tile-name").inner_text() == name
    assert ("placed mirrored" in where) == mirrored
    shot(page, "05b-which-photo", full_page=False)
    tile_map = TileMap.decode(stored)
    every_place_of_the_clicked_photo(page, tile_map, name, (col, row))
    find_a_photo_by_name(page, tile_map, name)
    page.locator("#zoom-fit").click()
    zip_link = page.locator("#download-zip")
    assert zip_link.is_visible() and zip_link.get_attribute("href") == job["pyramid_url"]

    with page.expect_download() as download_info:
        page.locator("#download").click()
    download = download_info.value
    downloaded = Path(download.path()).read_bytes()
    served = page.request.get(f"{base}/api/jobs/{request_id}/result").body()
    assert downloaded == served
    assert download.suggested_filename == f"mosaic-{request_id[:8]}.jpg"
    stored = live_app["pipeline"].services.blobs.download("imageoutput", f"{request_id}.jpg")
    assert downloaded == stored
    with Image.open(io.BytesIO(downloaded)) as image:
        assert (image.format, image.size) == ("JPEG", (width, height))

    page.goto(base + "/jobs")
    page.locator(f'.tile-card[data-request-id="{request_id}"]').wait_for()
    wait_until(page, "[...document.querySelectorAll('.tile-card img')].every(i => i.complete && i.naturalWidth > 0)")
    shot(page, "06-gallery")
    page.goto(base + "/libraries")
    page.locator('.library-cards [data-library="demo"] img').first.wait_for()
    wait_until(
        page, "[...document.querySelectorAll('.library-cards img')].every(i => i.complete && i.naturalWidth > 0)"
    )
    assert page.locator('.library-cards [data-library="demo"] img').count() == 24
    shot(page, "07-libraries")
    # A library of the person's own photos: uploaded straight to storage, indexed by the
    # indexer role (tests/web/test_browser_uploads.py follows the upload itself).
    photos = []
    for i, colour in enumerate([(200, 40, 40), (40, 160, 60), (30, 60, 200), (230, 200, 40)]):
        path = tmp_path / f"holiday-{i}.png"
        Image.new("RGB", (120, 90), colour).save(path)
        photos.append(str(path))
    page.locator("#lib-name").fill("holiday")
    page.locator("#lib-description").fill("Four flat colours")
    page.set_input_files("#lib-files", photos)
    assert page.locator("#lib-chosen").inner_text().startswith("4 photos")
    page.locator("#lib-submit").click()
    page.locator('.library-photos[data-library="holiday"][data-pending="0"]').wait_for(timeout=60_000)
    assert "4 indexed" in page.locator(".library-photos [role=status]").inner_text()
    page.locator('.library-cards [data-library="holiday"] h2 small').filter(has_text="4 tiles").wait_for()
    # Four photos cannot keep the no-repeat rule, and the card says so; the demo library can.
    note = "Few photos: a photo may sit next to itself. With 196 photos or more, no photo repeats within 3 tiles."
    assert page.locator('.library-cards [data-library="holiday"] .repeat-note').inner_text() == note
    assert page.locator('.library-cards [data-library="demo"] .repeat-note').count() == 0
    wait_until(
        page, "[...document.querySelectorAll('.library-cards img')].every(i => i.complete && i.naturalWidth > 0)"
    )
    shot(page, "07b-library-created")
    page.goto(base + "/queues")
    enter_operator_token(page)
    page.locator('tr[data-queue="imagerequest"]').wait_for()
    shot(page, "08-queues")

    phone = browser_context.new_page()
    phone.set_viewport_size(PHONE)
    phone.on("pageerror", lambda exc: errors.append(str(exc)))
    phone.on("console", lambda msg: "Content Security Policy" in msg.text and errors.append(msg.text))
    for path, name, ready in [
        ("/", "09-phone-create", '.library-option[data-library="demo"]'),
        (f"/jobs/{request_id}", "10-phone-result", "#viewer-card"),
        ("/jobs", "11-phone-gallery", ".tile-card"),
    ]:
        phone.goto(base + path)
        phone.locator(ready).first.wait_for(state="visible")
        phone.wait_for_timeout(300)  # let images paint before the screenshot
        shot(phone, name)
        overflow = phone.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} scrolls sideways on a phone by {overflow}px"
    assert errors == []
    assert browser_context.violations == [], "the page broke its Content-Security-Policy"
    headers = page.request.get(base + "/").headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]


def test_use_every_photo_shows_the_tiles_across_it_needs_and_a_too_small_grid_is_refused(
    live_app: dict[str, Any], browser_context: Any, tmp_path: Path
) -> None:
    from mosaic.cover import smallest_tiles_across

    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(live_app["url"] + "/")
    page.locator('.library-option[data-library="demo"]').wait_for()
    page.set_input_files("#image", str(photo_file(tmp_path)))  # chelsea: 451 x 300
    page.locator("#final-dims").filter(has_text="×").wait_for()
    page.locator('.library-option[data-library="demo"]').click()
    page.locator("#tile_size").fill("12")
    page.locator("#tiles_across").fill("40")
    page.locator("#print-planner summary").click()
    # The planner above the box answers the new grid a moment later, and its longer lines move
    # the box down: a click meanwhile lands where the box was (CI: "did not change its state").
    page.locator("#print-back").filter(has_text="The current detail (40 tiles across)").wait_for()
    assert page.locator("#print-every").is_hidden()  # only while the option is ticked
    page.locator("#use_every_photo").check()
    photos = live_app["pipeline"].services.libraries.info("demo").tile_count  # no groups: every tile a photo
    need = smallest_tiles_across(451, 300, tile_size=12, groups=photos)
    page.locator("#print-every").filter(
        has_text=f"{photos:,} photos need at least {need} tiles across of 12 px (now 40: too few)."
    ).wait_for()
    shot(page, "02c-use-every-photo")
    page.locator("#submit").click()  # 40 across: too few cells, refused before anything is stored
    page.locator("#form-error").filter(has_text=f"choose at least {need} tiles across to use every photo").wait_for()
    assert page.url == live_app["url"] + "/"
    page.locator("#tiles_across").fill(str(need))
    page.locator("#print-every").filter(has_text=f"(now {need}: enough).").wait_for()
    page.locator("#use_every_photo").uncheck()
    page.locator("#print-every").wait_for(state="hidden")
    assert not errors and not browser_context.violations


def test_mixed_photo_sizes_are_offered_where_the_tile_size_allows_and_the_job_gets_them(
    live_app: dict[str, Any], browser_context: Any, tmp_path: Path
) -> None:
    """ "Photo sizes": a large cell is drawn from the library's 64 px tiles, so 4x needs tiles of
    at most 16 px and 2x of 32; mixed sizes turn fair use and "use every photo" off; the print
    planner says how large the large photos print; the job is made with the sizes chosen."""
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(live_app["url"] + "/")
    page.locator('.library-option[data-library="demo"]').wait_for()
    page.set_input_files("#image", str(photo_file(tmp_path)))
    page.locator("#final-dims").filter(has_text="×").wait_for()
    page.locator('.library-option[data-library="demo"]').click()
    options = '#cell_sizes option[value="{}"]'
    page.locator("#tile_size").fill("40")
    assert page.locator(options.format("1,2")).is_disabled() and page.locator(options.format("1,2,4")).is_disabled()
    page.locator("#cell_sizes_words").filter(has_text="need tiles of at most 32 px").wait_for()
    page.locator("#tile_size").fill("32")
    assert page.locator(options.format("1,2")).is_enabled() and page.locator(options.format("1,2,4")).is_disabled()
    page.locator("#cell_sizes").select_option("1,2")
    page.locator("#tile_size").fill("33")  # the chosen sizes no longer fit: back to one size
    assert page.locator("#cell_sizes").input_value() == "1" and page.locator("#split_field").is_hidden()
    page.locator("#tile_size").fill("12")
    page.locator("#tiles_across").fill("40")
    page.locator("#print-planner summary").click()
    page.locator("#use_every_photo").check()
    page.locator("#print-every").wait_for()  # what "every photo" needs, while it is ticked
    page.locator("#cell_sizes").select_option("1,2,4")
    page.locator("#print-every").wait_for(state="hidden")  # and not once mixed sizes turned it off
    assert page.locator("#split_field").is_visible()
    assert page.locator("#max_uses").is_disabled() and page.locator("#use_every_photo").is_disabled()
    page.locator("#split").fill("60")
    page.locator("#paper").select_option("21")
    page.locator("#dpi").fill("30")
    # 12 px at 30 DPI: 10.2 mm a tile, 40.6 mm a photo four tiles wide.
    page.locator("#print-out").filter(
        has_text="Each photo prints 10.2 mm wide, the large ones up to 40.6 mm."
    ).wait_for()
    shot(page, "02d-mixed-photo-sizes")
    page.locator("#submit").click()
    page.wait_for_url("**/jobs/*")
    request_id = page.url.rsplit("/", 1)[1]
    job = page.request.get(f"{live_app['url']}/api/jobs/{request_id}").json()
    assert job["cell_sizes"] == [1, 2, 4] and job["tile_size"] == 12 and job["tiles_across"] == 40
    assert "cells of 1, 2 and 4 tiles (split 60)" in job["events"][0]["message"]
    assert not errors and not browser_context.violations


def test_a_mosaic_too_big_for_a_jpeg_offers_its_zip_and_a_reduced_jpeg(
    app: Any, browser_context: Any, web_storage: Any, web_settings: Any, tmp_path: Path
) -> None:
    """A panorama over JPEG's 65,500 px a side (only its pyramid exists): its page opens the
    viewer and offers the zip as the download and a reduced JPEG, never a JPEG that cannot be."""
    from tests.web.conftest import LIBRARY, png_bytes, served
    from tests.web.test_api_pyramid import client_of, finish_with_pyramid
    from webapp.csrf import CSRF_HEADER, CSRF_VALUE

    with served(app) as base:
        page = browser_context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(base + "/jobs")  # the browser gets its client-id cookie
        created = page.request.post(
            f"{base}/api/jobs",
            headers={CSRF_HEADER: CSRF_VALUE},
            multipart={
                "image": {"name": "photo.png", "mimeType": "image/png", "buffer": png_bytes(64, 48)},
                "library": LIBRARY,
                "tile_size": "8",
                "slices": "1",
            },
        )
        assert created.status == 202, created.text()
        request_id = created.json()["request_id"]
        cookie = next(c["value"] for c in browser_context.cookies() if c["name"] == app.config["SESSION_COOKIE_NAME"])
        finish_with_pyramid(
            client_of(app, cookie),
            request_id,
            web_storage,
            web_settings,
            tmp_path,
            width=65_600,
            height=640,
            output_name="{}.dzi.zip",
        )

        page.goto(f"{base}/jobs/{request_id}")
        page.locator("#viewer-card").wait_for(state="visible")
        wait_until(page, "document.getElementById('viewport').dataset.loaded === '1'", timeout=60)
        download, reduced = page.locator("#download"), page.locator("#download-reduced")
        assert download.inner_text() == "Download (Deep Zoom zip)"
        assert download.get_attribute("href") == f"/api/jobs/{request_id}/result?download=1"
        assert reduced.is_visible() and reduced.get_attribute("href") == f"/api/jobs/{request_id}/preview?size=1600"
        assert not page.locator("#download-zip").is_visible()  # the same zip once is enough
        with Image.open(io.BytesIO(page.request.get(base + reduced.get_attribute("href")).body())) as image:
            assert (image.format, image.size) == ("JPEG", (1600, 16))
        shot(page, "12-panorama-over-the-jpeg-limit")
        # Finished by hand, it has no tile map: a click says so, and offers no places to find.
        box = page.locator("#viewport").bounding_box()
        page.locator("#viewport").click(position={"x": box["width"] / 2, "y": box["height"] / 2})
        page.locator("#tile-name").filter(has_text="made before tile maps were kept").wait_for()
        assert page.locator("#tile-places").is_hidden()
        assert errors == []


@pytest.fixture
def finished_job_page(
    app: Any, browser_context: Any, web_storage: Any, web_settings: Any, tmp_path: Path
) -> Iterator[Any]:
    """A finished job's page, made in seconds with no roles: submitted by the browser, finished
    straight in storage with a small pyramid and a tile map placing photos 3, 0, 7, 11 and 12 of
    the web tests' 18-photo library (3 most often). Yields ``(page, base, request_id, uses)``,
    ``uses`` each library photo's cells by name."""
    from dal.blobs.libraries import LibraryStore
    from dal.blobs.library_creation import tile_blob_names
    from dal.blobs.names import tile_map_name
    from dal.blobs.store import BlobStore
    from dal.blobs.tile_maps import TileMap
    from dal.config import IMAGE_OUTPUT_CONTAINER
    from tests.web.conftest import LIBRARY, png_bytes, served
    from tests.web.test_api_pyramid import client_of, finish_with_pyramid
    from webapp.csrf import CSRF_HEADER, CSRF_VALUE

    with served(app) as base:
        page = browser_context.new_page()
        page.errors = []
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        page.goto(base + "/jobs")  # the browser gets its client-id cookie
        form = {"library": LIBRARY, "tile_size": "8", "slices": "1", "tiles_across": "16"}
        image = {"name": "photo.png", "mimeType": "image/png", "buffer": png_bytes(64, 48)}
        created = page.request.post(
            f"{base}/api/jobs", headers={CSRF_HEADER: CSRF_VALUE}, multipart={"image": image, **form}
        )
        assert created.status == 202, created.text()
        request_id = created.json()["request_id"]
        cookie = next(c["value"] for c in browser_context.cookies() if c["name"] == app.config["SESSION_COOKIE_NAME"])
        finish_with_pyramid(
            client_of(app, cookie),
            request_id,
            web_storage,
            web_settings,
            tmp_path,
            width=128,
            height=96,
            output_name="{}.jpg",
        )
        library = LibraryStore(web_storage, prefix=web_settings.name_prefix).load(LIBRARY)
        used = np.array([3, 0, 7, 11, 12])
        choice = used[np.random.default_rng(5).integers(0, len(used), (12, 16))]
        choice[:6] = 3
        tile_map = TileMap.from_choice(
            choice,
            names=library.names,
            blobs=tile_blob_names(library.names),
            library=LIBRARY,
            library_version=library.version,
        )
        BlobStore(web_storage, prefix=web_settings.name_prefix).upload(
            IMAGE_OUTPUT_CONTAINER, tile_map_name(request_id), tile_map.encode(), content_type="application/gzip"
        )
        page.goto(f"{base}/jobs/{request_id}")
        yield page, base, request_id, {name: int(n) for name, n in tile_map.uses().items()}


# The viewer's view, settled, lies within the mosaic (OpenSeadragon's own bounds, in its units).
VIEW_INSIDE_MOSAIC = """(() => {
  const viewer = OpenSeadragon.getViewer("viewport"), view = viewer.viewport.getBounds(true);
  const image = viewer.world.getItemAt(0).getBounds(true), slack = 1e-6 * image.width;
  return (
    view.x >= image.x - slack && view.y >= image.y - slack &&
    view.x + view.width <= image.x + image.width + slack && view.y + view.height <= image.y + image.height + slack);
})()"""


def test_pick_your_photo_from_the_thumbnails_and_see_the_ones_left_out(
    finished_job_page: Any, browser_context: Any
) -> None:
    """Beside the viewer: the library's thumbnails with use counts; sorted by use, the first is
    the most used photo, and choosing it outlines every cell it holds; "Left out" lists the rest
    with why."""
    page, base, request_id, uses = finished_job_page
    page.locator("#viewer-card").wait_for(state="visible")
    wait_until(page, "document.getElementById('viewport').dataset.opened === '1'")
    page.locator("#photo-picker .picker-photo").first.wait_for()
    assert page.locator("#picker-counts").inner_text() == "5 of 18 used · 13 left out"
    assert page.locator("#photo-picker .picker-photo").count() == 18
    page.locator("#picker-search").fill("C1")  # searched by name, any case
    wait_until(page, "document.querySelectorAll('#photo-picker .picker-photo').length === 8")
    names = page.locator("#photo-picker .picker-photo").evaluate_all("bs => bs.map(b => b.dataset.name)")
    assert names == [f"c1{i}.png" for i in range(8)] and page.locator("#picker-page").inner_text() == "1–8 of 8"
    page.locator("#picker-search").fill("")
    wait_until(page, "document.querySelectorAll('#photo-picker .picker-photo').length === 18")
    page.locator("#picker-sort").select_option("most_used")
    top, count = min(uses.items(), key=lambda kv: (-kv[1], kv[0]))  # ties go by name, as the API's
    # The card already exists in the name order: wait for the re-sorted list, not for the card.
    wait_until(page, f"document.querySelector('#photo-picker .picker-photo').dataset.name === {top!r}")
    first = page.locator(f'#photo-picker .picker-photo[data-name="{top}"]')
    assert first.locator(".picker-uses").inner_text() == f"×{count}"
    wait_until(
        page, "[...document.querySelectorAll('#picker-photos img')].every(i => i.complete && i.naturalWidth > 0)"
    )
    first.click()
    page.locator("#tile-name").filter(has_text=top).wait_for()
    page.locator("#tile-places-count").filter(has_text=f"1 of {count}").wait_for()
    assert page.locator(".tile-mark-also").count() == count
    assert first.get_attribute("aria-pressed") == "true"
    # The place is shown among its neighbours, the mosaic filling the viewer even at its edge
    # (a first place in a corner is not centred over empty background), its outline in view.
    wait_until(page, VIEW_INSIDE_MOSAIC)
    mark, box = (page.locator(s).bounding_box() for s in ("#viewport .tile-mark", "#viewport"))
    assert mark and box and box["x"] - 1 <= mark["x"] and mark["x"] + mark["width"] <= box["x"] + box["width"] + 1
    assert box["y"] - 1 <= mark["y"] and mark["y"] + mark["height"] <= box["y"] + box["height"] + 1
    shot(page, "13-pick-your-photo", full_page=False)

    page.locator('#photo-picker [data-show="left_out"]').click()
    page.locator("#picker-photos.reasons .picker-why").first.wait_for()
    assert page.locator("#picker-photos .picker-why").count() == 13
    reasons = set(page.locator("#picker-photos .picker-reason").all_inner_texts())
    assert reasons == {"not in any cell: other photos matched the colours better"}
    left = page.locator("#photo-picker .picker-photo").first
    left.click()
    page.locator("#picker-note").filter(has_text="is not in this mosaic: not in any cell").wait_for()
    assert page.locator("#tile-info").is_hidden() and page.locator(".tile-mark-also").count() == 0
    shot(page, "14-photos-left-out")

    phone = browser_context.new_page()
    phone.set_viewport_size(PHONE)
    phone.goto(f"{base}/jobs/{request_id}")
    phone.locator("#photo-picker .picker-photo").first.wait_for()
    wait_until(
        phone, "[...document.querySelectorAll('#picker-photos img')].every(i => i.complete && i.naturalWidth > 0)"
    )
    phone.locator("#photo-picker").scroll_into_view_if_needed()
    shot(phone, "15-phone-your-photos")
    overflow = phone.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the job page scrolls sideways on a phone by {overflow}px"
    assert page.errors == []
    assert browser_context.violations == [], "the page broke its Content-Security-Policy"


def every_place_of_the_clicked_photo(page: Any, tile_map: Any, name: str, clicked: tuple[int, int]) -> None:
    """Find your photo: every cell the clicked photo holds is outlined, and "Next place" steps
    through them."""
    rows, cols, _, _ = tile_map.places(name)
    held = {(int(c), int(r)) for r, c in zip(rows, cols, strict=True)}
    assert clicked in held
    page.locator("#tile-places").click()
    page.locator("#tile-places-count").filter(has_text=f"In {len(held)} place").wait_for()
    assert page.locator(".tile-mark-also").count() == min(len(held), 300)
    page.locator("#tile-places").click()  # now "Next place ›"
    page.locator("#tile-places-count").filter(has_text=f" of {len(held)}").wait_for()
    shown = page.locator("#tile-where").inner_text().removeprefix("tile ").split(" (")[0]
    assert tuple(int(n) - 1 for n in shown.split(", ")) in held and page.locator("#tile-name").inner_text() == name
    page.locator("#zoom-fit").click()
    page.wait_for_timeout(1000)  # the zoom animation settles
    shot(page, "05c-every-place", full_page=False)


def find_a_photo_by_name(page: Any, tile_map: Any, clicked_name: str) -> None:
    """A part of a name offers the photos it fits; a whole name finds that photo's places; a
    name no photo has is reported."""
    uses = np.bincount(tile_map.cells.ravel() >> 1, minlength=len(tile_map.tiles))
    other = next(int(i) for i in np.argsort(-uses, kind="stable") if tile_map.tiles[i][0] != clicked_name)
    other_name, other_count = tile_map.tiles[other][0], int(uses[other])
    page.locator("#find-name").fill("chelsea")  # the demo library's crops of the cat
    page.locator("#find-submit").click()
    page.locator("#find-result").filter(has_text="photos match: pick one of the suggestions").wait_for()
    assert 1 < page.locator("#find-names option").count() <= 20
    page.locator("#find-name").fill(other_name)
    page.locator("#find-submit").click()
    page.locator("#tile-name").filter(has_text=other_name).wait_for()
    page.locator("#tile-places-count").filter(has_text=f"1 of {other_count}").wait_for()
    assert page.locator(".tile-mark-also").count() == min(other_count, 300)
    page.wait_for_timeout(1000)  # the pan settles
    shot(page, "05d-find-by-name", full_page=False)
    page.locator("#find-name").fill("no-such-photo-anywhere")
    page.locator("#find-submit").click()
    page.locator("#find-result").filter(has_text="No photo in this mosaic is named like").wait_for()
