"""One process's decodes: a large one runs with no other decode beside it, small ones together.

The indexer decodes several photos at once (a thread per message, ``--concurrency``). Most
decodes hold little (a phone JPEG decoded at 1/8 of its size); a few hold hundreds of MiB for
the whole decode (a progressive JPEG's coefficients, an AVIF or HEIF photo decoded whole, a
large PNG). A plain lock around the large ones still let a small decode run beside a large
one: measured, a 100 MP progressive JPEG and a 16 MP PNG in two threads took the process to
494 MiB. ``DecodeGate.hold(heavy)`` is a readers-writer gate: a heavy decode waits until no
decode runs and keeps new ones out meanwhile (a waiting heavy one goes before small ones that
come later, so a stream of small decodes cannot starve it); small decodes share.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["DecodeGate"]


class DecodeGate:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._small = 0  # small decodes running
        self._heavy = False  # a heavy decode running
        self._waiting = 0  # heavy decodes waiting for the others to end

    @property
    def heavy_waiting(self) -> int:
        """Heavy decodes waiting for the gate (what keeps new small ones out)."""
        return self._waiting

    @contextmanager
    def hold(self, heavy: bool) -> Iterator[None]:
        with self._changed:
            if heavy:
                self._waiting += 1
                self._changed.wait_for(lambda: not self._heavy and not self._small)
                self._waiting -= 1
                self._heavy = True
            else:
                self._changed.wait_for(lambda: not self._heavy and not self._waiting)
                self._small += 1
        try:
            yield
        finally:
            with self._changed:
                if heavy:
                    self._heavy = False
                else:
                    self._small -= 1
                self._changed.notify_all()
