"""The supervisor with real child processes: restart with back-off, clean stop, no orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from photomosaics.local.azurite import AzuriteError, find_azurite_script
from photomosaics.local.supervisor import ChildSpec, Supervisor, restart_delay
from tests.support.prereqs import require
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent
STUB = ROOT / "tests" / "support" / "supervise_stub.py"
PY = sys.executable


def alive(pid: int) -> bool:
    """True while ``pid`` is a live (non-zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def wait_until(probe, *, seconds: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    wait_for(probe, seconds=seconds, step=0.05)


def test_restart_delay_is_none_then_doubles_and_is_capped() -> None:
    assert [restart_delay(n, backoff_min=1, backoff_max=60) for n in range(9)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]


def test_a_crashing_child_is_restarted_and_a_healthy_one_left_alone(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    crasher = ChildSpec(
        name="crasher",
        argv=[PY, "-c", "import os, sys; open(os.environ['STARTS'], 'a').write('x'); sys.exit(3)"],
        env={"STARTS": str(starts)},
    )
    steady = ChildSpec(name="steady", argv=[PY, "-c", "import time; time.sleep(600)"])
    supervisor = Supervisor(
        [crasher, steady], grace=5, backoff_min=0.1, backoff_max=0.4, stable_after=60, poll_interval=0.05
    )
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: starts.exists() and len(starts.read_text()) >= 3)
        steady_pid = supervisor.pids()["steady"]
        assert steady_pid is not None and alive(steady_pid)
        assert supervisor.restarts()["crasher"] >= 2
        assert supervisor.restarts()["steady"] == 0
    finally:
        supervisor.stop()
        thread.join(timeout=15)
    assert not thread.is_alive()
    assert not alive(steady_pid)
    assert supervisor.pids() == {"crasher": None, "steady": None}


def test_a_standby_child_is_replaced_by_its_warm_spare_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import photomosaics.local.supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "SPARE_AFTER", 0.1)
    started = tmp_path / "started"  # one line per process that got past the standby gate
    role = ChildSpec(
        name="role",
        argv=[
            PY,
            "-c",
            "import os, time; from photomosaics.local.standby import wait_if_standby; wait_if_standby(); "
            "open(os.environ['STARTED'], 'a').write(f'{os.getpid()}\\n'); time.sleep(600)",
        ],
        env={"STARTED": str(started), "PYTHONPATH": str(ROOT)},
        standby=True,
    )
    supervisor = Supervisor([role], grace=5, stable_after=60, poll_interval=0.05)
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    spares: list[int] = []
    try:
        wait_until(lambda: supervisor.spare_pids()["role"] is not None and started.exists())
        first, spare = supervisor.pids()["role"], supervisor.spare_pids()["role"]
        assert first is not None and spare is not None and spare != first
        spares.append(spare)
        assert started.read_text().split() == [str(first)]  # the spare waits at the gate
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: supervisor.pids()["role"] == spare)  # promoted, not a fresh start
        wait_until(lambda: started.read_text().split() == [str(first), str(spare)])
        wait_until(lambda: supervisor.spare_pids()["role"] not in (None, spare))
        spares.append(supervisor.spare_pids()["role"])  # type: ignore[arg-type]
        assert supervisor.restarts()["role"] == 1
    finally:
        supervisor.stop()
        thread.join(timeout=15)
    assert not thread.is_alive()
    assert not any(alive(pid) for pid in spares)
    assert supervisor.pids() == {"role": None}
    assert started.read_text().split() == [str(first), str(spare)]  # the last spare never started


