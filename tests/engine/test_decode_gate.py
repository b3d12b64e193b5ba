"""``mosaic.decode_gate``: small decodes run together; a heavy one runs with no other beside it,
and once it waits, small ones that come later wait behind it. Every wait here is on an event
the other thread sets, or on the gate's own count, never on a fixed sleep."""

from __future__ import annotations

import threading

from mosaic.decode_gate import DecodeGate
from tests.support.waiting import wait_for


def _inside(gate: DecodeGate, heavy: bool, entered: threading.Event, leave: threading.Event) -> threading.Thread:
    def run() -> None:
        with gate.hold(heavy=heavy):
            entered.set()
            leave.wait()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_small_decodes_share_the_gate() -> None:
    gate = DecodeGate()
    leave = threading.Event()
    entered = [threading.Event() for _ in range(3)]
    threads = [_inside(gate, False, e, leave) for e in entered]
    assert all(e.wait(30) for e in entered)  # all three inside at once
    leave.set()
    for thread in threads:
        thread.join(30)


def test_a_heavy_decode_waits_for_the_small_one_and_keeps_later_ones_out() -> None:
    gate = DecodeGate()
    small_in, small_out = threading.Event(), threading.Event()
    first = _inside(gate, False, small_in, small_out)
    assert small_in.wait(30)
    heavy_in, heavy_out = threading.Event(), threading.Event()
    heavy = _inside(gate, True, heavy_in, heavy_out)
    wait_for(lambda: gate.heavy_waiting == 1, seconds=30, what="the heavy decode queued behind the small one")
    late_in, late_out = threading.Event(), threading.Event()
    late = _inside(gate, False, late_in, late_out)
    assert not heavy_in.is_set() and not late_in.is_set()
    small_out.set()
    assert heavy_in.wait(30)  # the small one left: the heavy one runs, the late one still waits
    assert not late_in.is_set()
    heavy_out.set()
    assert late_in.wait(30)
    late_out.set()
    for thread in (first, heavy, late):
        thread.join(30)
