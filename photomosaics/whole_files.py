"""Files a command writes appear whole or not at all.

Each is written to a hidden sibling in the same folder, then put in place with one rename.
A write that fails (a full disk, a file size limit, a dropped download) removes the sibling,
so no cut-short file is left, and a file of that name written before stays as it was.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SERIAL = itertools.count()  # two threads of one process writing files of one name apart


def partial_path(path: Path) -> Path:
    """The hidden sibling ``path`` is written to. It keeps the suffix: a writer may choose its
    format by it, and a Deep Zoom pyramid's ``<stem>_files`` folder is named from it."""
    return path.with_name(f".{path.stem}.partial-{os.getpid()}-{next(_SERIAL)}{path.suffix}")


@contextmanager
def written_whole(path: Path) -> Iterator[Path]:
    """Yield the sibling to write; once the block ends without an error it becomes ``path``."""
    partial = partial_path(path)
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
