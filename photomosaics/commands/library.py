"""``photomosaics library create|list|share``: tile libraries in storage, as the operator;
``photomosaics library add|remove|rename``: a person's photos into (out of) their library, and its
name, through the web app's API.

Storage is chosen by ``photomosaics.storage.command_stores``: the configured account, the
Azurite of a running ``photomosaics run``, or an embedded one on the same data folder.

``add`` is an ordinary client of the web API (no storage credentials): it asks for upload URLs
(``POST /api/libraries/<name>/uploads``, 500 files a request), writes each photo straight to
Blob Storage with its write-only SAS URL (several at once), asks for each 32 photos to be
indexed as soon as they are in storage (the indexer works while the rest upload) and follows
the progress. The app's client-id cookie is kept per web app URL in ``PHOTOMOSAICS_CLIENT_FILE``
(default: ``clients.json`` in click's app folder), so a later ``add`` is the same client, the
library's owner.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from photomosaics.storage import DATA_DIR_OPTION, command_stores


@click.group()
def library() -> None:
    """Tile libraries in storage (AZURE_STORAGE_CONNECTION_STRING, or the embedded Azurite).

    `add` goes through the web app's API instead, as any client of it.
    """


@library.command("create")
@click.argument("name")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("-d", "--description", default=None, help="Shown in the web page's library list [default: from SOURCE].")
@click.option(
    "--shared/--private",
    default=True,
    show_default=True,
    help="Shared: every web client sees it. Private: no client does until `library share`.",
)
@DATA_DIR_OPTION
def create(name: str, source: Path, description: str | None, shared: bool, data_dir: str | None) -> None:
    """Create (or replace) library NAME from SOURCE, a folder or zip of photos.

    NAME: 3-63 lowercase letters, digits and single hyphens (a container name). A library made
    here is the operator's: no web client owns it, and it is shared unless --private.
    """
    from dal.blobs.library_info import validate_library_name
    from dal.errors import LibraryError
    from mosaic.sources import TileSourceError

    try:
        validate_library_name(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    with command_stores(data_dir) as stores:
        store = stores.libraries
        try:
            created = store.create_from(
                name, description if description is not None else f"Photos from {source.name}", source, shared=shared
            )
        except (LibraryError, TileSourceError) as exc:
            raise click.ClickException(str(exc)) from None
    for skipped_name, reason in created.skipped[:20]:
        click.echo(f"skipped {skipped_name}: {reason}", err=True)
    if len(created.skipped) > 20:
        click.echo(f"... and {len(created.skipped) - 20} more skipped", err=True)
    click.echo(f"library {name}: {created.tile_count} tiles, version {created.version[:12]}, {created.uri}")


@library.command("list")
@DATA_DIR_OPTION
def list_libraries(data_dir: str | None) -> None:
    """List the tile libraries with their tile counts."""
    with command_stores(data_dir) as stores:
        store = stores.libraries
        libraries = store.list()
    if not libraries:
        click.echo("no tile libraries yet: create one with `photomosaics library create NAME FOLDER_OR_ZIP`")
        return
    width = max(len(info.name) for info in libraries)
    click.echo(f"{'NAME':<{width}}  {'TILES':>6}  {'VERSION':<12}  {'SHARED':<6}  DESCRIPTION")
    for info in libraries:
        tiles = str(info.tile_count) if info.tile_count >= 0 else "?"
        mark = "yes" if info.shared else "no"
        click.echo(f"{info.name:<{width}}  {tiles:>6}  {info.version[:12]:<12}  {mark:<6}  {info.description}")


@library.command("share")
@click.argument("name")
@click.option("--off", is_flag=True, help="Take the mark off: only the library's owner (if any) sees it.")
@DATA_DIR_OPTION
def share(name: str, off: bool, data_dir: str | None) -> None:
    """Mark library NAME shared: every web client sees it and may use it (--off: no longer)."""
    from dal.errors import LibraryError

    with command_stores(data_dir) as stores:
        try:
            stores.libraries.set_shared(name, not off)
        except (LibraryError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"library {name}: {'private' if off else 'shared with every client'}")


PHOTO_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".heic", ".heif", ".gif", ".bmp", ".tif", ".tiff"})
GRANT_BATCH = 500  # the API's most files per POST .../uploads
UPLOADS_AT_ONCE = 4
_CONCURRENCY_PER_UPLOAD = 2


def photo_files(folder: Path) -> Iterator[Path]:
    """The photo files under ``folder`` by extension (case-insensitive), sorted; hidden files
    and folders (a leading dot) are left out."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and Path(name).suffix.lower() in PHOTO_SUFFIXES:
                yield Path(root, name)


