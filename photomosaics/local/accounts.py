"""The storage accounts of a local run: the configured account or an embedded Azurite that
persists in ``.data/azurite``, the paired secondary (configured, a second embedded Azurite, or
none), and what the application needs in them (``prepare_storage``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from dal.availability.failover import SECONDARY_CONNECTION_STRING_ENV
from dal.availability.health import check_storage
from dal.blobs.cors import set_upload_cors
from dal.config import CONNECTION_STRING_ENV, Settings, StorageClients
from dal.connection_strings import expand_connection_string
from dal.stores import Stores
from photomosaics.local.azurite import Azurite, AzuriteError
from photomosaics.render_library import demo_library
from workers.demo_library import ensure_demo_library


@contextlib.contextmanager
def storage_account(data_dir: Path) -> Iterator[tuple[str, Any]]:
    """The configured account (and None), or an embedded Azurite persisting in ``<data_dir>/azurite``."""
    configured = Settings.from_env().connection_string
    if configured:
        click.echo(f"using the storage account from {CONNECTION_STRING_ENV}")
        yield expand_connection_string(configured), None
        return
    azurite = Azurite(location=data_dir / "azurite")
    try:
        connection_string = azurite.start()
    except AzuriteError as exc:
        raise click.ClickException(str(exc)) from None
    node = azurite.runtime.describe() if azurite.runtime else "Node.js"
    click.echo(f"storage: embedded Azurite (pid {azurite.pid}) on {node}, data in {data_dir / 'azurite'}")
    _say_if_moved(azurite)
    holder = [azurite]  # the keeper may replace it with a restarted one
    try:
        yield connection_string, holder
    finally:
        holder[0].stop()
        click.echo("Azurite stopped")


@contextlib.contextmanager
def secondary_account(data_dir: Path, *, embedded: bool) -> Iterator[str | None]:
    """The paired secondary account (dal.availability.failover): configured, a second embedded Azurite, or none."""
    configured = os.environ.get(SECONDARY_CONNECTION_STRING_ENV, "").strip()
    if configured or not embedded:
        yield configured or None
        return
    azurite = Azurite(location=data_dir / "azurite-secondary")
    try:
        connection_string = azurite.start()
    except AzuriteError as exc:
        raise click.ClickException(f"secondary account: {exc}") from None
    click.echo(f"secondary storage: embedded Azurite (pid {azurite.pid}), data in {data_dir / 'azurite-secondary'}")
    _say_if_moved(azurite)
    try:
        yield connection_string
    finally:
        azurite.stop()


def _say_if_moved(azurite: Azurite) -> None:
    """Warn when the data folder's Azurite could not have its last ports back: the work queued
    before this run names blobs at the old address, and fails as another account's."""
    if azurite.moved_from is None:
        return
    was = ", ".join(map(str, azurite.moved_from))
    now = ", ".join(str(azurite.ports[service]) for service in ("Blob", "Queue", "Table"))
    click.echo(
        f"warning: Azurite's ports of the last run on this folder ({was}) are in use, so it listens on "
        f"{now}: jobs and photo indexing queued before this run name the old address and will fail "
        "(submit them again); stop what holds those ports and restart to keep them",
        err=True,
    )


def prepare_storage(connection_string: str, *, upload_origins: list[str] | None = None) -> None:
    """Queues (with metadata), containers, tables and the demo library, where missing; with
    ``upload_origins`` (the embedded Azurite), the Blob service's CORS rule that lets the web
    page at those origins upload photos straight to storage (``dal.blobs.cors``).

    Runs at start-up and again after the embedded Azurite restarts (``AzuriteKeeper``), so
    ``Stores.ensure`` is the one list of what the app needs to exist."""
    settings = Settings.from_env()
    prefix = settings.name_prefix
    check_storage(StorageClients(connection_string, profile="probe"))
    storage = StorageClients(connection_string, profile="worker")
    Stores(storage, settings).ensure()
    if upload_origins:
        set_upload_cors(storage, upload_origins)
    started = time.monotonic()
    ensure_demo_library(storage, prefix=prefix, built=lambda: demo_library()[0])
    if time.monotonic() - started > 1:
        click.echo(f"demo tile library created in {time.monotonic() - started:.0f} s")
