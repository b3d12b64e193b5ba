"""The Python dependencies are locked: every requirement of pyproject.toml is pinned with hashes in
requirements/dev.lock (make, CI) and, for the runtime and demo extra, requirements/runtime.lock
(the Docker image); the floors stay past the advisories; make installs with --require-hashes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)", re.M)
# Versions with published advisories stay below every floor.
ADVISORY_FLOORS = {"flask": "3.1", "werkzeug": "3.0.6", "gunicorn": "23.0", "requests": "2.32.4"}


def _pins(lock: str) -> dict[str, list[str]]:
    pins: dict[str, list[str]] = {}
    for name, version in _PIN.findall((ROOT / "requirements" / lock).read_text()):
        pins.setdefault(canonicalize_name(name), []).append(version)
    return pins


def _requirements(*extras: str) -> list[Requirement]:
    found = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in extras:
        found += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    return [r for r in found if canonicalize_name(r.name) != "photomosaics"]


@pytest.mark.parametrize(("lock", "extras"), [("dev.lock", ("test", "demo", "node")), ("runtime.lock", ("demo",))])
def test_every_requirement_is_pinned_within_its_range(lock: str, extras: tuple[str, ...]) -> None:
    pins = _pins(lock)
    for requirement in _requirements(*extras):
        versions = pins.get(canonicalize_name(requirement.name))
        assert versions, f"{requirement.name} is not in requirements/{lock}: run `make lock`"
        for version in versions:
            assert requirement.specifier.contains(version, prereleases=True), f"{requirement} vs {version} in {lock}"


@pytest.mark.parametrize("lock", ["dev.lock", "runtime.lock"])
def test_every_pin_carries_hashes(lock: str) -> None:
    entries = re.split(r"\n(?=[A-Za-z0-9])", (ROOT / "requirements" / lock).read_text().split("\n", 2)[2])
    assert len(entries) > 20
    for entry in entries:
        assert "==" in entry and "--hash=sha256:" in entry, f"unhashed entry in {lock}: {entry[:80]}"


def test_floors_are_past_the_advisories() -> None:
    requirements = {canonicalize_name(r.name): r for r in _requirements()}
    for name, floor in ADVISORY_FLOORS.items():
        spec = requirements[name].specifier
        assert spec.contains(floor), f"{name}{spec} refuses {floor}"
        below = Version(floor)
        older = (
            f"{below.major}.{below.minor}.{max(below.micro - 1, 0)}"
            if below.micro
            else f"{below.major}.{below.minor - 1}.99"
        )
        assert not spec.contains(older, prereleases=True), f"{name}{spec} admits {older}, which has an advisory"
        for version in _pins("dev.lock")[name]:
            assert Version(version) >= below


def test_make_installs_from_the_lock_with_hashes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "UV_INSTALL := $(BIN)/uv pip install" in makefile
    assert "$(UV_INSTALL) --quiet --require-hashes --no-deps -r $(DEV_LOCK)" in makefile
    assert "--no-deps --no-build-isolation -e ." in makefile
    assert re.search(r"^lock lock-upgrade:", makefile, re.M), "a documented way to refresh the lock"
    assert "requirements/dev.lock" in makefile
