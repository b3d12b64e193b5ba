"""No product module over 400 lines and no class over 250 (issue 44's goal).

A module that outgrows its limit has grown a second responsibility: split it by what a newcomer
would look for (see ``docs/architecture.md``, "Where to change what"). The product is the five
packages ``dal/``, ``mosaic/``, ``workers/``, ``webapp/`` and ``photomosaics/``; a module's size
is its line count, a class's is ``end_lineno - lineno + 1`` (its decorators excluded).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dal", "mosaic", "workers", "webapp", "photomosaics")
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250


def oversized(source: str, name: str) -> list[str]:
    """What in one module passes its limit, one line each, naming it and its size."""
    problems = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        problems.append(f"{name}: {lines} lines (a module's limit is {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            size = node.end_lineno - node.lineno + 1
            if size > MAX_CLASS_LINES:
                problems.append(f"{name}: class {node.name} is {size} lines (a class's limit is {MAX_CLASS_LINES})")
    return problems


def product_modules() -> list[Path]:
    return sorted(
        path for package in PACKAGES for path in (ROOT / package).rglob("*.py") if "__pycache__" not in path.parts
    )


def test_no_product_module_or_class_passes_its_limit() -> None:
    problems = [
        problem
        for path in product_modules()
        for problem in oversized(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    ]
    assert not problems, "split these by responsibility:\n" + "\n".join(problems)


def test_the_size_check_sees_a_long_module_and_a_long_class() -> None:
    assert oversized("class Big:\n" + "    x = 1\n" * 250, "m.py") == [
        "m.py: class Big is 251 lines (a class's limit is 250)"
    ]
    assert oversized("class Fits:\n" + "    x = 1\n" * 249, "m.py") == []
    assert oversized("x = 1\n" * 401, "m.py") == ["m.py: 401 lines (a module's limit is 400)"]
    assert oversized("x = 1\n" * 400, "m.py") == []
