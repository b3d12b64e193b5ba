"""What ``photomosaics library add`` does as a client of the web API: find the photos in a folder,
keep this machine's client id per web app (``photomosaics.client_file``), upload each photo straight to Blob Storage with the
write-only SAS URL the app grants (several at once, one progress bar), ask for indexing as
photos land (``_Indexing``), and follow the library's progress until it is ready.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from dal.http_environment import read_once
from photomosaics.client_file import save_client

__all__ = [
    "GRANT_BATCH",
    "PHOTO_SUFFIXES",
    "UPLOADS_AT_ONCE",
    "FolderPhotos",
    "Indexing",
    "folder_photos",
    "follow_index",
    "left_out_note",
    "not_in_storage",
    "upload_all",
]


PHOTO_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".heic", ".heif", ".avif", ".gif", ".bmp", ".tif", ".tiff"}
)
GRANT_BATCH = 500  # the API's most files per POST .../uploads
UPLOADS_AT_ONCE = 4
_CONCURRENCY_PER_UPLOAD = 2
STILL_SECONDS = 20.0  # no progress for this long: the indexer has nothing of ours in work


@dataclass(frozen=True)
class FolderPhotos:
    """A folder's photos (path, name under the folder, bytes) and the files left out with why."""

    photos: list[tuple[Path, str, int]]
    left_out: list[tuple[str, str]]


def folder_photos(folder: Path) -> FolderPhotos:
    """The photo files under ``folder`` by extension (case-insensitive), and what is left out, in
    the library page's words (``upload_files.js``): a hidden file or one in a hidden folder (a
    leading dot: ``.DS_Store``, a Mac's ``._IMG_1.JPG``), not a photo, an empty file; and, which a
    page never meets, a pipe or a device named like a photo."""
    photos: list[tuple[Path, str, int]] = []
    left_out: list[tuple[str, str]] = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for file in sorted(files):
            path = Path(root, file)
            name = path.relative_to(folder).as_posix()
            suffix = path.suffix.lower()
            if any(part.startswith(".") for part in name.split("/")):
                left_out.append((name, "hidden file"))
            elif suffix not in PHOTO_SUFFIXES:
                left_out.append((name, f"not a photo ({suffix or 'no extension'})"))
            else:
                try:
                    status = path.stat()
                except OSError as exc:
                    left_out.append((name, f"cannot read ({exc.strerror or exc})"))
                    continue
                if not stat.S_ISREG(status.st_mode):  # a pipe or a device: reading it could block forever
                    left_out.append((name, "not a regular file"))
                elif status.st_size:
                    photos.append((path, name, status.st_size))
                else:
                    left_out.append((name, "empty file"))
    return FolderPhotos(photos, left_out)


def left_out_note(left_out: list[tuple[str, str]]) -> str:
    """The note the page shows (``leftOutNote``): "3 files left out: not a photo (.txt) × 2, hidden file."."""
    if not left_out:
        return ""
    counts = Counter(why for _, why in left_out)
    parts = ", ".join(why if count == 1 else f"{why} × {count:,}" for why, count in counts.items())
    return f"{len(left_out):,} file{'' if len(left_out) == 1 else 's'} left out: {parts}."


class _Bar:
    """A click progress bar updated from several upload threads."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.lock = threading.Lock()

    def add(self, amount: int) -> None:
        if amount:
            with self.lock:
                self.bar.update(amount)


def _upload(url: str, path: Path, size: int, bar: _Bar) -> None:
    from azure.storage.blob import BlobClient

    sent = 0

    def hook(current: int, _total: int | None) -> None:
        nonlocal sent
        bar.add(current - sent)
        sent = current

    try:
        with path.open("rb") as data:
            BlobClient.from_blob_url(url, **read_once(url)).upload_blob(
                data, length=size, overwrite=True, max_concurrency=_CONCURRENCY_PER_UPLOAD, progress_hook=hook
            )
    finally:
        bar.add(size - sent)  # done or given up: the bar moves past this file either way


class Indexing:
    """Asks the indexer for photos as their uploads finish, 32 at a time (one index request's
    worth), so that indexing runs beside the rest of the upload instead of after it."""

    def __init__(self, api: Any, name: str) -> None:
        from dal.queues.message_fields import MAX_PHOTOS_PER_INDEX_REQUEST

        self.api, self.name, self.every = api, name, MAX_PHOTOS_PER_INDEX_REQUEST
        self.waiting: list[str] = []
        self.missed = False

    def ready(self, photo: str) -> None:
        self.waiting.append(photo)
        if len(self.waiting) >= self.every:
            self.flush()

    def flush(self, *, last: bool = False) -> None:
        """Ask for the photos waiting. A request that failed is not fatal: the last one then asks
        for every photo not indexed."""
        asked, self.waiting = self.waiting, []
        body = None if self.missed and last else {"photos": asked}
        try:
            self.api.call("POST", f"/api/libraries/{self.name}/index", ok=(202,), json=body)
        except click.ClickException as exc:
            if last:
                raise
            click.echo(f"note: asking for indexing failed ({exc.format_message()}); asking again at the end", err=True)
            self.missed = True


def _grants(api: Any, name: str, batch: list[tuple[Path, str, int]], description: str | None = None) -> dict[str, Any]:
    """The app's answer to ``POST .../uploads`` for ``batch``: a URL per file, or ``uploaded``."""
    body: dict[str, Any] = {"files": [{"name": rel, "size": size} for _, rel, size in batch]}
    if description is not None:
        body["description"] = description
    return dict(api.call("POST", f"/api/libraries/{name}/uploads", ok=(200, 201), json=body).json())


