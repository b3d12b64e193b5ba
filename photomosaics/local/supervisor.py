"""Keep a set of child processes running, restart crashed ones, stop them all cleanly.

``photomosaics run`` uses it for the web app and the worker roles. Each child runs in its
own session (process group): a Ctrl-C in the terminal reaches only the supervisor, which
then stops the children in order: SIGTERM (a role finishes in-flight work and releases
the rest), wait up to ``grace``, SIGKILL the process group of any child still there. A
second signal sends SIGTERM again (the roles' "stop at once") and shortens the wait.
Children also get a parent-death signal, so even a SIGKILLed supervisor leaves no orphan.

A child that exits while the supervisor is running is restarted at once the first time,
then after a back-off that doubles from ``backoff_min`` to ``backoff_max``; the count
resets once the child has stayed up for ``stable_after`` seconds: a crash loop costs
little, and a rare crash (a killed pod, an out-of-memory kill) costs only the start-up.

A child whose spec asks for a ``standby`` (a role with no peer: ``photomosaics run``'s
controller and responder) has a warm spare beside it (``photomosaics.local.standby``): a
second process of the same command, its imports done, blocked until told to start. When the
child dies the spare is told ``go`` and takes its place at once, without the start-up's
imports, and a new spare is started ``SPARE_AFTER`` seconds later.

Two hooks make it the place where the machine heals itself: ``on_exit(name, pid, code)``
runs as soon as a child is seen dead, before its restart (``photomosaics run`` hands back
the messages the dead child held, from its lease journal), and ``on_tick()`` runs every
loop in the main thread (``photomosaics run`` checks on the embedded Azurite there).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType

from photomosaics.local.standby import GO, STANDBY_ENV
from workers.runtime.logfmt import kv

__all__ = ["ChildSpec", "Supervisor", "restart_delay", "supervise"]

log = logging.getLogger(__name__)

IMMEDIATE_GRACE = 5.0  # seconds left to children after a second stop signal
SPARE_AFTER = 2.0  # seconds after a child started before its spare starts: not competing for the CPU


@dataclass(frozen=True, kw_only=True)
class ChildSpec:
    """One child: a name for the logs, its argv, and environment variables on top of ours."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    standby: bool = False  # keep a warm spare that takes over at once when the child dies


def restart_delay(failures: int, *, backoff_min: float, backoff_max: float) -> float:
    """Seconds before restart number ``failures + 1`` of a child: none after a stable run
    (every second waited is a second the child's queues wait), doubling after that."""
    if failures <= 0:
        return 0.0
    return min(backoff_max, backoff_min * 2.0 ** min(failures - 1, 30))


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass(eq=False)
class _Child:
    spec: ChildSpec
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    failures: int = 0
    restarts: int = 0
    next_start: float = 0.0
    spare: subprocess.Popen[bytes] | None = None
    spare_failures: int = 0
    next_spare: float = 0.0


