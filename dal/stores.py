"""The four stores of the application over one set of storage clients.

``Stores`` is what a process needs to talk to storage: blobs, jobs, queues and tile
libraries, each built on first use and sharing one ``StorageClients`` (one retry profile,
one connection pool). Role processes and the web app both build on it; tests build one
against Azurite with a name prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING
from dal.backpressure import BacklogGauge
from dal.blobs import BlobStore
from dal.jobs import JobStore
from dal.libraries import LibraryStore
from dal.queues import QueueAccessor
from dal.quotas import QuotaStore
from dal.render_rates import RenderRates

if TYPE_CHECKING:
    from dal.blobs import BlobStore
    from dal.config import Settings, StorageClients
    from dal.jobs import JobStore
    from dal.libraries import LibraryStore
    from dal.queues import QueueAccessor
    from dal.backpressure import BacklogGauge
    from dal.quotas import QuotaStore
    from dal.render_rates import RenderRates

__all__ = ["Stores"]


@dataclass
class Stores:
    """Lazily built stores; every name carries ``settings.name_prefix``."""

    storage: StorageClients
    settings: Settings

    @property
    def prefix(self) -> str:
        return self.settings.name_prefix

    @cached_property
    def blobs(self) -> BlobStore:

        return BlobStore(self.storage, prefix=self.prefix)

    @cached_property
    def jobs(self) -> JobStore:

        return JobStore(self.storage, prefix=self.prefix)

    @cached_property
    def queues(self) -> QueueAccessor:

        return QueueAccessor(self.storage, settings=self.settings, prefix=self.prefix)

    @cached_property
    def libraries(self) -> LibraryStore:

        return LibraryStore(self.storage, prefix=self.prefix)

    @cached_property
    def quotas(self) -> QuotaStore:

        return QuotaStore(
            self.storage,
            max_unfinished=self.settings.max_unfinished_jobs,
            per_minute=self.settings.submissions_per_minute,
            prefix=self.prefix,
        )

    @cached_property
    def render_rates(self) -> RenderRates:

        return RenderRates(self.storage, prefix=self.prefix)

    @cached_property
    def backlog(self) -> BacklogGauge:

        return BacklogGauge(
            self.queues,
            self.render_rates,
            max_wait_seconds=self.settings.backpressure_max_wait_seconds,
            cache_seconds=self.settings.backlog_cache_seconds,
        )

    def ensure(self) -> None:
        """Create the queues, containers and tables that are missing (idempotent; start-up)."""
        self.queues.ensure_all()
        self.blobs.ensure_containers()
        self.jobs.ensure_tables()
        self.quotas.ensure_table()
        self.render_rates.ensure_table()
