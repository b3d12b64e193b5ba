"""A worker role process: its storage clients, its listeners, its signals, its exit.

``Role`` runs one thread per ``QueueListener`` and waits for them in the main thread, where
Python delivers signals. ``run_role`` is what every ``photomosaics <role>`` command calls:

- first SIGTERM/SIGINT: every listener stops receiving, hands back unstarted messages,
  finishes running handlers within the grace period, releases what is left; exit 0;
- second signal: stop at once, release everything held (visibility 0); exit 128+signal
  (a handler still running is abandoned; its message is visible again for another worker).

The signal handlers only set events; all the work happens in the listener threads.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import FrameType
from typing import NoReturn, TypeVar

from dal.config import CONNECTION_STRING_ENV, RetryProfile, Settings, StorageClients
from dal.connection_strings import describe_connection_string
from dal.errors import StorageConfigurationError
from dal.observability.prometheus import StorageRequestMetrics, chain_hooks
from dal.observability.transactions import counter_from_env, dump_installed_counter
from dal.queues.tracing import flush
from dal.retry import retry_tuning_from_env, transient
from workers.runtime.listener import QueueListener
from workers.runtime.logfmt import configure_logging, kv

__all__ = ["Role", "configure_role_logging", "exit_role", "patiently", "run_role", "storage_from_env"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_PATIENCE_FIRST, _PATIENCE_MAX = 1.0, 30.0  # seconds between start-up attempts: 1, 2, 4 ... 30


def patiently(step: Callable[[], T], *, role: str, what: str, sleep: Callable[[float], None] = time.sleep) -> T:
    """``step()``, tried again for as long as storage fails transiently (``dal.retry.transient``).

    A role's start-up (its queues, containers and tables, the queues' settings) is a few
    dozen calls, each with the worker profile's five retries. Throttling that outlasts
    them, or storage restarting, would kill the role before it holds a single message. A
    role that dies then turns throttling into an outage, so it waits instead: 1 s, doubling
    to 30 s (times ``PHOTOMOSAICS_RETRY_SCALE``), a warning each time. Anything else
    (a refused key, a bad name) is raised at once.
    """
    wait = _PATIENCE_FIRST
    scale, _ = retry_tuning_from_env()
    while True:
        try:
            return step()
        except Exception as exc:
            if not transient(exc):
                raise
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            log.warning(kv("role.storage_busy", role=role, step=what, error=reason, retry_in=round(wait * scale, 2)))
            sleep(wait * scale)
            wait = min(_PATIENCE_MAX, wait * 2)


def storage_from_env(*, role: str, profile: RetryProfile = "worker") -> StorageClients:
    """Storage clients for a role: the configured account, with the transaction counter if asked.

    A role never starts its own Azurite: it must share storage with the rest of the app, so
    ``AZURE_STORAGE_CONNECTION_STRING`` is required (``photomosaics run`` sets it).
    """

    connection_string = Settings.from_env().connection_string
    if not connection_string:
        raise StorageConfigurationError(
            f"{CONNECTION_STRING_ENV} is not set: start the roles with `photomosaics run`, or point "
            f"them at a storage account (UseDevelopmentStorage=true for a local Azurite)"
        )

    counter = counter_from_env(role=role)
    # Prometheus counters always (cheap; served when PHOTOMOSAICS_METRICS_PORT is set).
    hook = chain_hooks(counter, StorageRequestMetrics())
    storage = StorageClients(connection_string, profile=profile, response_hook=hook)
    log.info(kv("role.storage", role=role, account=describe_connection_string(connection_string)))
    return storage


class Role:
    """The listeners of one process; ``stop`` is safe from any thread or a signal handler."""

    def __init__(self, name: str, listeners: Sequence[QueueListener], *, grace: float | None = None) -> None:
        if not listeners:
            raise ValueError("a role needs at least one listener")
        self.name = name
        self.listeners = list(listeners)
        if grace is not None:
            for listener in self.listeners:
                listener.options = replace(listener.options, grace=grace)
        for listener in self.listeners:  # work on one queue predicts work on the others
            listener.on_activity = lambda me=listener: self._nudge_others(me)
        self.signals: list[int] = []
        self.immediate = False
        self.errors: list[BaseException] = []

    def _nudge_others(self, busy: QueueListener) -> None:
        """The controller slices a job -> its slice-response listener should poll soon, not in 10 s."""
        for listener in self.listeners:
            if listener is not busy and not listener.hint_covered:  # a covered one hears its own hints
                listener.nudge()

    def stop(self, *, immediate: bool = False) -> None:
        self.immediate = self.immediate or immediate
        for listener in self.listeners:
            listener.stop(immediate=immediate)

    def on_signal(self, signum: int, frame: FrameType | None = None) -> None:
        """First signal: graceful stop; any later one: immediate stop."""
        self.signals.append(signum)
        name = signal.Signals(signum).name
        if len(self.signals) == 1:
            grace = max(listener.options.grace for listener in self.listeners)
            log.warning(
                kv(
                    "role.stopping",
                    role=self.name,
                    signal=name,
                    grace=grace,
                    note="finishing in-flight work; signal again to stop at once",
                )
            )
            self.stop()
        else:
            log.warning(kv("role.stopping_now", role=self.name, signal=name))
            self.stop(immediate=True)

    def run(self, *, burst: bool = False, max_messages: int | None = None) -> int:
        """Run every listener until all have ended; the exit code of the process."""

        def target(listener: QueueListener) -> None:
            try:
                listener.run(burst=burst, max_messages=max_messages)
            except BaseException as exc:  # a listener that dies takes the role down: restart it
                self.errors.append(exc)
                log.exception(kv("role.listener_crashed", role=self.name, listener=listener.name))
                self.stop()

        threads = [
            threading.Thread(target=target, args=(listener,), name=f"listener-{listener.name}", daemon=True)
            for listener in self.listeners
        ]
        for thread in threads:
            thread.start()
        log.info(
            kv("role.start", role=self.name, pid=os.getpid(), listeners=",".join(lsn.name for lsn in self.listeners))
        )
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(timeout=0.2)  # short joins keep the main thread responsive to signals
        if self.errors:
            code = 1
        elif self.immediate and self.signals:
            code = 128 + self.signals[-1]
        else:
            code = 0
        log.info(kv("role.exit", role=self.name, code=code))
        return code


_current: Role | None = None  # the role of this process, for its exit report


def run_role(role: Role, *, burst: bool = False, max_messages: int | None = None, install_signals: bool = True) -> int:
    """Install SIGTERM/SIGINT handlers (main thread only) and run the role."""
    global _current
    _current = role
    if install_signals and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, role.on_signal)
        signal.signal(signal.SIGINT, role.on_signal)
        # SIGUSR1: write the transaction counts now (the pipeline benchmark diffs two snapshots).
        signal.signal(signal.SIGUSR1, lambda signum, frame: write_counts())
    write_counts()  # when counting: a first file says "handlers installed, listening now"
    return role.run(burst=burst, max_messages=max_messages)


def write_counts(**extra: object) -> None:
    """Write this process's transaction counts and listener statistics, if counting is on."""
    import time

    stats = {lsn.name: dict(lsn.stats) for lsn in _current.listeners} if _current is not None else {}
    dump_installed_counter(listeners=stats, written_at=time.time(), **extra)


def exit_role(code: int) -> NoReturn:
    """Write the transaction counts, flush the logs and end the process with ``code``.

    After a grace period ran out (or an immediate stop) a handler thread may still be busy
    with a message that was already released, and the interpreter would join it at exit
    (``concurrent.futures`` registers that join even for daemon threads). So the process
    leaves with ``os._exit`` once everything worth keeping is written.
    """
    try:
        write_counts(exit_code=code)

        flush()  # buffered spans, before os._exit skips every exit hook
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def configure_role_logging(role: str) -> None:
    """Logfmt lines on stderr for a role process (``PHOTOMOSAICS_LOG_LEVEL`` to change the level)."""
    configure_logging(role=role)