def _client_file() -> Path:
    explicit = os.environ.get("PHOTOMOSAICS_CLIENT_FILE")
    return Path(explicit) if explicit else Path(click.get_app_dir("photomosaics")) / "clients.json"


def _load_client(session: Any, base: str) -> None:
    """The cookies this machine was given by the web app at ``base`` before: the same client id."""
    try:
        known = json.loads(_client_file().read_text())
        session.cookies.update(known.get(base, {}))
    except (OSError, ValueError, AttributeError, TypeError):
        pass


def _save_client(session: Any, base: str) -> None:
    import requests

    path = _client_file()
    try:
        known = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(known, dict):
            known = {}
        known[base] = requests.utils.dict_from_cookiejar(session.cookies)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a client id is a credential
        with os.fdopen(fd, "w") as out:
            json.dump(known, out, indent=1)
        partial.replace(path)
    except (OSError, ValueError) as exc:
        click.echo(f"note: cannot keep the client id in {path} ({exc}); a later add is another client", err=True)


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
            BlobClient.from_blob_url(url).upload_blob(
                data, length=size, overwrite=True, max_concurrency=_CONCURRENCY_PER_UPLOAD, progress_hook=hook
            )
    finally:
        bar.add(size - sent)  # done or given up: the bar moves past this file either way


class _Indexing:
    """Asks the indexer for photos as their uploads finish, 32 at a time (one index request's
    worth), so that indexing runs beside the rest of the upload instead of after it."""

    def __init__(self, api: Any, name: str) -> None:
        from dal.queues.message_fields import MAX_PHOTOS_PER_INDEX_REQUEST

        self.api, self.name, self.every = api, name, MAX_PHOTOS_PER_INDEX_REQUEST
        self.waiting: list[str] = []
        self.answer: dict[str, Any] = {}
        self.missed = False

    def ready(self, photo: str) -> None:
        self.waiting.append(photo)
        if len(self.waiting) >= self.every:
            self.flush()

    def flush(self, *, last: bool = False) -> dict[str, Any]:
        """Ask for the photos waiting (none is fine: the answer still counts the staged ones). A
        request that failed is not fatal: the last one then asks for every photo not indexed."""
        asked, self.waiting = self.waiting, []
        body = None if self.missed and last else {"photos": asked}
        try:
            self.answer = self.api.call("POST", f"/api/libraries/{self.name}/index", ok=(202,), json=body).json()
        except click.ClickException as exc:
            if last:
                raise
            click.echo(f"note: asking for indexing failed ({exc.format_message()}); asking again at the end", err=True)
            self.missed = True
        return self.answer


