"""A process's peak resident memory, read from Linux's ``/proc/<pid>/status`` (``VmHWM``).

``VmHWM`` is the high-water mark of the resident set since the process started (or since
``reset_peak``): what a container's memory limit would have seen. Linux only.
"""

from __future__ import annotations

from pathlib import Path

MIB = 1024 * 1024


def peak_rss(pid: int | str = "self") -> int:
    """The peak resident set size of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM")


def reset_peak(pid: int | str = "self") -> None:
    """Start the high-water mark again from the current resident set (Linux >= 4.0)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
