"""Role processes forked from a warm interpreter: the suite's start-ups without their imports.

A ``photomosaics <role>`` process spends about 1.5 s of CPU before it does anything, nearly
all of it importing NumPy, Pillow, OpenCV and the Azure SDK, and the suite starts about a
hundred of them on a two-core machine. The standard library's *forkserver* start method
(``multiprocessing``) removes that cost without faking anything: a clean interpreter, started
once per test worker, imports those modules once (``PRELOAD``) and forks one child per role.
The child is a real process of its own (pid, signals, exit status, its own storage clients,
threads and sockets) that runs ``photomosaics.cli.main`` with the role's arguments and
environment, its stdout and stderr in the role's log file, as ``photomosaics <role>`` would.

Forking is safe here because the forkserver runs no threads of its own but NumPy's OpenBLAS
pool, which OpenBLAS shuts down before a fork (``pthread_atfork``). OpenCV, which starts a
thread when imported, is not in ``PRELOAD``: the indexer's face search imports it in the child.

What differs from a fresh ``python`` is what it inherits: modules already imported (so a
role's own start-up imports are not exercised here; ``tests/test_cli_startup.py`` and the
supervisor tests start the real command), and a resident set that starts with them (so peak
memory is measured on fresh processes: ``Pipeline(fresh_processes=True)``).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# What ``photomosaics <role>`` imports on its way to its listeners (``photomosaics.commands.roles``
# imports them lazily, per role). A module left out is still imported, in the child.
PRELOAD = (
    "tests.support.role_fork",
    "photomosaics.cli",
    "photomosaics.commands.roles",
    "photomosaics.local.standby",
    "dal.availability.failover",
    "dal.availability.health",
    "dal.config",
    "dal.hints.channel",
    "dal.queues.tracing",
    "workers.services",
    "workers.failures",
    "workers.runtime.role",
    "workers.runtime.bindings",
    "workers.runtime.leases",
    "workers.runtime.listener",
    "workers.runtime.listener_options",
    "workers.runtime.observability",
    "workers.controller.controller",
    "workers.controller.hedging",
    "workers.processor.processor",
    "workers.responder.responder",
    "workers.responder.cleaner",
    "workers.indexer.indexer",
    "pyvips",  # the controller's and processors' Deep Zoom pieces and stitching
    "numpy.ma",
    "PIL.JpegImagePlugin",
    "azure.core.rest._requests_basic",
)

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(list(PRELOAD))


class ForkedRole:
    """A role forked by the forkserver, with the part of ``subprocess.Popen`` the tests use."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], log_path: Path) -> None:
        # Daemonic: a role a failed test left running ends with its test worker.
        self._process = _context.Process(target=_run_role, args=(list(argv), dict(env), str(log_path)), daemon=True)
        self._process.start()

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """As ``Popen.returncode``: the exit status, ``-signal`` when a signal ended it, None while alive."""
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, signum: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(f"forked {self._process.name}", timeout or 0.0)
        return self._process.exitcode


def _run_role(argv: list[str], env: dict[str, str], log_path: str) -> None:
    """The child: the role's log on stdout and stderr, its environment, then the CLI."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["photomosaics", *argv]
    from photomosaics.cli import main

    try:
        main(args=argv, prog_name="photomosaics")
    finally:
        atexit._run_exitfuncs()  # a forked child leaves by os._exit: run the hooks an interpreter's exit runs
