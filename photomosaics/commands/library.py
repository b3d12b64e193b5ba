"""``photomosaics library create|list|share``: tile libraries in storage, as the operator.

Storage is chosen by ``photomosaics.storage.command_stores``: the configured account, the
Azurite of a running ``photomosaics run``, or an embedded one on the same data folder.
"""

from __future__ import annotations

from pathlib import Path

import click

from photomosaics.storage import DATA_DIR_OPTION, command_stores


@click.group()
def library() -> None:
    """Tile libraries in storage (AZURE_STORAGE_CONNECTION_STRING, or the embedded Azurite)."""


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
    from dal.blobs.libraries import validate_library_name
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
