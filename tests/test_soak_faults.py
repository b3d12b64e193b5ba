"""The soak's fault injector (``benchmarks/soak.py``): what it may stop at once, and the time it charges to storage."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from benchmarks.soak import FROZEN, PROCESSORS, Fault, Faults, _overlap
from tests.support.waiting import wait_for


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_one_processor_is_paused_at_a_time_and_end_resumes_it() -> None:
    children = {name: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for name in PROCESSORS}
    service = SimpleNamespace(pid=lambda name: children[name].pid)
    faults = Faults(service, seed=3)  # type: ignore[arg-type]
    try:
        first = faults._pause_processor()
        assert first is not None and first.end - first.start > 15  # past the lease
        paused = next(name for name in PROCESSORS if first.what.startswith(name))
        wait_for(lambda: _state(children[paused].pid) == "T", seconds=10, step=0.02, what=f"{paused} stopped")
        assert faults._pause_processor() is None  # the other keeps working
        assert all(_state(c.pid) != "T" for name, c in children.items() if name != paused)
        faults.end()
        wait_for(lambda: _state(children[paused].pid) != "T", seconds=10, step=0.02, what=f"{paused} running again")
        assert faults._pause_processor() is not None  # nothing paused any more
    finally:
        faults.end()
        for child in children.values():
            child.kill()
            child.wait()


def test_a_job_is_charged_only_the_frozen_seconds_inside_its_life() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    job = {"created_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:05Z"}
    frozen = [Fault(FROZEN, t - 1, t + 2), Fault(FROZEN, t + 4, t + 10), Fault(FROZEN, t + 20, t + 25)]
    assert _overlap(job, frozen) == 3.0  # 2 s at the start, 1 s at the end, none after it finished
    assert Fault("killed controller", t).describe(t - 1) == "killed controller@+1.0s"
    assert Fault(FROZEN, t, t + 2.5).describe(t) == "storage frozen@+0.0s for 2.5s"
