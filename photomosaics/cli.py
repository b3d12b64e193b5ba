"""The ``photomosaics`` command: a click group whose sub-commands live in small modules.

The group is lazy (click's ``LazyGroup`` pattern): ``COMMANDS`` names each sub-command's
module and its one-line summary, a command's module is imported only when that command
runs, and ``photomosaics --help`` prints the summaries without importing any of them. So
``--help`` loads neither NumPy nor the Azure SDK, and ``render`` never loads the storage
commands. ``tests/test_cli_startup.py`` holds the table to each command's own docstring.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Mapping

import click

# name -> ("module:attribute", the summary ``--help`` shows: the command's short help).
COMMANDS: Mapping[str, tuple[str, str]] = {
    "controller": (
        "photomosaics.commands.roles:controller",
        "Run a JobController: slices jobs from imagerequest, stitches from sliceresponse.",
    ),
    "indexer": (
        "photomosaics.commands.roles:indexer",
        "Run an indexer: makes tiles of the photos uploaded into libraries (indexrequest).",
    ),
    "library": (
        "photomosaics.commands.library:library",
        "Tile libraries in storage (AZURE_STORAGE_CONNECTION_STRING, or the embedded Azurite).",
    ),
    "processor": (
        "photomosaics.commands.roles:processor",
        "Run an ImageProcessor: renders the slices of slicerequest into mosaics.",
    ),
    "queues": (
        "photomosaics.commands.queues:queues",
        "Show queue depths (approximate, as Azure reports them) and poison counts.",
    ),
    "render": (
        "photomosaics.commands.render:render",
        "Render TARGET as a mosaic of library tiles, offline, into each OUTPUT.",
    ),
    "responder": (
        "photomosaics.commands.roles:responder",
        "Run the responder: marks jobs done from imageresponse, deletes jobs from jobcleanup.",
    ),
    "retention": (
        "photomosaics.commands.retention:retention",
        "Sweep once: expire old finished jobs and delete orphaned blobs.",
    ),
    "run": (
        "photomosaics.commands.run:run",
        "Run everything: Azurite, web app, controller, responder and processors.",
    ),
    "submit": (
        "photomosaics.commands.submit:submit",
        "Make a mosaic of IMAGE through the web app's API and save it.",
    ),
    "syphon": (
        "photomosaics.commands.roles:syphon",
        "Run the syphon: pings the primary, moves the secondary's backlog back.",
    ),
    "web": (
        "photomosaics.commands.web:web",
        "Serve the web app and its JSON API with gunicorn.",
    ),
}


class LazyGroup(click.Group):
    """A group that imports a sub-command's module only when that sub-command is asked for."""

    def __init__(self, *args: object, lazy_commands: Mapping[str, tuple[str, str]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # click's own keyword arguments
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy_commands:
            return super().get_command(ctx, cmd_name)
        module_name, _, attribute = self.lazy_commands[cmd_name][0].partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}:{attribute} is not a click command")
        return command

    def invoke(self, ctx: click.Context) -> object:
        """A setting out of its range (``dal.config.SettingsError``, from the environment) is one
        line and exit 1 in every command, not a traceback in some."""
        try:
            return super().invoke(ctx)
        except ValueError as exc:
            config = sys.modules.get("dal.config")  # imported by then if it raised; not imported for --help
            if config is not None and isinstance(exc, config.SettingsError):
                raise click.ClickException(str(exc)) from None
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the summaries, shortened to the width as click shortens a
        docstring, without importing a command module."""
        summaries = {name: self.lazy_commands[name][1] for name in self.lazy_commands}
        for name in super().list_commands(ctx):
            command = super().get_command(ctx, name)
            if command is not None and not command.hidden:
                summaries[name] = command.get_short_help_str(10_000)
        if not summaries:
            return
        limit = formatter.width - 6 - max(map(len, summaries))
        rows = [
            (name, click.Command(name, help=summaries[name]).get_short_help_str(limit)) for name in sorted(summaries)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.version_option(package_name="photomosaics")
def main(verbose: int) -> None:
    """Photo Mosaics: a queue-driven photo-mosaic service on Azure Storage."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
