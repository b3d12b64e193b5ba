"""Keeps the embedded Azurite of ``photomosaics run`` alive, like the supervisor keeps roles.

``AzuriteKeeper.check`` runs in the supervisor's loop (main thread: Azurite's parent-death
signal follows the thread that started it). When the Azurite process has died it starts a
new one **on the same ports and the same data folder**, so every role's connection string
stays valid and their storage retries simply succeed once it is back; nothing is restarted
but Azurite. Each change is written to the status file the web app's ``/healthz`` reads,
so its 503 says what happened ("the embedded Azurite exited ... restarting") instead of
suggesting a variable the user never set. Restarts back off like the supervisor's (1 s,
doubling to 60 s) if Azurite keeps dying.

Azurite persists its metadata to disk every 5 seconds (LokiJS autosave): writes in the last
moments before a SIGKILL can be lost (Azurite's own limit; a real storage account has no such
window). So after each restart the keeper calls ``on_restart`` (``photomosaics run`` passes
its storage preparation), which recreates any queue, container or table lost that way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from dal.availability.storage_status import write_status
from photomosaics.local.azurite import Azurite, AzuriteError
from photomosaics.local.supervisor import restart_delay
from workers.runtime.logfmt import kv

__all__ = ["AzuriteKeeper"]

log = logging.getLogger(__name__)


def _clock() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S UTC")


class AzuriteKeeper:
    """Restart ``azurite`` on its ports and data when it dies; see the module docstring."""

    def __init__(
        self,
        azurite: Azurite,
        status_file: Path,
        *,
        backoff_min: float = 1.0,
        backoff_max: float = 60.0,
        on_restart: Callable[[str], None] | None = None,
    ):
        self.azurite = azurite
        self.on_restart = on_restart
        self.status_file = status_file
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.restarts = 0
        self._ports = (azurite.ports["Blob"], azurite.ports["Queue"], azurite.ports["Table"])
        self._failures = 0
        self._next_try = 0.0
        self._down_since: float | None = None
        self._status("running", f"the embedded Azurite (pid {azurite.pid}) is running")

    def _status(self, state: str, message: str) -> None:
        try:
            write_status(self.status_file, state=state, message=message, restarts=self.restarts)
        except OSError as exc:
            log.warning(kv("azurite.status_not_written", error=str(exc)))

    def check(self) -> None:
        """Called every supervisor tick: restart Azurite if it has died (with back-off)."""
        code = self.azurite.exit_code()
        if code is None and self._down_since is None:
            return
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
            log.error(
                kv("azurite.exited", pid=self.azurite.pid, code=code, note="restarting on the same ports and data")
            )
            self._status(
                "restarting",
                f"the embedded Azurite started by `photomosaics run` exited (code {code}) at "
                f"{_clock()}; the supervisor is restarting it on the same ports and data",
            )
        if now < self._next_try:
            return
        self.azurite.stop()  # reap the dead process, close its pipe
        replacement = Azurite(location=self.azurite.location, host=self.azurite.host, ports=self._ports)
        try:
            replacement.start()
        except AzuriteError as exc:
            delay = restart_delay(self._failures, backoff_min=self.backoff_min, backoff_max=self.backoff_max)
            self._failures += 1
            self._next_try = now + delay
            self.azurite = replacement
            log.error(kv("azurite.restart_failed", error=str(exc)[:300], retry_in=delay))
            self._status(
                "failed",
                f"the embedded Azurite died and could not be restarted ({str(exc)[:200]}); "
                f"trying again in {delay:.0f} s",
            )
            return
        self.azurite = replacement
        self.restarts += 1
        self._failures = 0
        down = now - (self._down_since or now)
        self._down_since = None
        log.warning(kv("azurite.restarted", pid=replacement.pid, restarts=self.restarts, down_seconds=round(down, 1)))
        if self.on_restart is not None:
            try:  # recreate what the unsaved last seconds may have lost; roles retry meanwhile
                self.on_restart(replacement.connection_string)
            except Exception as exc:
                log.error(kv("azurite.repair_failed", error=str(exc)[:300]))
        self._status(
            "running",
            f"the embedded Azurite was restarted at {_clock()} after it exited "
            f"(restart {self.restarts}); it is running again (pid {replacement.pid})",
        )