def _upload_all(
    api: Any, name: str, description: str | None, files: list[tuple[Path, str, int]], indexing: _Indexing
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
            body: dict[str, Any] = {"files": [{"name": rel, "size": size} for _, rel, size in batch]}
            if description is not None:
                body["description"] = description
            answer = api.call("POST", f"/api/libraries/{name}/uploads", ok=(200, 201), json=body).json()
            if start == 0:
                _save_client(api.session, api.base)
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


def _follow_index(api: Any, name: str, expected: int, deadline: float) -> dict[str, Any]:
    """The library's progress, polled until ``indexed + skipped`` reaches ``expected`` or the deadline."""
    progress = api.call("GET", f"/api/libraries/{name}/photos", params={"limit": 1}).json()["progress"]
    done = progress["indexed"] + progress["skipped"]
    with click.progressbar(length=expected, label="indexing", show_pos=True, file=sys.stderr) as bar:
        bar.update(min(done, expected))
        while done < expected and time.monotonic() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            progress = api.call("GET", f"/api/libraries/{name}/photos", params={"limit": 1}).json()["progress"]
            now = progress["indexed"] + progress["skipped"]
            bar.update(max(0, min(now, expected) - min(done, expected)))
            done = now
    return progress


# The web app the client commands (add, remove, rename) talk to, as `photomosaics submit` does.
_url_option = click.option(
    "--url",
    default=lambda: os.environ.get("PHOTOMOSAICS_URL", "http://127.0.0.1:8080"),
    show_default="http://127.0.0.1:8080",
    callback=lambda ctx, param, value: _base_url(ctx, param, value),
    help="Base URL of the web app (env PHOTOMOSAICS_URL).",
)


@library.command("add")
@click.argument("name")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-d", "--description", default=None, help="The library's description, when this creates it.")
@_url_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    help="Stop following the indexing after this many seconds (the indexer goes on).",
)
def add(name: str, folder: Path, description: str | None, url: str, timeout: float) -> None:
    """Upload the photos of FOLDER into your library NAME through the web app, and index them.

    A client of the web API like the browser: NAME is created (owned by this machine's client
    id) if it does not exist; photos already uploaded with the same size are skipped.
    """
    from photomosaics.commands.submit import _Api

    files = []
    for path in photo_files(folder):
        try:
            files.append((path, path.relative_to(folder).as_posix(), path.stat().st_size))
        except OSError as exc:
            click.echo(f"cannot read {path}: {exc.strerror or exc}", err=True)
    if not files:
        raise click.UsageError(f"no photos in {folder} (looked for {', '.join(sorted(s[1:] for s in PHOTO_SUFFIXES))})")
    started = time.monotonic()
    api = _Api(url, timeout=60.0)
    _load_client(api.session, api.base)
    click.echo(f"{len(files):,} photos in {folder} ({sum(s for _, _, s in files) / 2**20:,.1f} MiB)", err=True)
    indexing = _Indexing(api, name)
    sent = _upload_all(api, name, description, files, indexing)
    for refused_name, reason in sent["refused"][:20]:
        click.echo(f"refused {refused_name}: {reason}", err=True)
    if len(sent["refused"]) > 20:
        click.echo(f"... and {len(sent['refused']) - 20} more refused", err=True)
    for failed_name, reason in sent["failed"][:20]:
        click.echo(f"failed {failed_name}: {reason}", err=True)
    click.echo(
        f"library {name}{' (new)' if sent['created'] else ''}: {sent['uploaded']:,} uploaded, "
        f"{sent['already']:,} already there, {len(sent['refused']):,} refused, {len(sent['failed']):,} failed",
        err=True,
    )
    queued = indexing.flush(last=True)  # the last photos; and how many the library has staged in all
    progress = _follow_index(api, name, queued["staged"], time.monotonic() + timeout)
    done = progress["indexed"] + progress["skipped"]
    click.echo(
        f"library {name}: {progress['indexed']:,} indexed, {progress['skipped']:,} skipped, "
        f"{progress['groups']:,} groups of near-duplicates ({time.monotonic() - started:.1f} s)"
    )
    for reason, count in sorted(progress.get("skipped_reasons", {}).items(), key=lambda kv: -kv[1]):
        click.echo(f"  skipped {count:,}: {reason}")
    if done < queued["staged"]:
        raise click.ClickException(
            f"{queued['staged'] - done:,} of {queued['staged']:,} photos not indexed yet after {timeout:.0f} s; "
            f"the indexer goes on (see GET /api/libraries/{name}/photos)"
        )
    if sent["failed"]:
        raise click.ClickException(f"{len(sent['failed']):,} photos failed to upload; run the same command again")


@library.command("remove")
@click.argument("name")
@click.argument("photos", nargs=-1, required=True)
@_url_option
def remove(name: str, photos: tuple[str, ...], url: str) -> None:
    """Remove PHOTOS (as `add` uploaded them: a file's path in its folder, or its name in the
    library) from your library NAME, through the web app. Jobs already started keep the version
    they started with. Exit 1 when the library has no photo of some of the names."""
    from dal.blobs.staging import safe_photo_name
    from photomosaics.commands.submit import _Api

    try:
        names = sorted({safe_photo_name(p) for p in photos})
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    api = _Api(url, timeout=60.0)
    _load_client(api.session, api.base)
    removed: list[str] = []
    missing: list[str] = []
    version = None
    for start in range(0, len(names), _REMOVE_BATCH):
        body = api.call(
            "POST", f"/api/libraries/{name}/remove-photos", json={"photos": names[start : start + _REMOVE_BATCH]}
        ).json()
        removed += body["removed"]
        missing += body["not_found"]
        version = body["version"] or version
    click.echo(f"library {name}: {len(removed):,} removed" + (f", now version {version}" if version else ""))
    if missing:
        raise click.ClickException(f"no photo called {', '.join(missing[:20])}" + (" ..." if len(missing) > 20 else ""))


_REMOVE_BATCH = 1000  # POST /api/libraries/<name>/remove-photos takes at most this many


@library.command("rename")
@click.argument("old")
@click.argument("new")
@_url_option
def rename(old: str, new: str, url: str) -> None:
    """Rename your library OLD to NEW through the web app. Jobs made with it keep working, and
    OLD stays its address too (no one else can take it)."""
    from photomosaics.commands.submit import _Api

    api = _Api(url, timeout=60.0)
    _load_client(api.session, api.base)
    body = api.call("PATCH", f"/api/libraries/{old}", json={"name": new}).json()
    click.echo(f"library {old} is now called {body['name']}")


def _base_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from photomosaics.commands.submit import _base_url as check

    return check(ctx, param, value)
