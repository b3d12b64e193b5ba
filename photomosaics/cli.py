"""The ``photomosaics`` command: a click group whose sub-commands live in small modules.

Each sub-command module registers itself on ``main``; they are imported here so that
``photomosaics --help`` lists them all. Heavy imports (NumPy, Azure SDK) happen inside the
commands, so ``--help`` stays fast.
"""

from __future__ import annotations

import logging

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.version_option(package_name="photomosaics")
def main(verbose: int) -> None:
    """Photo Mosaics: a queue-driven photo-mosaic service on Azure Storage."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")


def _register() -> None:
    import importlib
    import pkgutil

    from photomosaics import commands

    for module in pkgutil.iter_modules(commands.__path__):
        importlib.import_module(f"{commands.__name__}.{module.name}")


_register()
