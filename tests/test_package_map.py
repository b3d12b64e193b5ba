"""``docs/architecture.md``'s package map lists every module of the product, by room.

Its list "Every module, by room" has one line per package or room (``- `dal/queues/`: `messages`,
...``); a module of ``dal/``, ``mosaic/``, ``workers/``, ``webapp/`` or ``photomosaics/`` missing
from its room's line fails, and so does a name listed there that is no module (moved or gone).
A package's ``__init__`` is its room's index, so it is not listed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("dal", "mosaic", "workers", "webapp", "photomosaics")
_ROOM_LINE = re.compile(r"^- `((?:[a-z_]+/)+)`: (.*)$")


def modules_by_room() -> dict[str, set[str]]:
    """``room path/ -> module names`` for every product module but the ``__init__``s."""
    rooms: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name != "__init__.py" and "__pycache__" not in path.parts:
                rooms.setdefault(path.parent.relative_to(ROOT).as_posix() + "/", set()).add(path.stem)
    return rooms


def listed_by_room(text: str) -> dict[str, set[str]]:
    """The room lines of the package map: ``room path/ -> the names in backticks on its line``."""
    section = text.split("## The package map", 1)[1].split("\n## ", 1)[0]
    rooms: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = _ROOM_LINE.match(line)
        if match:
            rooms.setdefault(match.group(1), set()).update(re.findall(r"`([a-z_0-9]+)`", match.group(2)))
    return rooms


def drift(text: str, actual: dict[str, set[str]]) -> list[str]:
    listed = listed_by_room(text)
    problems = []
    for room in sorted(set(actual) | set(listed)):
        for name in sorted(actual.get(room, set()) - listed.get(room, set())):
            problems.append(f"{room}{name}.py is not in the package map")
        for name in sorted(listed.get(room, set()) - actual.get(room, set())):
            problems.append(f"the package map lists {room}{name}, which is no module")
    return problems


def test_the_package_map_lists_every_module() -> None:
    problems = drift(DOC.read_text(encoding="utf-8"), modules_by_room())
    assert not problems, "docs/architecture.md, 'Every module, by room':\n" + "\n".join(problems)


def test_the_map_check_sees_a_missing_and_a_stale_module() -> None:
    text = "## The package map\n\n- `workers/runtime/`: `listener`, `gone`\n\n## Glossary\n- `x/`: `y`\n"
    actual = {"workers/runtime/": {"listener", "leases"}}
    assert drift(text, actual) == [
        "workers/runtime/leases.py is not in the package map",
        "the package map lists workers/runtime/gone, which is no module",
    ]
