"""One `photomosaics run` per data folder: a second is refused before it starts anything, and a
run that died (even by SIGKILL) leaves the folder free."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from photomosaics.commands.run import RUN_LOCK_FILE, data_folder_held

ROOT = Path(__file__).resolve().parent.parent
_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from photomosaics.commands.run import data_folder_held
    with data_folder_held(Path({folder!r})):
        print("held", flush=True)
        time.sleep(120)
    """
)


def test_a_second_run_on_a_data_folder_in_use_is_refused_before_it_starts_anything(tmp_path: Path) -> None:
    with data_folder_held(tmp_path):
        refused = subprocess.run(
            [sys.executable, "-c", "from photomosaics.cli import main; main()", "run", "--data-dir", str(tmp_path)],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k != "AZURE_STORAGE_CONNECTION_STRING"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (tmp_path / RUN_LOCK_FILE).read_text().strip() == str(os.getpid())
    assert refused.returncode == 1
    assert f"another `photomosaics run` (pid {os.getpid()}) is using {tmp_path}" in refused.stderr
    assert "storage:" not in refused.stdout  # no Azurite was started on the folder's files
    assert not (tmp_path / "azurite").exists()


def test_a_run_killed_with_sigkill_leaves_its_folder_free(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER.format(root=str(ROOT), folder=str(tmp_path))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    with data_folder_held(tmp_path):  # the kernel dropped the dead run's lock: no stale-file cleanup needed
        assert (tmp_path / RUN_LOCK_FILE).read_text().strip() == str(os.getpid())
