"""Held-out libraries from Debian's packages: fetch them, then write their pictures into a folder.

``benchmarks.wallpapers`` and ``benchmarks.astronomy`` each choose and write the pictures of
their packages; fetching the packages (``apt-get download``, nothing installed, then
``dpkg-deb -x``) and the command line around it are the same for both, here.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


def fetch(into: Path, packages: tuple[str, ...]) -> Path:
    """Download ``packages`` and unpack them under ``into``; returns the unpacked root."""
    subprocess.run(["apt-get", "download", *packages], cwd=into, check=True)
    root = into / "unpacked"
    for deb in sorted(into.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root


def command(module: str, packages: tuple[str, ...], write: Callable[[Path, Path], str]) -> None:
    """``python -m benchmarks.<module> DIR``: fetch ``packages`` into a temporary folder and
    ``write(root, DIR)``, which answers what it wrote (printed)."""
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: python -m benchmarks.{module} DIR  (the folder of pictures to write)")
    target = Path(sys.argv[1]).expanduser()
    with tempfile.TemporaryDirectory(prefix=f"{module}-") as work:
        try:
            root = fetch(Path(work), packages)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise SystemExit(f"could not fetch {', '.join(packages)} with apt-get: {exc}") from None
        print(write(root, target))
