"""The ``photomosaics`` group is lazy: ``--help`` and each command load only what they use.

``photomosaics.cli.COMMANDS`` is the table ``--help`` prints from; it is held here to the
commands themselves (every command in ``photomosaics/commands`` is in it, with its own short
help), and the modules a fresh process has loaded after ``--help`` and after an offline
``render`` are checked in a subprocess.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from PIL import Image

from photomosaics import commands
from photomosaics.cli import COMMANDS, main

# Runs the command line in a fresh interpreter, then writes the names of the loaded modules to argv[1].
LOADED_MODULES = """
import json, sys
from photomosaics.cli import main
try:
    main(sys.argv[2:], prog_name="photomosaics")
except SystemExit as exit:
    assert not exit.code, exit.code
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
"""


def loaded_modules(tmp_path: Path, *args: str) -> list[str]:
    listing = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if k != "AZURE_STORAGE_CONNECTION_STRING"}
    env["PHOTOMOSAICS_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-c", LOADED_MODULES, str(listing), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode:  # not an AssertionError: the xfail below expects only its own assertion to fail
        pytest.fail(f"photomosaics {' '.join(args)} failed:\n{done.stderr}")
    return json.loads(listing.read_text())


def under(modules: list[str], *packages: str) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)]


def test_every_command_is_in_the_table_with_its_module() -> None:
    defined = set()
    for info in pkgutil.iter_modules(commands.__path__):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        found = {n: c for n, c in vars(module).items() if isinstance(c, click.Command)}
        nested = {id(sub) for c in found.values() if isinstance(c, click.Group) for sub in c.commands.values()}
        defined |= {(c.name, f"{module.__name__}:{n}") for n, c in found.items() if id(c) not in nested}
    assert defined == {(name, path) for name, (path, _) in COMMANDS.items()}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_table_holds_each_commands_own_short_help(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None and command.name == name
    assert COMMANDS[name][1] == command.get_short_help_str(limit=10_000)


@pytest.mark.parametrize("width", [50, 80, 200])
def test_help_lists_the_commands_as_the_commands_themselves_would(width: int) -> None:
    lazy, eager = (click.Context(main, info_name="photomosaics", terminal_width=width).make_formatter() for _ in "ab")
    main.format_commands(click.Context(main, terminal_width=width), lazy)
    click.Group.format_commands(main, click.Context(main, terminal_width=width), eager)  # imports every command
    assert lazy.getvalue() == eager.getvalue()
    assert all(name in lazy.getvalue() for name in COMMANDS)


def test_help_loads_no_command_module_nor_numpy_pil_or_azure(tmp_path: Path) -> None:
    modules = loaded_modules(tmp_path, "--help")
    assert under(modules, "photomosaics.commands", "numpy", "PIL", "azure", "dal", "mosaic") == []


@pytest.fixture(scope="module")
def render_modules(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The modules loaded by an offline render of a small target with a folder library."""
    tmp_path = tmp_path_factory.mktemp("render")
    (tmp_path / "tiles").mkdir()
    for i, colour in enumerate([(220, 40, 40), (40, 200, 60), (30, 60, 210), (20, 20, 20)]):
        Image.new("RGB", (40, 30), colour).save(tmp_path / "tiles" / f"t{i}.jpg")
    Image.linear_gradient("L").resize((48, 32)).convert("RGB").save(tmp_path / "target.jpg")
    args = ["render", str(tmp_path / "target.jpg"), "-l", str(tmp_path / "tiles"), "-t", "4", "--tiles-across", "12"]
    modules = loaded_modules(tmp_path, *args, "-o", str(tmp_path / "out.png"))
    assert (tmp_path / "out.png").is_file()
    return modules


def test_render_loads_no_other_command_nor_the_storage_services(render_modules: list[str]) -> None:
    assert under(render_modules, "photomosaics.commands") == ["photomosaics.commands", "photomosaics.commands.render"]
    assert under(render_modules, "photomosaics.storage", "azure.storage.queue", "azure.data", "dal.queues") == []


def test_render_imports_no_azure_sdk(render_modules: list[str]) -> None:
    assert under(render_modules, "azure") == []
