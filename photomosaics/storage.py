"""Storage for the people's commands (``library``, ``queues``): which account to talk to.

In order: ``AZURE_STORAGE_CONNECTION_STRING``; the Azurite that ``photomosaics run`` is
running on the same data folder; else an embedded Azurite started for the command on that
folder, so what a command creates is there for the next ``make run``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import click

from dal.config import Settings, StorageClients
from dal.hints.channel import HINT_DIR_ENV, HINTS_URL_ENV, HintChannel, LocalHintChannel
from dal.stores import Stores
from photomosaics.local.azurite import AzuriteError, embedded_or_configured
from photomosaics.local.children import hint_folder

DATA_DIR_OPTION = click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="The data folder of `photomosaics run`, used when no connection string is set [default: .data].",
)


@contextlib.contextmanager
def command_stores(data_dir: str | None) -> Iterator[Stores]:
    """The stores of the account a command should use, for the ``with`` block."""

    settings = Settings.from_env()
    location = Path(data_dir or settings.data_dir) / "azurite"
    try:
        with embedded_or_configured(location=location) as connection_string:
            yield Stores(StorageClients(connection_string, profile="interactive"), settings)
    except AzuriteError as exc:
        raise click.ClickException(str(exc)) from None


def run_hints(data_dir: str | None) -> HintChannel | None:
    """The hint folder of a ``photomosaics run`` on this data folder (``children.hint_folder``), when a run has made it and no channel is configured: what a command sends (a requeue)
    then wakes the run's listeners at once, as its children's sends do, not at their 60 s poll."""
    if os.environ.get(HINT_DIR_ENV) or os.environ.get(HINTS_URL_ENV, "").strip():
        return None  # the configured channel is the queue's own (``channel_from_env``)
    folder = hint_folder(Path(data_dir or Settings.from_env().data_dir).resolve())
    return LocalHintChannel(folder) if folder.is_dir() else None
