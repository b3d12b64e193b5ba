"""SIGTERM during work, on a real role process against a real Azurite: nothing is lost.

The role is ``tests/support/sleep_role.py``: the real listener and ``workers.runtime.role`` machinery with a
handler that sleeps and leaves ``started-<seq>`` / ``done-<seq>`` marker files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from dal.config import CONNECTION_STRING_ENV
from dal.observability.transactions import COUNT_ENV
from dal.queues.messages import SliceResponseMessage
from dal.queues.work_queue import ImageProcessingQueue
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent
ROLE = ROOT / "tests" / "support" / "sleep_role.py"


@pytest.fixture
def queue_options() -> dict[str, Any]:
    """``queue`` (conftest) is sliceresponse with a long invisibility: a message is visible
    again quickly only if the role released it."""
    return {"name": "sliceresponse", "poison_threshold": 5, "timeout": 60}


def send(queue: ImageProcessingQueue, count: int) -> None:
    queue.submit(
        [
            SliceResponseMessage(
                queue_uri=queue.url,
                client_id="signals",
                request_id=str(uuid.uuid4()),
                slice_uri=f"http://127.0.0.1/devstoreaccount1/sliceresponse/x/{i}.png",
                slice_sequence=i,
            )
            for i in range(count)
        ]
    )


def start_role(
    connection_string: str,
    prefix: str,
    markers: Path,
    *,
    seconds: float,
    prefetch: int = 0,
    grace: float = 20.0,
    counts: Path | None = None,
) -> subprocess.Popen[str]:
    env = {**os.environ, CONNECTION_STRING_ENV: connection_string, "PYTHONPATH": str(ROOT)}
    if counts is not None:
        env[COUNT_ENV] = str(counts)
    argv = [
        sys.executable,
        str(ROLE),
        "--prefix",
        prefix,
        "--markers",
        str(markers),
        "--seconds",
        str(seconds),
        "--prefetch",
        str(prefetch),
        "--grace",
        str(grace),
    ]
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_marker(markers: Path, pattern: str, role: subprocess.Popen[str], *, seconds: float = 30) -> list[Path]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = sorted(markers.glob(pattern))
        if found:
            return found
        if role.poll() is not None:
            break
        time.sleep(0.05)
    role.kill()
    output = role.communicate()[0]
    raise AssertionError(f"no {pattern} marker; role output:\n{output}")


def finish(role: subprocess.Popen[str], *, seconds: float = 40) -> tuple[int, str]:
    try:
        output = role.communicate(timeout=seconds)[0]
    except subprocess.TimeoutExpired:
        role.kill()
        output = role.communicate()[0]
        raise AssertionError(f"role did not exit within {seconds} s:\n{output}") from None
    return role.returncode, output


def sequences(queue: ImageProcessingQueue) -> list[int]:
    return sorted(p.message.slice_sequence for p in queue.peek() if p.message is not None)  # type: ignore[attr-defined]


def test_sigterm_finishes_the_running_message_and_hands_back_the_rest(
    azurite_connection_string: str, queue: ImageProcessingQueue, prefix: str, tmp_path: Path
) -> None:
    send(queue, 4)
    counts = tmp_path / "counts"
    role = start_role(azurite_connection_string, prefix, tmp_path, seconds=2.0, prefetch=2, counts=counts)
    started = wait_for_marker(tmp_path, "started-*", role)
    # It holds 3 (one running, two waiting): one of the four stays visible.
    wait_for(lambda: len(queue.peek()) == 1, seconds=20, step=0.05, what="the role holding three messages")
    role.send_signal(signal.SIGTERM)
    code, output = finish(role)

    seq = int(started[0].name.split("-")[1])
    assert code == 0, output
    assert [p.name for p in tmp_path.glob("started-*")] == [f"started-{seq}"]
    assert (tmp_path / f"done-{seq}").exists()  # the in-flight message was completed...
    assert sequences(queue) == sorted(set(range(4)) - {seq})  # ...deleted, and the rest visible at once
    assert queue.poison.peek() == []
    assert "role.stopping" in output and "request_id=" in output
    # The transaction counts of the process, written at exit with the listener's statistics.
    (dump,) = counts.glob("sleeper-*.json")
    report = json.loads(dump.read_text())
    assert report["operations"]["queue DeleteMessage"] == 1
    assert report["operations"]["queue UpdateMessage"] == 2  # the two prefetched ones handed back
    assert report["listeners"]["sleeper"]["succeeded"] == 1
    assert report["listeners"]["sleeper"]["released"] == 2


def test_grace_running_out_releases_the_running_message_and_still_exits_0(
    azurite_connection_string: str, queue: ImageProcessingQueue, prefix: str, tmp_path: Path
) -> None:
    send(queue, 1)
    role = start_role(azurite_connection_string, prefix, tmp_path, seconds=60.0, grace=1.0)
    wait_for_marker(tmp_path, "started-*", role)
    role.send_signal(signal.SIGTERM)
    code, output = finish(role, seconds=20)

    assert code == 0, output
    assert not list(tmp_path.glob("done-*"))
    assert sequences(queue) == [0]  # visible again at once for another worker
    assert "still running after" in output


def test_a_second_signal_stops_at_once_and_releases_everything(
    azurite_connection_string: str, queue: ImageProcessingQueue, prefix: str, tmp_path: Path
) -> None:
    send(queue, 2)
    role = start_role(azurite_connection_string, prefix, tmp_path, seconds=60.0, prefetch=1)
    wait_for_marker(tmp_path, "started-*", role)
    role.send_signal(signal.SIGINT)
    time.sleep(0.3)
    role.send_signal(signal.SIGINT)
    code, output = finish(role, seconds=20)

    assert code == 128 + signal.SIGINT, output  # the immediate path says so in its exit code
    assert not list(tmp_path.glob("done-*"))
    assert sequences(queue) == [0, 1]
