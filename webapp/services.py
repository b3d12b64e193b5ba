"""The storage-layer objects the web app uses, created lazily once per process.

``services()`` hands back one ``Services`` per app: the blob store, job store, queue accessor
and library store share one ``StorageClients`` with the ``interactive`` retry profile (a
person is waiting: give up after about three seconds rather than the SDK's minute). The
containers, tables and queues are created (if missing) on first use, not at import time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from flask import Flask, current_app

from dal.config import Settings, StorageClients

if TYPE_CHECKING:
    from dal.blobs import BlobStore
    from dal.jobs import JobStore
    from dal.libraries import LibraryStore
    from dal.queues import QueueAccessor

_EXTENSION = "photomosaics"


@dataclass
class Services:
    """Lazily built stores over one set of storage clients."""

    connection_string: str
    settings: Settings
    profile: str = "interactive"

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = False

    @cached_property
    def storage(self) -> StorageClients:
        return StorageClients(self.connection_string, profile=self.profile)  # type: ignore[arg-type]

    @cached_property
    def probe(self) -> StorageClients:
        """Short retries for the health check: a dead endpoint is reported in seconds."""
        return StorageClients(self.connection_string, profile="probe")

    @property
    def prefix(self) -> str:
        return self.settings.name_prefix

    @cached_property
    def blobs(self) -> BlobStore:
        from dal.blobs import BlobStore

        return BlobStore(self.storage, prefix=self.prefix)

    @cached_property
    def jobs(self) -> JobStore:
        from dal.jobs import JobStore

        return JobStore(self.storage, prefix=self.prefix)

    @cached_property
    def queues(self) -> QueueAccessor:
        from dal.queues import QueueAccessor

        return QueueAccessor(self.storage, settings=self.settings, prefix=self.prefix)

    @cached_property
    def libraries(self) -> LibraryStore:
        from dal.libraries import LibraryStore

        return LibraryStore(self.storage, prefix=self.prefix)

    def ensure_ready(self) -> None:
        """Create the workflow containers, tables and queues once per process (idempotent)."""
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            self.blobs.ensure_containers()
            self.jobs.ensure_tables()
            self.queues.ensure_all()
            self._ready = True


def init_app(app: Flask) -> None:
    app.extensions[_EXTENSION] = Services(
        connection_string=app.config["CONNECTION_STRING"],
        settings=app.config["SETTINGS"],
        profile=app.config.get("STORAGE_PROFILE", "interactive"),
    )


def services() -> Services:
    """The current app's services, with storage made ready on first use."""
    found: Services = current_app.extensions[_EXTENSION]
    found.ensure_ready()
    return found


def settings() -> Settings:
    found: Settings = current_app.config["SETTINGS"]
    return found
