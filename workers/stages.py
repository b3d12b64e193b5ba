"""Where a handler's time goes: named laps, logged with its event as ``stages``.

The controller and the processors time each step of a job (download, decode, render,
encode, upload, stitch) with a ``Stopwatch`` and store the laps in the job's event log
(``JobStore.add_event(stages=...)``). ``make bench`` reads them back and prints the breakdown
per stage beside the queue waits between events, so "where did the time go" is answered by
the product's own records, not by a profiler attached to one run.
"""

from __future__ import annotations

import time

__all__ = ["Stopwatch"]


class Stopwatch:
    """Seconds spent per named step; ``lap(name)`` closes the step that ran since the last lap."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> float:
        now = time.perf_counter()
        took, self._last = now - self._last, now
        self.stages[name] = self.stages.get(name, 0.0) + took
        return took

    def lap_parts(self, parts: dict[str, float], *, rest: str) -> float:
        """Close a lap whose steps ran in another thread: ``parts`` as measured there (capped
        to the lap), the remainder to ``rest``, so the stages still add up to the wall time."""
        now = time.perf_counter()
        took, self._last = now - self._last, now
        left = took
        for name, seconds in parts.items():
            share = min(max(0.0, seconds), left)
            self.stages[name] = self.stages.get(name, 0.0) + share
            left -= share
        self.stages[rest] = self.stages.get(rest, 0.0) + left
        return took
