"""What every handler of the pipeline needs, built once per role process.

One ``Services`` holds the storage-backed stores (blobs, jobs, queues, libraries), the
settings and the worker's name (the *actor* of the job event log). Handlers take it in
their constructor, so a test builds one against Azurite and calls the handler directly.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from dal.config import StorageClients

if TYPE_CHECKING:
    from dal.blobs import BlobStore
    from dal.config import Settings
    from dal.jobs import JobStore
    from dal.libraries import LibraryStore
    from dal.queues import QueueAccessor

__all__ = ["Services", "worker_name"]


def worker_name(role: str) -> str:
    """``controller@host:pid``: unique among running workers, readable in the event log."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}"


@dataclass
class Services:
    """Storage clients and stores for one role process; stores are created on first use."""

    storage: StorageClients
    settings: Settings
    name: str

    @classmethod
    def from_settings(cls, settings: Settings, *, role: str, connection_string: str) -> Services:
        return cls(StorageClients(connection_string, profile="worker"), settings, worker_name(role))

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

    def ensure(self) -> None:
        """Create queues, containers and tables that are missing (idempotent; start-up)."""
        self.queues.ensure_all()
        self.blobs.ensure_containers()
        self.jobs.ensure_tables()
