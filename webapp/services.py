"""The storage-layer objects the web app uses, created lazily once per process.

``services()`` hands back one ``WebServices`` per app: the blob store, job store, queue accessor
and library store share one ``StorageClients`` with the ``interactive`` retry profile (a
person is waiting: give up after about three seconds rather than the SDK's minute). The
containers, tables and queues are created (if missing) on first use, not at import time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property

from flask import Flask, current_app

from dal.config import RetryProfile, Settings, StorageClients
from dal.observability.prometheus import StorageRequestMetrics
from dal.stores import Stores

_EXTENSION = "photomosaics"


@dataclass
class WebServices(Stores):
    """The app's stores, plus a probe for health checks and a once-per-process set-up."""

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _ready: bool = False

    @classmethod
    def connect(
        cls,
        connection_string: str,
        settings: Settings,
        *,
        profile: RetryProfile = "interactive",
        secondary: str | None = None,
    ) -> WebServices:

        # StorageClients is itself lazy: nothing touches the network until a store is used.
        # Every storage call is counted for /metrics (webapp/metrics.py).
        storage = StorageClients(connection_string, profile=profile, response_hook=StorageRequestMetrics())
        # The paired secondary account (dal.availability.failover): submissions go on while the primary is down.
        paired = StorageClients(secondary, profile=profile) if secondary else None
        return cls(storage, settings, secondary=paired)

    @cached_property
    def probe(self) -> StorageClients:
        """Short retries for the health check: a dead endpoint is reported in seconds."""
        return StorageClients(self.storage.connection_string, profile="probe")

    def ensure_ready(self) -> None:
        """Create the workflow containers, tables and queues once per process (idempotent)."""
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            if self.failover is None:
                self.ensure()
                self._ready = True
            else:  # paired: a primary that is down now is set up on a later request (dal.availability.failover)
                self._ready = self.failover.ask_primary(self._ensure_and_say_so, False)

    def _ensure_and_say_so(self) -> bool:
        self.ensure()
        return True


def init_app(app: Flask) -> None:
    app.extensions[_EXTENSION] = WebServices.connect(
        app.config["CONNECTION_STRING"],
        app.config["SETTINGS"],
        profile=app.config.get("STORAGE_PROFILE", "interactive"),
        secondary=app.config.get("SECONDARY_CONNECTION_STRING"),
    )


def services() -> WebServices:
    """The current app's services, with storage made ready on first use."""
    found: WebServices = current_app.extensions[_EXTENSION]
    found.ensure_ready()
    return found


def settings() -> Settings:
    found: Settings = current_app.config["SETTINGS"]
    return found
