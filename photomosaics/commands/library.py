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

import os
import time
from pathlib import Path

import click

from photomosaics.client_file import load_client
from photomosaics.library_upload import (
    PHOTO_SUFFIXES,
    Indexing,
    folder_photos,
    follow_index,
    left_out_note,
    not_in_storage,
    upload_all,
)
from photomosaics.storage import DATA_DIR_OPTION, command_stores
from photomosaics.web_api import DEFAULT_URL, WebApi, check_base_url


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


# The web app the client commands (add, remove, rename) talk to, as `photomosaics submit` does.
_url_option = click.option(
    "--url",
    default=lambda: os.environ.get("PHOTOMOSAICS_URL", DEFAULT_URL),
    show_default=DEFAULT_URL,
    callback=check_base_url,
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
    found = folder_photos(folder)
    files = found.photos
    if found.left_out:
        click.echo(left_out_note(found.left_out), err=True)
    if not files:
        raise click.UsageError(f"no photos in {folder} (looked for {', '.join(sorted(s[1:] for s in PHOTO_SUFFIXES))})")
    started = time.monotonic()
    api = WebApi(url, timeout=60.0)
    load_client(api.session, api.base)
    click.echo(f"{len(files):,} photos in {folder} ({sum(s for _, _, s in files) / 2**20:,.1f} MiB)", err=True)
    indexing = Indexing(api, name)
    sent = upload_all(api, name, description, files, indexing)
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
    indexing.flush(last=True)  # the last photos
    deadline = time.monotonic() + timeout
    progress = follow_index(api, name, deadline)
    # Every photo acknowledged, and still there? Those storage lost since, or that failed, are sent
    # again once (a second run of the command would do the same).
    refused = {refused_name for refused_name, _ in sent["refused"]}
    missing = not_in_storage(api, name, [file for file in files if file[1] not in refused])
    if missing:
        count = f"{len(missing):,} photo is" if len(missing) == 1 else f"{len(missing):,} photos are"
        click.echo(f"{count} not in storage after the upload: sending again", err=True)
        sent = upload_all(api, name, None, missing, indexing)
        indexing.flush(last=True)
        progress = follow_index(api, name, deadline)
        missing = [file for file in missing if file[1] in {failed_name for failed_name, _ in sent["failed"]}]
    done, staged = progress["indexed"] + progress["skipped"], progress["uploaded"]
    click.echo(
        f"library {name}: {progress['indexed']:,} indexed, {progress['skipped']:,} skipped, "
        f"{progress['groups']:,} group{'' if progress['groups'] == 1 else 's'} of near-duplicates "
        f"({time.monotonic() - started:.1f} s)"
    )
    named = _skipped_names(api, name) if progress["skipped"] else {}
    for reason, count in sorted(progress.get("skipped_reasons", {}).items(), key=lambda kv: -kv[1]):
        names = named.get(reason, [])
        more = ", ..." if count > len(names[:_NAMES_PER_REASON]) else ""
        which = f" ({', '.join(names[:_NAMES_PER_REASON])}{more})" if names else ""
        click.echo(f"  skipped {count:,}{which}: {reason}")
    if done < staged:
        raise click.ClickException(
            f"{staged - done:,} of {staged:,} photos not indexed yet after {timeout:.0f} s; "
            f"the indexer goes on (see GET /api/libraries/{name}/photos)"
        )
    if missing:
        raise click.ClickException(f"{len(missing):,} photos failed to upload; run the same command again")


_NAMES_PER_REASON = 3  # the photos named beside each reason a photo was skipped for


def _skipped_names(api: WebApi, name: str) -> dict[str, list[str]]:
    """The skipped photos' names by reason, from the first page of them (up to 1,000): which
    file to look at, not only why."""
    body = api.call("GET", f"/api/libraries/{name}/photos", params={"state": "skipped", "limit": 1000}).json()
    names: dict[str, list[str]] = {}
    for photo in body["photos"]:
        names.setdefault(photo["reason"], []).append(photo["name"])
    return names


@library.command("remove")
@click.argument("name")
@click.argument("photos", nargs=-1, required=True)
@_url_option
def remove(name: str, photos: tuple[str, ...], url: str) -> None:
    """Remove PHOTOS (as `add` uploaded them: a file's path in its folder, or its name in the
    library) from your library NAME, through the web app. Jobs already started keep the version
    they started with. Exit 1 when the library has no photo of some of the names."""
    from dal.blobs.staging import safe_photo_name

    try:
        names = sorted({safe_photo_name(p) for p in photos})
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    api = WebApi(url, timeout=60.0)
    load_client(api.session, api.base)
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
    api = WebApi(url, timeout=60.0)
    load_client(api.session, api.base)
    body = api.call("PATCH", f"/api/libraries/{old}", json={"name": new}).json()
    click.echo(f"library {old} is now called {body['name']}")