def test_a_role_in_standby_ends_quietly_when_never_told_to_start(tmp_path: Path) -> None:
    from photomosaics.local.children import photomosaics_argv
    from photomosaics.local.standby import STANDBY_ENV

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "PHOTOMOSAICS_"))}
    env[STANDBY_ENV] = "1"
    # No storage configured: past the gate the role would fail on it; at the gate, end of file ends it.
    done = subprocess.run(
        [*photomosaics_argv(), "controller"], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b"", done.stderr.decode()
    env.pop(STANDBY_ENV)
    without = subprocess.run(
        [*photomosaics_argv(), "controller"], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60
    )
    assert without.returncode != 0  # the same command, not in standby, does reach the storage check
    assert b"AZURE_STORAGE_CONNECTION_STRING is not set" in without.stderr


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    ignoring = tmp_path / "ignoring-sigterm"
    stubborn = ChildSpec(
        name="stubborn",
        argv=[
            PY,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(sys.argv[1], 'w').close(); time.sleep(600)",
            str(ignoring),
        ],
    )
    supervisor = Supervisor([stubborn], grace=0.5, poll_interval=0.05)
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    wait_until(lambda: supervisor.pids()["stubborn"] is not None)
    pid = supervisor.pids()["stubborn"]
    wait_until(ignoring.exists)  # it ignores SIGTERM from now on
    supervisor.stop()
    thread.join(timeout=15)
    assert not thread.is_alive()
    assert pid is not None and not alive(pid)


def test_sigterm_to_the_supervisor_leaves_no_child_and_no_node(tmp_path: Path) -> None:
    try:
        find_azurite_script()
    except AzuriteError as exc:
        require(False, str(exc))
    pidfile = tmp_path / "pids.json"
    # A role-like child that exits 0 on SIGTERM, and one whose own child would be orphaned
    # without the process-group kill.
    polite = {"name": "polite", "argv": [PY, "-c", "import time; time.sleep(600)"]}
    parent = {"name": "parent", "argv": ["sh", "-c", "sleep 600 & wait"]}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    stub = subprocess.Popen(
        [PY, str(STUB), str(pidfile), "3", json.dumps(polite), json.dumps(parent)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(pidfile.exists, seconds=40)
        pids = json.loads(pidfile.read_text())
        grandchildren = [
            int(p)
            for p in Path(f"/proc/{pids['children']['parent']}/task/{pids['children']['parent']}/children")
            .read_text()
            .split()
        ]
        watched = [pids["azurite"], *pids["children"].values(), *grandchildren]
        assert all(alive(pid) for pid in watched)
        stub.send_signal(signal.SIGTERM)
        output = stub.communicate(timeout=40)[0]
    finally:
        if stub.poll() is None:
            stub.kill()
            stub.communicate()
    assert stub.returncode == 0, output
    assert grandchildren, "the shell child should have a sleep child"
    wait_until(lambda: not any(alive(pid) for pid in watched), seconds=5)
    assert "child.stopped" in output


@pytest.mark.parametrize("names", [["a", "a"]])
def test_child_names_must_be_unique(names: list[str]) -> None:
    with pytest.raises(ValueError, match="unique"):
        Supervisor([ChildSpec(name=n, argv=["true"]) for n in names])


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children of children included)."""
    found: set[int] = set()
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except FileNotFoundError:
            continue
        for child in map(int, children):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_photomosaics_run_serves_the_app_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    """`make run` in miniature: embedded Azurite on disk, the app answering, Ctrl-C, nothing left."""
    import urllib.error
    import urllib.request

    try:
        find_azurite_script()
    except AzuriteError as exc:
        require(False, str(exc))
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "AZURE_STORAGE_CONNECTION_STRING"}
    argv = [
        PY,
        "-c",
        "from photomosaics.cli import main; main()",
        "run",
        "--port",
        "0",
        "--processors",
        "1",
        "--data-dir",
        str(data_dir),
        "--grace",
        "10",
    ]
    run = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    url: list[str] = []

    def read() -> None:
        assert run.stdout is not None
        for line in run.stdout:
            lines.append(line)
            if "is running at " in line:
                url.append(line.split("is running at ", 1)[1].split()[0])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: url or run.poll() is not None, seconds=120)
        assert url, "".join(lines)
        with urllib.request.urlopen(url[0], timeout=10) as response:
            assert response.status == 200
        # The web app's /metrics: open on its loopback metrics port, for the operator token on the app's.
        (metrics,) = [line for line in lines if line.startswith("metrics: ")]
        with urllib.request.urlopen(metrics.split("web ", 1)[1].split()[0].rstrip(","), timeout=10) as response:
            assert response.status == 200 and b"photomosaics_queue_messages" in response.read()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url[0] + "metrics", timeout=10)
        refused.value.close()
        assert refused.value.code == 401
        family = descendants(run.pid)
        assert len(family) >= 5  # azurite, web, controller, responder, processor (and their helpers)
        run.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal delivers
        code = run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    reader.join(timeout=5)
    assert run.stdout is not None
    run.stdout.close()
    output = "".join(lines)
    assert code == 0, output
    wait_until(lambda: not any(alive(pid) for pid in family), seconds=5)
    assert "Azurite stopped" in output
    assert (data_dir / "secret_key").read_text().strip()
    assert (data_dir / "operator_token").read_text().strip() in output  # printed for the person at the terminal
    assert any((data_dir / "azurite").iterdir())  # the data persists for the next run
