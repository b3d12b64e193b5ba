"""``photomosaics library create|list``: tile libraries in storage.

Storage is the account of ``AZURE_STORAGE_CONNECTION_STRING`` when it is set; otherwise an
embedded Azurite is started for the command, keeping its data in ``<data-dir>/azurite``
(the same place ``photomosaics run`` keeps it), so a library created here is there for the
next run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from photomosaics.cli import main


@contextlib.contextmanager
def _library_store(data_dir: str | None) -> Iterator[Any]:
    from dal.azurite import AzuriteError, embedded_or_configured
    from dal.config import Settings, StorageClients
    from dal.libraries import LibraryStore

    settings = Settings.from_env()
    location = Path(data_dir or settings.data_dir) / "azurite"
    try:
        with embedded_or_configured(location=location) as connection_string:
            storage = StorageClients(connection_string, profile="interactive")
            yield LibraryStore(storage, prefix=settings.name_prefix)
    except AzuriteError as exc:
        raise click.ClickException(str(exc)) from None


_DATA_DIR = click.option(
    "--data-dir", type=click.Path(file_okay=False), default=None,
    help="Where the embedded Azurite keeps its data when no connection string is set [default: .data].",
)  # fmt: skip


@main.group()
def library() -> None:
    """Tile libraries in storage (AZURE_STORAGE_CONNECTION_STRING, or the embedded Azurite)."""


@library.command("create")
@click.argument("name")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("-d", "--description", default=None, help="Shown in the web page's library list [default: from SOURCE].")
@_DATA_DIR
def create(name: str, source: Path, description: str | None, data_dir: str | None) -> None:
    """Create (or replace) library NAME from SOURCE, a folder or zip of photos.

    NAME: 3-63 lowercase letters, digits and single hyphens (a container name).
    """
    from dal.libraries import LibraryError, validate_library_name
    from workers.tile_sources import TileSourceError

    try:
        validate_library_name(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    with _library_store(data_dir) as store:
        try:
            created = store.create_from(name, description if description is not None else f"Photos from {source.name}", source)
        except (LibraryError, TileSourceError) as exc:
            raise click.ClickException(str(exc)) from None
    for skipped_name, reason in created.skipped[:20]:
        click.echo(f"skipped {skipped_name}: {reason}", err=True)
    if len(created.skipped) > 20:
        click.echo(f"... and {len(created.skipped) - 20} more skipped", err=True)
    click.echo(f"library {name}: {created.tile_count} tiles, version {created.version[:12]}, {created.uri}")


@library.command("list")
@_DATA_DIR
def list_libraries(data_dir: str | None) -> None:
    """List the tile libraries with their tile counts."""
    with _library_store(data_dir) as store:
        libraries = store.list()
    if not libraries:
        click.echo("no tile libraries yet: create one with `photomosaics library create NAME FOLDER_OR_ZIP`")
        return
    width = max(len(info.name) for info in libraries)
    click.echo(f"{'NAME':<{width}}  {'TILES':>6}  {'VERSION':<12}  DESCRIPTION")
    for info in libraries:
        tiles = str(info.tile_count) if info.tile_count >= 0 else "?"
        click.echo(f"{info.name:<{width}}  {tiles:>6}  {info.version[:12]:<12}  {info.description}")