def upload_all(
    api: Any, name: str, description: str | None, files: list[tuple[Path, str, int]], indexing: Indexing
) -> dict[str, Any]:
    """Grants in batches of 500, each batch uploaded at once, each photo handed to ``indexing``
    once it is in storage; the counts and the refusals."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from dal.errors import StorageUnavailable as AzureError  # Azure's own error, named in dal

    out: dict[str, Any] = {"uploaded": 0, "already": 0, "refused": [], "failed": [], "created": False}
    total = sum(size for _, _, size in files)
    with (
        click.progressbar(length=total, label="uploading", file=sys.stderr, show_percent=True) as progress,
        ThreadPoolExecutor(max_workers=UPLOADS_AT_ONCE, thread_name_prefix="upload") as pool,
    ):
        bar = _Bar(progress)
        for start in range(0, len(files), GRANT_BATCH):
            batch = files[start : start + GRANT_BATCH]
            answer = _grants(api, name, batch, description)
            if start == 0:
                save_client(api.session, api.base)
                out["created"] = answer.get("created", False)
            by_name = {rel: (path, size) for path, rel, size in batch}
            for refused in answer.get("refused", []):
                out["refused"].append((refused["name"], refused["reason"]))
                bar.add(by_name[refused["name"]][1] if refused["name"] in by_name else 0)
            work = {}
            for grant in answer["uploads"]:
                path, size = by_name[grant["name"]]
                if grant["uploaded"]:
                    out["already"] += 1
                    bar.add(size)
                    indexing.ready(grant["name"])  # uploaded before, perhaps never indexed
                else:
                    work[pool.submit(_upload, grant["url"], path, size, bar)] = grant["name"]
            for future in as_completed(work):
                try:
                    future.result()
                    out["uploaded"] += 1
                    indexing.ready(work[future])
                except (AzureError, OSError) as exc:
                    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__
                    out["failed"].append((work[future], str(reason).splitlines()[0]))
    return out


def not_in_storage(api: Any, name: str, files: list[tuple[Path, str, int]]) -> list[tuple[Path, str, int]]:
    """The files whose photo the library's staging does not hold (the grants' ``uploaded``): after
    an upload, the ones whose upload failed and the ones storage lost after acknowledging them
    (the embedded Azurite writes its index a few seconds after it answers: killed, it forgets
    the last photos). Refused files are left out (the grant refuses them again)."""
    missing: list[tuple[Path, str, int]] = []
    for start in range(0, len(files), GRANT_BATCH):
        batch = files[start : start + GRANT_BATCH]
        absent = {grant["name"] for grant in _grants(api, name, batch)["uploads"] if not grant["uploaded"]}
        missing.extend(file for file in batch if file[1] in absent)
    return missing


def follow_index(api: Any, name: str, deadline: float) -> dict[str, Any]:
    """The library's progress, polled until ``indexed + skipped`` reaches ``uploaded`` (every
    staged photo handled: the page's "ready") or the deadline. Photos staged earlier and never
    asked for (an upload stopped before its index request, files since gone from the folder)
    would keep it waiting: once nothing has moved for ``STILL_SECONDS``, every photo not indexed
    yet is asked for, once (asking earlier would queue again the batches still in work)."""

    def read() -> dict[str, Any]:
        return dict(api.call("GET", f"/api/libraries/{name}/photos", params={"limit": 1}).json()["progress"])

    progress = read()
    done = progress["indexed"] + progress["skipped"]
    expected = progress["uploaded"]
    moved, asked_all = time.monotonic(), False
    with click.progressbar(length=expected, label="indexing", show_pos=True, file=sys.stderr) as bar:
        bar.update(min(done, expected))
        while done < progress["uploaded"] and time.monotonic() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            progress = read()
            now = progress["indexed"] + progress["skipped"]
            bar.update(max(0, min(now, expected) - min(done, expected)))
            if now != done:
                moved = time.monotonic()
            elif not asked_all and time.monotonic() - moved > STILL_SECONDS:
                api.call("POST", f"/api/libraries/{name}/index", ok=(202,))
                asked_all = True
            done = now
    return progress
