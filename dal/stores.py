"""The stores of the application over one set of storage clients.

``Stores`` is what a process needs to talk to storage: blobs, jobs, queues, tile libraries,
quotas, render rates, the backlog gauge and the paired failover account, each built on
first use and sharing one ``StorageClients`` (one retry profile, one connection pool). Role processes and the web app both build on it; tests build one
against Azurite with a name prefix.

The workflow's writes go through ``send``, ``upload`` and the reads of what a message refers
to through ``download_url`` / ``download``: with a paired ``secondary`` account they fail over
(``dal.availability.failover``); without one (the default) they are exactly the stores' own calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from dal.admission.address_quotas import AddressBuckets, library_buckets, upload_bytes_bucket
from dal.admission.backpressure import BacklogGauge
from dal.admission.quotas import QuotaStore
from dal.admission.render_rates import RenderRates
from dal.availability.failover import PairedAccount
from dal.blobs.libraries import LibraryStore
from dal.blobs.staging import LibraryStaging
from dal.blobs.store import BlobStore
from dal.config import Settings, StorageClients
from dal.jobs.store import JobStore
from dal.queues.accessor import QueueAccessor
from dal.queues.messages import QueueMessage

__all__ = ["Stores"]


@dataclass
class Stores:
    """Lazily built stores; every name carries ``settings.name_prefix``."""

    storage: StorageClients
    settings: Settings
    # The paired secondary account (PHOTOMOSAICS_SECONDARY_CONNECTION_STRING); None: no failover.
    secondary: StorageClients | None = field(default=None, kw_only=True)

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
    def address_quotas(self) -> AddressBuckets:
        """Per network address, in the same table as ``quotas`` (``ensure`` creates it)."""
        return AddressBuckets(
            self.storage,
            burst=self.settings.address_burst,
            per_hour=self.settings.address_submissions_per_hour,
            prefix=self.prefix,
        )

    @cached_property
    def library_quotas(self) -> tuple[AddressBuckets, AddressBuckets]:
        """Library creation: ``(per network address, per client)``, in the same table as ``quotas``."""
        return library_buckets(
            self.storage,
            address_burst=self.settings.library_address_burst,
            client_burst=self.settings.library_client_burst,
            per_hour=self.settings.libraries_per_hour,
            prefix=self.prefix,
        )

    @cached_property
    def staging(self) -> LibraryStaging:
        """Upload grants (write-only SAS) and the staged photos of libraries made for uploads."""
        return LibraryStaging(self.libraries, public_endpoint=self.settings.public_blob_endpoint)

    @cached_property
    def upload_quota(self) -> AddressBuckets:
        """Bytes of photos a client may declare for direct upload, per hour, in the quotas table."""
        return upload_bytes_bucket(self.storage, per_hour=self.settings.upload_bytes_per_hour, prefix=self.prefix)

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

    @cached_property
    def failover(self) -> PairedAccount | None:
        """The writes that fail over to the secondary; None when no secondary is configured."""
        if self.secondary is None:
            return None
        return PairedAccount(
            self, Stores(self.secondary, self.settings), stay_on_secondary=self.settings.failover_stay_seconds
        )

    def send(self, messages: QueueMessage | Sequence[QueueMessage], *, force_secondary: bool = False) -> str:
        """Send messages of one queue (by their ``queue_uri``); ``"primary"`` or ``"secondary"`` (parked)."""
        if self.failover is not None:
            return self.failover.send(messages, force_secondary=force_secondary)
        batch = [messages] if isinstance(messages, QueueMessage) else list(messages)
        if batch:
            self.queues.for_message(batch[0]).submit(batch)
        return "primary"

    def upload(self, container: str, name: str, data: bytes, *, content_type: str, keep_existing: bool = False) -> str:
        """Write a workflow blob; its URL names the account that holds it (the secondary after a failover).
        ``keep_existing``: only if it does not exist yet (``BlobStore.upload``)."""
        if self.failover is not None:
            return self.failover.upload(container, name, data, content_type=content_type, keep_existing=keep_existing)[
                0
            ]
        return self.blobs.upload(container, name, data, content_type=content_type, keep_existing=keep_existing)

    def download_url(self, url: str) -> bytes:
        """A blob a message refers to, by absolute URL (of either account when paired)."""
        if self.failover is not None:
            return self.failover.download_url(url)
        return self.blobs.download_url(url)

    def download(self, container: str, name: str) -> bytes:
        """A workflow blob by name (when paired, the secondary's if the primary has none)."""
        if self.failover is not None:
            return self.failover.download(container, name)
        return self.blobs.download(container, name)

    def ensure(self) -> None:
        """Create the queues, containers and tables that are missing (idempotent; start-up)."""
        self.queues.ensure_all()
        self.blobs.ensure_containers()
        self.jobs.ensure_tables()
        self.quotas.ensure_table()
        self.render_rates.ensure_table()
