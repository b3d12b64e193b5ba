"""A listener's statistics: a plain dict to read (metrics, logs, tests), changed under one lock."""

from __future__ import annotations

import threading
from collections.abc import Iterable

__all__ = ["Counters"]


class Counters(dict[str, int]):
    """Named counts, all starting at 0; ``add`` and ``peak`` are thread-safe."""

    def __init__(self, keys: Iterable[str]) -> None:
        super().__init__(dict.fromkeys(keys, 0))
        self._lock = threading.Lock()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self[key] += n

    def peak(self, key: str, value: int) -> None:
        """Keep the highest ``value`` seen under ``key``."""
        with self._lock:
            self[key] = max(self[key], value)
