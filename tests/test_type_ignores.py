"""Every ``# type: ignore`` in the product names its error code and says why on its line.

mypy (``make lint``) checks ``dal``, ``mosaic``, ``workers``, ``webapp`` and ``photomosaics``;
an ignore silences one error code and carries its reason after it::

    x = cv2.data.haarcascades  # type: ignore[attr-defined]  # OpenCV's stubs leave out cv2.data

Run as a script (``make lint`` does) it prints how many there are and fails on one without a
code or a reason; mypy itself (``warn_unused_ignores``) fails on one that silences nothing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dal", "mosaic", "workers", "webapp", "photomosaics")

_IGNORE = re.compile(r"#\s*type:\s*ignore\b")
_EXPLAINED = re.compile(r"#\s*type:\s*ignore\[[a-z][a-z-]*(?:,\s*[a-z][a-z-]*)*\]  # \S")


def type_ignores(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """``(path, line number, line)`` of every ``type: ignore`` in the typed packages."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if _IGNORE.search(line):
                    found.append((str(path.relative_to(root)), number, line.strip()))
    return found


def unexplained(found: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    return [entry for entry in found if not _EXPLAINED.search(entry[2])]


def test_every_type_ignore_names_its_code_and_its_reason() -> None:
    assert unexplained(type_ignores()) == []


def test_the_check_refuses_a_bare_ignore_and_one_without_a_reason(tmp_path: Path) -> None:
    (tmp_path / "dal").mkdir()
    (tmp_path / "dal" / "a.py").write_text(
        "x = 1  # type: ignore\n"
        "y = 2  # type: ignore[attr-defined]\n"
        "z = 3  # type: ignore[attr-defined]  # the stub lacks it\n"
        "w = 4  # type: ignore[arg-type, call-overload]  # both, for one reason\n",
        encoding="utf-8",
    )
    found = type_ignores(tmp_path)
    assert [number for _, number, _ in found] == [1, 2, 3, 4]
    assert [number for _, number, _ in unexplained(found)] == [1, 2]


def main() -> int:
    found = type_ignores()
    bad = unexplained(found)
    for path, number, line in bad:
        print(f"{path}:{number}: a type: ignore needs [code] and '  # why': {line}", file=sys.stderr)
    print(f"type: ignore comments in {', '.join(PACKAGES)}: {len(found)} ({len(bad)} without a code and a reason)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