class Supervisor:
    """Run ``children`` until ``stop``; see the module docstring."""

    def __init__(
        self,
        children: Sequence[ChildSpec],
        *,
        grace: float = 30.0,
        backoff_min: float = 1.0,
        backoff_max: float = 60.0,
        stable_after: float = 30.0,
        poll_interval: float = 0.2,
        on_exit: Callable[[str, int, int | None], None] | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        names = [c.name for c in children]
        if len(set(names)) != len(names):
            raise ValueError(f"child names must be unique: {names}")
        self.grace = grace
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.stable_after = stable_after
        self.poll_interval = poll_interval
        self.on_exit = on_exit
        self.on_tick = on_tick
        self._children = [_Child(spec) for spec in children]
        self._stop = threading.Event()
        self._immediate = threading.Event()
        self.stopped = threading.Event()  # set once every child is gone

    # -- public -----------------------------------------------------------------------

    def stop(self, *, immediate: bool = False) -> None:
        """Ask ``run`` to stop the children and return (thread- and signal-safe)."""
        if immediate:
            self._immediate.set()
        self._stop.set()

    def on_signal(self, signum: int, frame: FrameType | None = None) -> None:
        """First SIGINT/SIGTERM: orderly stop; a second one: hurry the children."""
        name = signal.Signals(signum).name
        if self._stop.is_set():
            log.warning(kv("supervisor.hurry", signal=name, note="second signal: children stop at once"))
            self.stop(immediate=True)
        else:
            log.warning(kv("supervisor.stopping", signal=name, grace=self.grace))
            self.stop()

    def pids(self) -> dict[str, int | None]:
        return {
            c.spec.name: (c.process.pid if c.process and c.process.poll() is None else None) for c in self._children
        }

    def restarts(self) -> dict[str, int]:
        return {c.spec.name: c.restarts for c in self._children}

    def spare_pids(self) -> dict[str, int | None]:
        """The waiting spare of each child that has one."""
        return {
            c.spec.name: (c.spare.pid if c.spare and c.spare.poll() is None else None)
            for c in self._children
            if c.spec.standby
        }

    def run(self) -> None:
        """Start every child, keep them running until ``stop``, then stop them all."""
        try:
            while not self._stop.is_set():
                self._hook(self.on_tick)
                now = time.monotonic()
                for child in self._children:
                    if child.process is not None and child.process.poll() is not None:
                        self._exited(child, now)
                    if child.process is None and now >= child.next_start and not self._stop.is_set():
                        self._spawn(child)
                    self._keep_spare(child, now)
                self._stop.wait(self.poll_interval)
        finally:
            self._stop_all()
            self.stopped.set()

    # -- internals --------------------------------------------------------------------

    @staticmethod
    def _popen(spec: ChildSpec, *, spare: bool = False) -> subprocess.Popen[bytes]:
        env = {**os.environ, **spec.env, **({STANDBY_ENV: "1"} if spare else {})}
        return subprocess.Popen(
            list(spec.argv),
            env=env,
            stdin=subprocess.PIPE if spare else subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def _spawn(self, child: _Child) -> None:
        if self._promote_spare(child):
            return
        try:
            child.process = self._popen(child.spec)
        except OSError as exc:
            delay = self._schedule_restart(child, time.monotonic())
            log.error(kv("child.spawn_failed", child=child.spec.name, error=str(exc), restart_in=delay))
            return
        child.started_at = time.monotonic()
        log.info(kv("child.started", child=child.spec.name, pid=child.process.pid, restarts=child.restarts))

    def _promote_spare(self, child: _Child) -> bool:
        """The waiting spare becomes the child (told ``go``); False when there is none."""
        spare, child.spare = child.spare, None
        if spare is None or spare.poll() is not None or spare.stdin is None:
            return False
        try:
            spare.stdin.write(GO)
            spare.stdin.close()
        except OSError:  # it died just now
            self._kill_group(spare.pid)
            spare.wait()
            return False
        child.process, child.started_at = spare, time.monotonic()
        log.info(kv("child.started", child=child.spec.name, pid=spare.pid, restarts=child.restarts, spare=True))
        return True

    def _keep_spare(self, child: _Child, now: float) -> None:
        """Start a spare for a standby child that has been up ``SPARE_AFTER`` s and has none."""
        if not child.spec.standby or self._stop.is_set():
            return
        spare = child.spare
        if spare is not None and spare.poll() is None:
            return
        if spare is not None:  # it died while waiting: start another after a back-off
            child.spare = None
            child.spare_failures += 1
            delay = restart_delay(child.spare_failures, backoff_min=self.backoff_min, backoff_max=self.backoff_max)
            child.next_spare = now + delay
            log.error(kv("child.spare_exited", child=child.spec.name, pid=spare.pid, code=spare.returncode))
            return
        if child.process is None or now < child.next_spare or now - child.started_at < SPARE_AFTER:
            return
        try:
            child.spare = self._popen(child.spec, spare=True)
        except OSError as exc:
            child.next_spare = now + self.backoff_max
            log.error(kv("child.spare_failed", child=child.spec.name, error=str(exc)))

    def _exited(self, child: _Child, now: float) -> None:
        assert child.process is not None
        code, pid = child.process.returncode, child.process.pid
        self._kill_group(pid)  # whatever the child left behind in its group goes with it
        child.process = None
        on_exit = self.on_exit
        if on_exit is not None:
            self._hook(lambda: on_exit(child.spec.name, pid, code))
        uptime = now - child.started_at
        if uptime >= self.stable_after:
            child.failures = 0
        delay = self._schedule_restart(child, now)
        log.error(kv("child.exited", child=child.spec.name, pid=pid, code=code, uptime=uptime, restart_in=delay))

    def _schedule_restart(self, child: _Child, now: float) -> float:
        delay = restart_delay(child.failures, backoff_min=self.backoff_min, backoff_max=self.backoff_max)
        child.failures += 1
        child.restarts += 1
        child.next_start = now + delay
        return delay

    @staticmethod
    def _hook(hook: Callable[[], None] | None) -> None:
        if hook is None:
            return
        try:
            hook()
        except Exception:  # a failing hook must not stop the supervision of the others
            log.exception(kv("supervisor.hook_failed"))

    @staticmethod
    def _kill_group(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    def _running(self) -> list[_Child]:
        return [c for c in self._children if c.process is not None and c.process.poll() is None]

    def _stop_spares(self) -> None:
        """End every waiting spare: end of file on its stdin, and SIGTERM."""
        for child in self._children:
            spare, child.spare = child.spare, None
            if spare is None:
                continue
            with contextlib.suppress(OSError):
                if spare.stdin is not None:
                    spare.stdin.close()
            with contextlib.suppress(ProcessLookupError):
                spare.send_signal(signal.SIGTERM)
            try:
                spare.wait(timeout=IMMEDIATE_GRACE)
            except subprocess.TimeoutExpired:
                pass
            self._kill_group(spare.pid)
            spare.wait()

    def _stop_all(self) -> None:
        self._stop_spares()
        running = self._running()
        for child in running:
            assert child.process is not None
            log.info(kv("child.stopping", child=child.spec.name, pid=child.process.pid))
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        hurried = False
        while self._running() and time.monotonic() < deadline:
            if self._immediate.is_set() and not hurried:
                hurried = True
                deadline = min(deadline, time.monotonic() + IMMEDIATE_GRACE)
                for child in self._running():
                    with contextlib.suppress(ProcessLookupError):
                        if child.process is not None:  # a running child has one
                            child.process.send_signal(signal.SIGTERM)
            time.sleep(0.05)
        for child in self._children:
            if child.process is None:
                continue
            if child.process.poll() is None:
                log.warning(kv("child.killed", child=child.spec.name, pid=child.process.pid, after=self.grace))
            self._kill_group(child.process.pid)
            child.process.wait()
            log.info(kv("child.stopped", child=child.spec.name, code=child.process.returncode))
            child.process = None


def supervise(supervisor: Supervisor, *, on_ready: Callable[[], None] | None = None) -> int:
    """Run ``supervisor`` in the main thread with SIGINT/SIGTERM wired to it; exit code 0."""
    previous = {sig: signal.signal(sig, supervisor.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if on_ready is not None:
            on_ready()
        supervisor.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
