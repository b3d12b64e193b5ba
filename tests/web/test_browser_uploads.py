"""A person's folder of photos into a library, in real headless Chromium: the page asks for upload
URLs, writes every photo straight to the embedded Azurite in blocks (Put Block, Put Block List;
a file of one block in one Put Blob), survives a dropped connection and an expired SAS, asks for indexing and follows the indexer (a
real ``photomosaics indexer`` process) to the end: the junk file skipped with its reason, the
burst shot grouped. Then, after a reload, the same folder chosen again sends nothing. A network
cannot drop on demand, so Playwright's request interception aborts one block PUT once and answers
another with a 403 once. Screenshots go to ``artifacts/screenshots/``.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np
import pytest
from PIL import Image

from tests.web.test_browser import PHONE, shot, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow]

QUICK_POLLS = (
    "PMLibraryPhotos.settings.fastMs = 200; PMLibraryPhotos.settings.slowMs = 400"  # the test need not be gentle
)
BLOCK_BYTES = 16 * 1024  # small blocks: every photo here is several, so one can drop mid-file
DROPPED = "b.jpg"  # its second block's connection drops once
EXPIRED = "c.jpg"  # its first block meets an expired SAS once
GRANT_BATCH = 3  # upload URLs asked for three files at a time (the page's default: 500)


def _jpeg(seed: int, size: tuple[int, int] = (480, 360), *, exif: bytes | None = None) -> bytes:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, size=(9, 12, 3)).astype(np.uint8)
    image = Image.fromarray(small).resize(size, Image.Resampling.BICUBIC)
    noise = rng.integers(-20, 21, (size[1], size[0], 3))
    image = Image.fromarray(np.clip(np.asarray(image).astype(int) + noise, 0, 255).astype(np.uint8))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=92, **({"exif": exif} if exif else {}))
    return out.getvalue()


def _folder(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A phone's folder: five photos (one a portrait stored sideways with an EXIF rotation, one a
    burst shot of another), a junk file named .jpg, a text file and a hidden file."""
    folder = tmp_path / "wedding"
    folder.mkdir()
    burst = np.asarray(Image.open(io.BytesIO(_jpeg(1)))).astype(int)
    shaken = np.clip(burst + np.random.default_rng(9).integers(-5, 6, burst.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(shaken).save(out, "JPEG", quality=92)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° to show: a portrait stored landscape, as phones do
    photos = {
        "a.jpg": _jpeg(1),
        "a-burst.jpg": out.getvalue(),
        DROPPED: _jpeg(2),
        EXPIRED: _jpeg(3),
        "portrait.jpg": _jpeg(4, exif=exif.tobytes()),
        "d.jpg": _jpeg(5),
        "broken.jpg": b"this is not a photo, whatever its name says\n" * 40,
    }
    for name, data in photos.items():
        (folder / name).write_bytes(data)
    (folder / "notes.txt").write_text("guest list")
    (folder / ".DS_Store").write_bytes(b"\0" * 64)
    return folder, photos


class StorageLog:
    """Every PUT to a staged blob the page makes: dropped once, refused once, or passed on."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.reached: list[tuple[str, str, str]] = []  # (photo, "block" | "blocklist" | "blob", block id)
        self.dropped: list[str] = []
        self.dropped_whole: list[str] = []
        self.lost: list[str] = []
        self.expired: list[str] = []

    def __call__(self, route: Any) -> None:
        request = route.request
        if request.method != "PUT":
            route.continue_()
            return
        url = urlsplit(request.url)
        photo = unquote(url.path.rsplit("/staging/", 1)[1])
        query = parse_qs(url.query)
        kind, block = query.get("comp", ["blob"])[0], query.get("blockid", [""])[0]
        if photo == DROPPED and kind == "block" and block == _block_id(1) and not self.dropped:
            self.dropped.append(block)
            route.abort("connectionreset")
        elif kind == "blob" and not self.dropped_whole:  # a one-block file's Put Blob drops once too
            self.dropped_whole.append(photo)
            route.abort("connectionreset")
        elif kind == "blob" and not self.lost:  # then storage acknowledges it and loses it (see the test)
            self.lost.append(photo)
            route.fulfill(status=201, headers={"Access-Control-Allow-Origin": self.base}, body="")
        elif photo == EXPIRED and kind == "block" and not self.expired:
            self.expired.append(block)
            route.fulfill(
                status=403,
                headers={"Access-Control-Allow-Origin": self.base, "Content-Type": "application/xml"},
                body="<?xml version='1.0'?><Error><Code>AuthenticationFailed</Code><Message>Signed expiry time has passed</Message></Error>",
            )
        else:
            self.reached.append((photo, kind, block))
            route.continue_()


def _block_id(index: int) -> str:
    import base64

    return base64.b64encode(f"block-{index:06d}".encode()).decode()


def test_a_folder_uploads_straight_to_storage_resumes_and_is_indexed_live(
    live_app: dict[str, Any], browser_context: Any, tmp_path: Path
) -> None:
    base, pipeline = live_app["url"], live_app["pipeline"]
    folder, photos = _folder(tmp_path)
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    grants: list[int] = []
    posts: list[str] = []
    page.on(
        "request",
        lambda r: r.url.endswith("/uploads") and r.method == "POST" and grants.append(len(r.post_data_json["files"])),
    )
    page.on("request", lambda r: r.method == "POST" and posts.append(urlsplit(r.url).path))
    log = StorageLog(base)
    page.route(re.compile(r"/staging/"), log)

    page.goto(base + "/libraries")
    page.locator("#libraries .card").first.wait_for()
    # Small blocks and grant batches, so that seven photos take several of each.
    page.evaluate(
        f"PMBlocks.settings.blockBytes = {BLOCK_BYTES}; PMBlocks.settings.backoffMs = 50;"
        f" PMUploads.settings.grantBatch = {GRANT_BATCH}; PMUploads.settings.indexEvery = 3;"
        f" PMLibraryPhotos.settings.pageSize = 4; {QUICK_POLLS}"
    )
    # Dropped files are sorted as chosen ones are (a test cannot make a dropped folder: Chromium
    # gives a page's own DataTransfer no directory entries).
    page.evaluate(
        """() => {
          const data = new DataTransfer();
          data.items.add(new File(["x".repeat(2048)], "IMG_1.JPG", { type: "image/jpeg" }));
          data.items.add(new File(["guests"], "notes.txt", { type: "text/plain" }));
          document.getElementById("lib-drop").dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true }));
        }"""
    )
    page.locator("#lib-chosen").filter(has_text="1 photo · 2 KB. 1 file left out: not a photo (.txt).").wait_for()
    page.locator("#lib-name").fill("wedding")
    page.locator("#lib-description").fill("Our wedding")
    page.set_input_files("#lib-folder", str(folder))
    chosen = page.locator("#lib-chosen").inner_text()
    assert chosen.startswith("7 photos") and "2 files left out:" in chosen, chosen
    assert "not a photo (.txt)" in chosen and "hidden file" in chosen and "×" not in chosen
    shot(page, "13-library-folder-chosen")
    page.locator("#lib-submit").click()

    page.locator("#upload-progress[data-done='1']").wait_for(timeout=60_000)
    rows = page.locator("#upload-files li")
    assert rows.count() == 7
    assert {rows.nth(i).get_attribute("data-state") for i in range(7)} == {"uploaded"}
    bar = page.locator("#upload-bar")
    assert bar.get_attribute("role") == "progressbar" and bar.get_attribute("aria-valuenow") == "100"
    # Storage acknowledged one photo it never kept (as the embedded Azurite does when killed just
    # after): the page asked for grants again once every upload was done, and sent it again.
    assert (
        "Upload finished: 7 uploaded, 1 sent again (it was not in storage after the first upload)"
        in page.locator("#upload-status").inner_text()
    )
    # Indexing asked for as photos landed, three at a time, then the last one; every photo counted.
    assert sum(p.endswith("/wedding/index") for p in posts) == 3
    assert "making tiles of 7 photos" in page.locator("#upload-status").inner_text()
    shot(page, "14-library-uploaded")

    # The dropped block was sent again (the same id) and no acknowledged block twice; the expired
    # SAS made the page ask for a fresh URL for that one file; every photo was committed once.
    assert log.dropped == [_block_id(1)] and log.expired == [_block_id(0)]
    blocks = [(p, b) for p, kind, b in log.reached if kind == "block"]
    assert len(blocks) == len(set(blocks)), "a block reached storage twice"
    assert (DROPPED, _block_id(1)) in blocks
    # A file of one block (the junk file here) is one Put Blob: no block, no block list.
    single = sorted(name for name, data in photos.items() if len(data) <= BLOCK_BYTES)
    assert single == ["broken.jpg"], single
    for name, data in photos.items():
        count = -(-len(data) // BLOCK_BYTES) if name not in single else 0
        assert sorted(b for p, b in blocks if p == name) == sorted(_block_id(i) for i in range(count)), name
    assert sorted(p for p, kind, _ in log.reached if kind == "blocklist") == sorted(set(photos) - set(single))
    assert (
        log.dropped_whole == log.lost == single and sorted(p for p, kind, _ in log.reached if kind == "blob") == single
    )
    # Batches of 3 (c.jpg is in the second), a fresh URL for c.jpg, then the same batches again:
    # which of the photos sent are in storage.
    assert grants == [3, 3, 1, 1, 3, 3, 1]
    staging = pipeline.services.staging
    assert staging.staged("wedding") == {name: len(data) for name, data in photos.items()}
    assert all(staging.read_staged("wedding", name).data == data for name, data in photos.items())

    # The indexer's progress, live, to the end: the junk skipped with its reason, the burst grouped.
    panel = page.locator('.library-photos[data-library="wedding"]')
    panel.wait_for()
    panel.and_(page.locator("[data-pending='0']")).wait_for(timeout=90_000)
    status = panel.locator("[role=status]").inner_text()
    assert "7 uploaded · 6 indexed · 1 skipped · 1 group of near-duplicates — ready" in status, status
    assert panel.locator("[role=progressbar]").get_attribute("aria-valuenow") == "100"
    # Four photos a page here: the first page, then the rest.
    names = ["a-burst.jpg", "a.jpg", "b.jpg", "broken.jpg", "c.jpg", "d.jpg", "portrait.jpg"]
    assert panel.locator(".photo").evaluate_all("items => items.map(i => i.dataset.name)") == names[:4]
    assert panel.locator(".pager button").first.is_disabled()
    junk = panel.locator('.photo[data-name="broken.jpg"]')
    assert junk.get_attribute("data-state") == "skipped"
    reason = junk.locator(".photo-state").inner_text()
    assert reason.startswith("skipped: ") and len(reason) > 12
    assert panel.locator(".skip-reasons li").inner_text() == f"1 {reason}"
    assert panel.locator(".photo-group").inner_text() == "Group 1: a-burst.jpg, a.jpg"
    assert panel.locator('.photo[data-state="indexed"] img').count() == 3
    wait_until(page, "[...document.querySelectorAll('.photo-grid img')].every(i => i.complete && i.naturalWidth > 0)")
    shot(page, "15a-library-indexed-page-1")
    panel.get_by_role("button", name="Next ›").click()
    panel.locator('.photo[data-name="portrait.jpg"]').wait_for()
    assert panel.locator(".photo").evaluate_all("items => items.map(i => i.dataset.name)") == names[4:]
    assert all(panel.locator(".photo").nth(i).get_attribute("data-state") == "indexed" for i in range(3))
    assert panel.get_by_role("button", name="Next ›").is_disabled()
    assert panel.locator(".pager .hint").inner_text() == "page 2"
    wait_until(page, "[...document.querySelectorAll('.photo-grid img')].every(i => i.complete && i.naturalWidth > 0)")
    page.locator('.library-cards [data-library="wedding"] h2 small').filter(has_text="6 tiles").wait_for()
    shot(page, "15-library-indexed")

    # A reload, "Add photos" on the card, the same folder again: every file is already there.
    reached = len(log.reached)
    page.reload()
    page.evaluate(QUICK_POLLS)
    page.locator('.library-cards [data-library="wedding"] .add-photos').click()
    assert page.locator("#lib-form-title").inner_text() == "Add photos to wedding"
    page.set_input_files("#lib-folder", str(folder))
    page.locator("#lib-submit").click()
    page.locator("#upload-progress[data-done='1']").wait_for(timeout=30_000)
    assert {rows.nth(i).get_attribute("data-state") for i in range(rows.count())} == {"skipped"}
    assert "0 uploaded, 7 already there" in page.locator("#upload-status").inner_text()
    assert "of 0 photos" in page.locator("#upload-status").inner_text()
    assert len(log.reached) == reached, "a photo already uploaded was sent again"
    panel.and_(page.locator("[data-pending='0']")).wait_for()

    phone = browser_context.new_page()
    phone.set_viewport_size(PHONE)
    phone.goto(base + "/libraries")
    phone.locator('.library-cards [data-library="wedding"] .show-photos').click()
    phone.locator('.library-photos[data-pending="0"] .photo img').first.wait_for()
    wait_until(phone, "[...document.querySelectorAll('.photo-grid img')].every(i => i.complete && i.naturalWidth > 0)")
    phone.wait_for_timeout(500)  # the bar's width eases in
    shot(phone, "16-phone-library-photos")
    overflow = phone.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"/libraries scrolls sideways on a phone by {overflow}px"
    # No photo went through the web app: the multipart POST /api/libraries is for API clients only.
    assert "/api/libraries" not in posts and set(posts) == {
        "/api/libraries/wedding/uploads",
        "/api/libraries/wedding/index",
    }
    assert errors == []
    assert browser_context.violations == [], "the page broke its Content-Security-Policy"


def test_a_dropped_folder_is_walked_to_the_names_the_command_line_gives(
    live_app: dict[str, Any], browser_context: Any, tmp_path: Path
) -> None:
    """A dropped folder is read with webkitGetAsEntry and readEntries (which answers a folder in
    batches until an empty one). Chromium gives a page's own DataTransfer no folders, so the
    entries are made in the page, as Chromium's would answer; what is tested is the page's walk:
    nested folders, batches, the folder's own name dropped, hidden files and non-photos left out,
    and the names are those ``photomosaics library add`` gives the same folder (the same blobs),
    with the same files left out for the same reasons."""
    from photomosaics.library_upload import folder_photos, left_out_note

    tree = [
        "day1/IMG_1.JPG",
        "day1/IMG_2.heic",
        "day2/late/IMG_3.jpeg",
        "day2/IMG_5.AVIF",
        "IMG_4.png",
        "day2/drawing.svg",
        "scan.jp2",
        "notes.txt",
        ".hidden/x.jpg",
        "__MACOSX/day1/._IMG_1.JPG",
        "README",
    ]
    folder = tmp_path / "wedding"
    for rel in tree:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(b"x" * 10)
    page = browser_context.new_page()
    page.goto(live_app["url"] + "/libraries")
    sorted_out = page.evaluate(
        """async (paths) => {
          const dir = (path, children) => ({ isFile: false, isDirectory: true, fullPath: path,
            createReader() {  // two entries a batch, then none: as readEntries pages a big folder
              let at = 0;
              return { readEntries(ok) { const batch = children.slice(at, at + 2); at += 2; setTimeout(() => ok(batch)); } };
            } });
          const types = { svg: "image/svg+xml", jp2: "image/jp2" };  // as Chromium types them from disk
          const file = (path) => ({ isFile: true, isDirectory: false, fullPath: path,
            file(ok) { ok(new File(["x".repeat(10)], path.split("/").pop(), { type: types[path.split(".").pop()] || "" })); } });
          const root = { children: new Map() };
          for (const path of paths) {
            let node = root;
            const parts = path.split("/");
            parts.forEach((part, i) => {
              if (!node.children.has(part)) node.children.set(part, i === parts.length - 1 ? { path } : { children: new Map() });
              node = node.children.get(part);
            });
          }
          const build = (node, path) => node.children
            ? dir(path, [...node.children].map(([name, child]) => build(child, `${path}/${name}`)))
            : file(path);
          const entry = build(root.children.get("wedding"), "/wedding");
          const items = await PMUploads.dropped({ items: [{ webkitGetAsEntry: () => entry }], files: [] });
          const { photos, leftOut } = PMUploads.sort(items);
          return { names: photos.map((p) => p.name), leftOut: leftOut.map((l) => `${l.name}: ${l.why}`),
                   note: PMUploads.leftOutNote(leftOut) };
        }""",
        [f"wedding/{rel}" for rel in tree],
    )
    found = folder_photos(folder)
    cli = sorted(name for _, name, _ in found.photos)
    assert sorted_out["names"] == cli
    assert cli == ["IMG_4.png", "day1/IMG_1.JPG", "day1/IMG_2.heic", "day2/IMG_5.AVIF", "day2/late/IMG_3.jpeg"]
    left_out = [
        ".hidden/x.jpg: hidden file",
        "README: not a photo (no extension)",
        "__MACOSX/day1/._IMG_1.JPG: hidden file",
        "day2/drawing.svg: not a photo (.svg)",
        "notes.txt: not a photo (.txt)",
        "scan.jp2: not a photo (.jp2)",
    ]
    assert sorted(sorted_out["leftOut"]) == sorted(f"{name}: {why}" for name, why in found.left_out) == left_out
    note = left_out_note(sorted(found.left_out, key=lambda item: sorted_out["leftOut"].index(f"{item[0]}: {item[1]}")))
    assert sorted_out["note"] == note  # the same words, in the order the page met the files
    assert "hidden file × 2" in note and note.startswith("6 files left out: ")


class Holding:
    """Passes every PUT to a staged blob on, but the first of ``photo``: held unanswered, as
    storage that froze (the page is reloaded meanwhile)."""

    def __init__(self, photo: str) -> None:
        self.photo = photo
        self.held: list[Any] = []
        self.reached: list[tuple[str, str]] = []  # (photo, "block" | "blocklist" | "blob")

    def __call__(self, route: Any) -> None:
        if route.request.method != "PUT":
            route.continue_()
            return
        url = urlsplit(route.request.url)
        photo = unquote(url.path.rsplit("/staging/", 1)[1])
        if photo == self.photo and not self.held:
            self.held.append(route)
            return
        self.reached.append((photo, parse_qs(url.query).get("comp", ["blob"])[0]))
        route.continue_()


def test_a_reload_mid_upload_then_the_same_folder_sends_only_what_is_missing(
    live_app: dict[str, Any], browser_context: Any, tmp_path: Path
) -> None:
    base, staging = live_app["url"], live_app["pipeline"].services.staging
    folder, photos = _folder(tmp_path)
    page = browser_context.new_page()
    dialogs: list[str] = []

    def leave(dialog: Any) -> None:
        dialogs.append(dialog.type)
        dialog.accept()

    page.on("dialog", leave)
    storage = Holding(EXPIRED)
    page.route(re.compile(r"/staging/"), storage)
    page.goto(base + "/libraries")
    page.locator("#libraries .card").first.wait_for()
    page.evaluate(f"PMBlocks.settings.blockBytes = {BLOCK_BYTES}; PMUploads.settings.grantBatch = {GRANT_BATCH}")
    page.locator("#lib-name").fill("party")
    page.set_input_files("#lib-folder", str(folder))
    page.locator("#lib-submit").click()
    # Batches of three: the second (broken.jpg, c.jpg, d.jpg) waits for c.jpg, whose storage froze,
    # and portrait.jpg (the third) is not granted yet; the five others are in storage.
    wait_until(page, "document.querySelectorAll('#upload-files li[data-state=uploaded]').length === 5")
    assert len(storage.held) == 1
    page.reload()  # the person leaves mid-upload; the page asked first
    assert dialogs == ["beforeunload"]
    page.locator("#libraries .card").first.wait_for()
    committed = {p for p, kind in storage.reached if kind in ("blocklist", "blob")}  # a one-block file: one Put Blob
    assert committed == set(photos) - {EXPIRED, "portrait.jpg"}
    assert set(staging.staged("party")) == committed

    page.evaluate(QUICK_POLLS)
    page.locator('.library-cards [data-library="party"] .add-photos').click()
    page.set_input_files("#lib-folder", str(folder))
    page.locator("#lib-submit").click()
    page.locator("#upload-progress[data-done='1']").wait_for(timeout=60_000)
    rows = page.locator("#upload-files li")
    states = {rows.nth(i).get_attribute("data-name"): rows.nth(i).get_attribute("data-state") for i in range(7)}
    assert states == {name: "skipped" if name in committed else "uploaded" for name in photos}
    commits = [p for p, kind in storage.reached if kind in ("blocklist", "blob")]
    assert sorted(commits) == sorted(photos), "every photo committed exactly once over the two visits"
    assert staging.staged("party") == {name: len(data) for name, data in photos.items()}
    assert all(staging.read_staged("party", name).data == data for name, data in photos.items())
    page.locator('.library-photos[data-library="party"][data-pending="0"]').wait_for(timeout=90_000)
    page.locator('.library-cards [data-library="party"] h2 small').filter(has_text="6 tiles").wait_for()
    shot(page, "17-library-resumed-after-reload")


class Midway:
    """Passes every PUT to a staged blob on, but holds the first Put Block of block ``hold`` of
    each of ``photos`` unanswered: a connection that froze mid-file (the page is reloaded meanwhile)."""

    def __init__(self, photos: set[str], hold: int) -> None:
        self.photos, self.hold = photos, hold
        self.held: dict[str, Any] = {}
        self.reached: list[tuple[str, str, str]] = []  # (photo, "block" | "blocklist", block id)

    def __call__(self, route: Any) -> None:
        if route.request.method != "PUT":
            route.continue_()
            return
        url = urlsplit(route.request.url)
        photo = unquote(url.path.rsplit("/staging/", 1)[1])
        query = parse_qs(url.query)
        kind, block = query.get("comp", ["blob"])[0], query.get("blockid", [""])[0]
        if photo in self.photos and photo not in self.held and block == _block_id(self.hold):
            self.held[photo] = route
            return
        self.reached.append((photo, kind, block))
        route.continue_()

    def blocks(self, photo: str) -> list[str]:
        return [b for p, kind, b in self.reached if p == photo and kind == "block"]

    def commits(self, photo: str) -> int:
        return sum(1 for p, kind, _ in self.reached if p == photo and kind == "blocklist")


JOURNAL = "Object.keys(localStorage).filter((k) => k.startsWith('pm-blocks:'))"


def test_a_half_sent_file_resumes_after_a_reload_with_only_its_missing_blocks(
    live_app: dict[str, Any], browser_context: Any, tmp_path: Path
) -> None:
    """Two photos of several blocks each freeze at their third block; the page is reloaded. The
    blocks storage acknowledged were remembered (localStorage), so the same folder chosen again
    sends only the rest of one photo, then commits it. The other's record is made to claim blocks
    storage never got (as when Azure discarded them after 7 days): its commit answers
    InvalidBlockList and the page sends that photo whole. Both blobs hold exactly the files' bytes."""
    base, staging = live_app["url"], live_app["pipeline"].services.staging
    folder = tmp_path / "trip"
    folder.mkdir()
    photos = {"resumed.jpg": _jpeg(11, (640, 480)), "stale.jpg": _jpeg(12, (640, 480))}
    for name, data in photos.items():
        (folder / name).write_bytes(data)
    blocks = {name: -(-len(data) // BLOCK_BYTES) for name, data in photos.items()}
    assert min(blocks.values()) >= 4, blocks
    page = browser_context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # "leave the page?" while uploading
    storage = Midway(set(photos), hold=2)
    page.route(re.compile(r"/staging/"), storage)
    page.goto(base + "/libraries")
    page.locator("#libraries .card").first.wait_for()
    page.evaluate(f"PMBlocks.settings.blockBytes = {BLOCK_BYTES}")
    page.locator("#lib-name").fill("halfway")
    page.set_input_files("#lib-folder", str(folder))
    page.locator("#lib-submit").click()
    wait_until(page, f"{JOURNAL}.map((k) => JSON.parse(localStorage[k]).blocks.length).join() === '2,2'")
    for _ in range(300):  # the third blocks' PUTs reach the route a moment after the second's answer
        if set(storage.held) == set(photos):
            break
        page.wait_for_timeout(100)
    assert set(storage.held) == set(photos)
    page.reload()
    page.locator("#libraries .card").first.wait_for()
    assert staging.staged("halfway") == {}  # nothing committed: two half-sent files
    before = {name: storage.blocks(name) for name in photos}
    assert before == {name: [_block_id(0), _block_id(1)] for name in photos}
    # A record older than 6 days is not trusted (Azure drops uncommitted blocks after 7): dropped when read.
    old = page.evaluate(
        """() => {
          const key = `${PMBlockJournal.PREFIX}/x/lib/staging/old.jpg|old.jpg|1|1`;
          localStorage[key] = JSON.stringify({ blockBytes: 4, blocks: [0], since: Date.now() - 6.1 * 86400e3 });
          return [PMBlockJournal.read(key), key in localStorage];
        }"""
    )
    assert old == [None, False]
    # stale.jpg's record claims every block; storage holds two.
    page.evaluate(
        f"""() => {{
          const key = {JOURNAL}.find((k) => k.includes("/staging/stale.jpg|"));
          const entry = JSON.parse(localStorage[key]);
          entry.blocks = Array.from({{ length: {blocks["stale.jpg"]} }}, (_, i) => i);
          localStorage[key] = JSON.stringify(entry);
        }}"""
    )

    page.evaluate(QUICK_POLLS)
    page.locator('.library-cards [data-library="halfway"] .add-photos').click()
    page.set_input_files("#lib-folder", str(folder))
    page.locator("#lib-submit").click()
    page.locator("#upload-progress[data-done='1']").wait_for(timeout=60_000)
    assert "Upload finished: 2 uploaded" in page.locator("#upload-status").inner_text()
    after = {name: storage.blocks(name)[len(before[name]) :] for name in photos}
    # resumed.jpg: only the blocks storage had not acknowledged, then one commit.
    assert after["resumed.jpg"] == [_block_id(i) for i in range(2, blocks["resumed.jpg"])]
    assert storage.commits("resumed.jpg") == 1
    # stale.jpg: a commit refused (InvalidBlockList), every block again, a commit.
    assert after["stale.jpg"] == [_block_id(i) for i in range(blocks["stale.jpg"])]
    assert storage.commits("stale.jpg") == 2
    assert staging.staged("halfway") == {name: len(data) for name, data in photos.items()}
    assert all(staging.read_staged("halfway", name).data == data for name, data in photos.items())
    assert page.evaluate(f"{JOURNAL}.length") == 0, "a committed file is still remembered"
    page.locator('.library-photos[data-library="halfway"][data-pending="0"]').wait_for(timeout=90_000)


def test_the_app_typed_as_localhost_uploads_too(live_app: dict[str, Any], browser_context: Any, tmp_path: Path) -> None:
    """A person types ``localhost`` as often as ``127.0.0.1``: the storage's CORS rule allows both
    (``dal.blobs.cors.local_origins``, as ``photomosaics run`` sets it), so the page's PUTs from
    either origin reach storage."""
    base, staging = live_app["url"], live_app["pipeline"].services.staging
    local = base.replace("://127.0.0.1:", "://localhost:")
    photo = tmp_path / "typed.jpg"
    photo.write_bytes(_jpeg(21))
    page = browser_context.new_page()
    refused: list[str] = []
    page.on("requestfailed", lambda r: "/staging/" in r.url and refused.append(r.failure or "failed"))
    page.goto(local + "/libraries")
    page.locator("#libraries .card").first.wait_for()
    page.evaluate(f"PMBlocks.settings.blockBytes = {BLOCK_BYTES}; PMBlocks.settings.attempts = 1")
    page.locator("#lib-name").fill("typed-localhost")
    page.set_input_files("#lib-files", str(photo))
    page.locator("#lib-submit").click()
    page.locator("#upload-progress[data-done='1']").wait_for(timeout=30_000)
    assert "Upload finished: 1 uploaded" in page.locator("#upload-status").inner_text(), refused
    assert refused == []
    assert staging.read_staged("typed-localhost", "typed.jpg").data == photo.read_bytes()
