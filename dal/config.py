"""Names and settings in one place, read from the environment, and the storage clients.

No Azure client is created at import time: ``StorageClients`` builds each service client
the first time it is used, with a retry policy chosen for the caller: the SDK's own policies
(blob and queue: the storage SDK's jittered ``ExponentialRetry``, the n-th wait
``initial_backoff + increment_base**n``, given a wait of about 10 s after a 503 ServerBusy
and a retry counter by ``dal.retry`` in the ``worker`` and ``interactive`` profiles:
throttling is answered by waiting, never by spinning or failing over). Tables use
azure-data-tables' own ``TablesRetryPolicy`` (first retry at once, then
``factor * 2**(n-1)``, no jitter): that SDK builds it from keyword arguments and ignores a
``retry_policy=``, so the ServerBusy wait does not reach table calls.
A profile's retries count for every kind of failure (the SDKs' own cap is 3 per kind).
Waits between attempts:

- ``worker``: long-running roles. Rides out throttling (503 Server Busy) and brief
  outages: blob/queue 3, 5, 9, 17, 33 s (±1 s), about 67 s over 5 retries (a dropped
  connection's first retry at once, ``dal.retry``); tables 0, 2, 4, 8, 16 s. Socket
  timeouts 20 s connect, 120 s read (large blobs).
- ``interactive``: the web app. A person is waiting: blob/queue 1.5, 2.25 s (±0.3 s), about
  4 s over 2 retries; tables 0, 0.6, 1.2 s. Timeouts 5 s connect, 60 s read.
- ``probe``: health checks, start-up checks and tests. One retry after about 0.2 s, 2 s
  connect and 10 s read timeouts, so a dead endpoint is reported in seconds, not after
  the SDK's default of about 18 + 24 + 42 s.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from dal.connection_strings import connection_string_parts, describe_connection_string, expand_connection_string
from dal.http_environment import for_service
from mosaic.errors import PhotoMosaicsError
from mosaic.limits import DEFAULT_MAX_INPUT_PIXELS, DEFAULT_MAX_OUTPUT_PIXELS

if TYPE_CHECKING:  # the SDKs load when a client is first made, not at import (render needs none)
    from azure.data.tables import TableServiceClient
    from azure.storage.blob import BlobServiceClient
    from azure.storage.queue import QueueServiceClient

    from dal.retry import ThrottleAwareRetry

# Queue, container and table names (the README's architecture diagram; docs/CONTRACTS.md).
IMAGE_REQUEST_QUEUE = "imagerequest"
IMAGE_RESPONSE_QUEUE = "imageresponse"
SLICE_REQUEST_QUEUE = "slicerequest"
SLICE_RESPONSE_QUEUE = "sliceresponse"
WORK_QUEUES = (IMAGE_REQUEST_QUEUE, SLICE_REQUEST_QUEUE, SLICE_RESPONSE_QUEUE, IMAGE_RESPONSE_QUEUE)
JOB_CLEANUP_QUEUE = "jobcleanup"  # deleting a job's blobs and rows: dal.operations.cleanup
INDEX_REQUEST_QUEUE = "indexrequest"  # photos uploaded into a library, to index: workers.indexer
POISON_SUFFIX = "-poison"

IMAGE_INPUT_CONTAINER = "imageinput"
SLICE_REQUEST_CONTAINER = "slicerequest"
SLICE_RESPONSE_CONTAINER = "sliceresponse"
IMAGE_OUTPUT_CONTAINER = "imageoutput"
WORKFLOW_CONTAINERS = (
    IMAGE_INPUT_CONTAINER,
    SLICE_REQUEST_CONTAINER,
    SLICE_RESPONSE_CONTAINER,
    IMAGE_OUTPUT_CONTAINER,
)
# Payloads too large for a queue message (claim check).
CLAIM_CHECK_CONTAINER = "queuepayloads"
# The retention sweep's lock blob (dal.operations.retention): one sweep at a time.
OPERATIONS_CONTAINER = "operations"
# Every container the application keeps for itself: never a tile library's name.
INTERNAL_CONTAINERS = (*WORKFLOW_CONTAINERS, CLAIM_CHECK_CONTAINER, OPERATIONS_CONTAINER)
# Metadata key that marks a container as a tile library; its value is the description.
LIBRARY_METADATA_KEY = "imagelibrarydescription"

JOBS_TABLE = "jobs"
JOB_EVENTS_TABLE = "jobevents"
CLIENT_QUOTAS_TABLE = "clientquotas"
RENDER_RATES_TABLE = "renderrates"  # each processor's measured seconds per slice: dal.admission.render_rates

CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"

RetryProfile = Literal["worker", "interactive", "probe"]


class SettingsError(PhotoMosaicsError, ValueError):
    """A setting out of its type or range: said as one line by the CLI (``photomosaics.cli``)."""


def _parse(name: str, raw: str, kind: type) -> int | float | str:
    """One environment value as the type of the setting's default, or a clear SettingsError."""
    if kind is str:
        return raw
    try:
        return kind(raw)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise SettingsError(f"{name} must be {noun}, got {raw!r}") from None


def within(low: float, high: float | None = None) -> dict[str, tuple[float, float | None]]:
    """A number's range as field metadata (``Settings.__post_init__``); without: finite, >= 0."""
    return {"range": (low, high)}


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every tunable of the application; ``from_env`` reads ``PHOTOMOSAICS_*`` overrides.

    Each default is written once, here; ``ENV`` names the variable of each field, and
    ``from_env`` is the only parser (the roles, the web app and the CLI all read their
    settings through it; ``tests/test_config.py`` checks that no other module reads these
    variables). ``connection_string`` is None when nothing is configured: the caller then
    starts the embedded Azurite (``photomosaics.local.azurite``).
    """

    # Never in repr (a log line, a traceback's locals): it holds the account key or a SAS.
    connection_string: str | None = field(default=None, repr=False)
    # Queue defaults, used when a queue has no ``poisonthreshold`` / ``defaulttimeout`` metadata.
    poison_threshold: int = field(default=5, metadata=within(1))
    visibility_timeout: int = field(default=300, metadata=within(1, 7 * 24 * 3600))
    # Listener defaults (see README, "Queue listener").
    batch_size: int = field(default=16, metadata=within(1, 32))
    poll_min_interval: float = field(default=0.1, metadata=within(0.001))
    poll_max_interval: float = field(default=2.0, metadata=within(0.001))
    # The idle cap when work-detected hints cover the queue (dal.hints.channel): polling is only the safety net.
    poll_max_hinted_interval: float = field(default=60.0, metadata=within(0.001))
    # How long a listener leases a message (renewed at half-time; a silent death costs at most this).
    lease_seconds: int = field(default=60, metadata=within(1, 7 * 24 * 3600))
    # First wait before a failed message is retried (doubles per delivery, workers.runtime.backoff).
    retry_delay: float = 5.0
    # The controller: a slice response older than this (seconds) no longer holds the stitch claim.
    stitch_timeout: float = 600.0
    # Hedged slices (workers.controller.hedging): the controller sends a slice again when it is out longer than
    # max(floor, factor x what its siblings took), at most this many times per slice; 0 turns it off.
    hedge_floor_seconds: float = 1.0
    hedge_factor: float = 3.0
    hedges_per_slice: int = 1
    # Tests only: a processor sleeps this long before each slice (a slow worker on demand).
    test_slice_delay: float = 0.0
    # A processor trusts its in-memory tile library this long after the last check of the index's
    # ETag (one conditional GET per check): a replaced library is used within this many seconds.
    library_revalidate_seconds: float = 10.0
    # A band PNG up to this many bytes travels inside its SliceRequest (at most 32 KiB: the queue's
    # 64 KiB message limit); bigger ones are blobs. 0: every band a blob, for a rolling upgrade
    # while processors older than the ``band`` field still run (they refuse it).
    inline_band_bytes: int = field(default=32 * 1024, metadata=within(0, 32 * 1024))
    # Mosaic limits.
    max_output_pixels: int = field(default=DEFAULT_MAX_OUTPUT_PIXELS, metadata=within(1))
    max_upload_bytes: int = field(default=30 * 1024 * 1024, metadata=within(1))
    max_input_pixels: int = field(default=DEFAULT_MAX_INPUT_PIXELS, metadata=within(1))
    max_slices: int = field(default=64, metadata=within(1))
    # Megapixels one web process decodes at once (webapp.decode_budget); beyond: 503 + Retry-After.
    web_decode_megapixels: int = field(default=100, metadata=within(1))
    # Per-client quotas (dal.admission.quotas): unfinished jobs at once, and submissions per clock minute.
    max_unfinished_jobs: int = 3
    submissions_per_minute: int = 10
    # Per network address (IPv4 /32, IPv6 /64; dal.admission.quotas.AddressBuckets): a token bucket that also
    # holds for clients that drop their cookie. A burst of this many submissions, then this many an hour.
    address_burst: int = 10
    address_submissions_per_hour: int = 60
    # Library creation (POST /api/libraries; dal.admission.address_quotas.library_buckets): a burst of this
    # many per network address and per client, then this many an hour each.
    library_address_burst: int = 10
    library_client_burst: int = 5
    libraries_per_hour: int = 20
    # Bytes of photos one client may declare for direct upload into its libraries, per hour (a bucket
    # of that many bytes, refilled at that rate): POST /api/libraries/<name>/uploads answers 429 past it.
    upload_bytes_per_hour: int = 16 * 2**30
    # The Blob endpoint a browser reaches when it is not the connection string's (docker compose: the roles
    # use http://azurite:10000/devstoreaccount1, a browser the host-published http://localhost:10000/...):
    # the upload URLs the web app grants, and its page's connect-src, use it. Empty: the connection string's.
    public_blob_endpoint: str = ""
    # The web app's origins (space- or comma-separated) that `photomosaics web` sets as the account's Blob
    # CORS rule at start-up, replacing its rules (dal.blobs.cors). Empty: the operator sets the rule.
    upload_origins: str = ""
    # Proxies in front of the web app whose X-Forwarded-For/-Proto/-Host are trusted (werkzeug's
    # ProxyFix): the client address of the quotas and the scheme of the origin check and cookie.
    trusted_proxies: int = 0
    # Server-Sent Event streams (GET /api/jobs/<id>/events) a web process serves at once, per client and in
    # all (each holds a thread: webapp.streams); 2 of 8: four clients fill a process. 0: none, clients poll.
    event_streams_per_client: int = 2
    event_streams_per_process: int = 8
    # Web processes serving one deployment (replicas × workers): above 1 the secret key must be set.
    web_replicas: int = field(default=1, metadata=within(1))
    # Backpressure (dal.admission.backpressure): a submission is refused (503 + Retry-After) while the waiting
    # slices would take the processors longer than this to finish at their measured rate; 0: never.
    backpressure_max_wait_seconds: int = 300
    # How long a web process reuses its reading of the queue depths and render rates.
    backlog_cache_seconds: float = 5.0
    # Fair scheduling (dal.queues.lanes): slicerequest lanes; a client's k-th unfinished job goes to lane
    # min(k, lanes - 1) and processors serve lower lanes first. 1: first come, first served.
    fair_lanes: int = field(default=2, metadata=within(1))
    # slicerequest split into this many queues (dal.queues.shards): past ~2,000 messages/s per queue.
    slice_shards: int = field(default=1, metadata=within(1))
    # Paired secondary account (dal.availability.failover, dal.operations.syphon): how long a process writes straight to the
    # secondary after a failover, and how often the syphon pings the primary (once a minute).
    failover_stay_seconds: float = 60.0
    syphon_interval: float = field(default=60.0, metadata=within(0.001))
    data_dir: str = ".data"
    # Prepended to every queue, container and table name (dal.names): isolates tests and side-by-side runs.
    name_prefix: str = ""

    # The environment variable of each field.
    ENV: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "connection_string": CONNECTION_STRING_ENV,
            "poison_threshold": "PHOTOMOSAICS_POISON_THRESHOLD",
            "visibility_timeout": "PHOTOMOSAICS_VISIBILITY_TIMEOUT",
            "batch_size": "PHOTOMOSAICS_BATCH_SIZE",
            "poll_min_interval": "PHOTOMOSAICS_POLL_MIN_SECONDS",
            "poll_max_interval": "PHOTOMOSAICS_POLL_MAX_SECONDS",
            "poll_max_hinted_interval": "PHOTOMOSAICS_POLL_MAX_HINTED_SECONDS",
            "lease_seconds": "PHOTOMOSAICS_LEASE_SECONDS",
            "retry_delay": "PHOTOMOSAICS_RETRY_DELAY_SECONDS",
            "stitch_timeout": "PHOTOMOSAICS_STITCH_TIMEOUT",
            "hedge_floor_seconds": "PHOTOMOSAICS_HEDGE_FLOOR_SECONDS",
            "hedge_factor": "PHOTOMOSAICS_HEDGE_FACTOR",
            "hedges_per_slice": "PHOTOMOSAICS_HEDGES_PER_SLICE",
            "test_slice_delay": "PHOTOMOSAICS_TEST_SLICE_DELAY",
            "library_revalidate_seconds": "PHOTOMOSAICS_LIBRARY_REVALIDATE_SECONDS",
            "inline_band_bytes": "PHOTOMOSAICS_INLINE_BAND_BYTES",
            "max_output_pixels": "PHOTOMOSAICS_MAX_OUTPUT_PIXELS",
            "max_upload_bytes": "PHOTOMOSAICS_MAX_UPLOAD_BYTES",
            "max_input_pixels": "PHOTOMOSAICS_MAX_INPUT_PIXELS",
            "max_slices": "PHOTOMOSAICS_MAX_SLICES",
            "web_decode_megapixels": "PHOTOMOSAICS_WEB_DECODE_MEGAPIXELS",
            "max_unfinished_jobs": "PHOTOMOSAICS_MAX_UNFINISHED_JOBS",
            "submissions_per_minute": "PHOTOMOSAICS_SUBMISSIONS_PER_MINUTE",
            "address_burst": "PHOTOMOSAICS_ADDRESS_BURST",
            "address_submissions_per_hour": "PHOTOMOSAICS_ADDRESS_SUBMISSIONS_PER_HOUR",
            "library_address_burst": "PHOTOMOSAICS_LIBRARY_ADDRESS_BURST",
            "library_client_burst": "PHOTOMOSAICS_LIBRARY_CLIENT_BURST",
            "libraries_per_hour": "PHOTOMOSAICS_LIBRARIES_PER_HOUR",
            "upload_bytes_per_hour": "PHOTOMOSAICS_UPLOAD_BYTES_PER_HOUR",
            "public_blob_endpoint": "PHOTOMOSAICS_PUBLIC_BLOB_ENDPOINT",
            "upload_origins": "PHOTOMOSAICS_UPLOAD_ORIGINS",
            "trusted_proxies": "PHOTOMOSAICS_TRUSTED_PROXIES",
            "event_streams_per_client": "PHOTOMOSAICS_EVENT_STREAMS_PER_CLIENT",
            "event_streams_per_process": "PHOTOMOSAICS_EVENT_STREAMS_PER_PROCESS",
            "web_replicas": "PHOTOMOSAICS_WEB_REPLICAS",
            "backpressure_max_wait_seconds": "PHOTOMOSAICS_BACKPRESSURE_MAX_WAIT_SECONDS",
            "backlog_cache_seconds": "PHOTOMOSAICS_BACKLOG_CACHE_SECONDS",
            "fair_lanes": "PHOTOMOSAICS_FAIR_LANES",
            "slice_shards": "PHOTOMOSAICS_SLICE_SHARDS",
            "failover_stay_seconds": "PHOTOMOSAICS_FAILOVER_STAY_SECONDS",
            "syphon_interval": "PHOTOMOSAICS_SYPHON_INTERVAL",
            "data_dir": "PHOTOMOSAICS_DATA_DIR",
            "name_prefix": "PHOTOMOSAICS_NAME_PREFIX",
        }
    )

    def __post_init__(self) -> None:
        """Every number within its range, else a SettingsError naming the setting and its variable
        (``PHOTOMOSAICS_MAX_SLICES=-1`` or ``nan`` was odd behaviour far from its cause)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            low, high = f.metadata.get("range", (0, None))
            if not (math.isfinite(value) and value >= low and (high is None or value <= high)):
                bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
                raise SettingsError(f"{f.name} ({self.ENV[f.name]}) must be {bounds}, got {value!r}")
        if self.poll_min_interval > self.poll_max_interval:
            raise SettingsError(f"poll_min_interval ({self.poll_min_interval}) exceeds poll_max_interval")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The defaults above, overridden by every variable of ``ENV`` that is set and not empty."""
        env = os.environ if environ is None else environ
        defaults = cls()
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(cls.ENV[f.name], "")
            if raw == "":
                continue
            default = getattr(defaults, f.name)
            values[f.name] = _parse(cls.ENV[f.name], raw, str if default is None else type(default))
        return cls(**values)


_QUEUE_BLOB_RETRY: dict[str, dict[str, float]] = {
    "worker": {"initial_backoff": 1, "increment_base": 2, "retry_total": 5, "random_jitter_range": 1},
    "interactive": {"initial_backoff": 0, "increment_base": 1.5, "retry_total": 2, "random_jitter_range": 0.3},
    # One retry after about 0.2 s (0 + 0.2**1): a dead endpoint is reported at once.
    "probe": {"initial_backoff": 0, "increment_base": 0.2, "retry_total": 1, "random_jitter_range": 0.1},
}


_TIMEOUTS: dict[str, dict[str, float]] = {
    "worker": {"connection_timeout": 20, "read_timeout": 120},
    "interactive": {"connection_timeout": 5, "read_timeout": 60},
    "probe": {"connection_timeout": 2, "read_timeout": 10},
}

_TABLE_RETRY: dict[str, dict[str, float]] = {
    "worker": {"retry_total": 5, "retry_backoff_factor": 1.0, "retry_backoff_max": 20},
    "interactive": {"retry_total": 3, "retry_backoff_factor": 0.3, "retry_backoff_max": 2},
    "probe": {"retry_total": 1, "retry_backoff_factor": 0.2, "retry_backoff_max": 0.5},
}


def _every_kind(retries: dict[str, float]) -> dict[str, float]:
    """A profile's ``retry_total`` for every kind of failure.

    Both SDKs also stop after 3 retries of one kind (a 5xx answer, a refused connection, a
    dropped one) whatever the total: a worker's five retries would be three for throttling,
    the failure they are there to ride out.
    """
    total = retries["retry_total"]
    return {**retries, "retry_status": total, "retry_connect": total, "retry_read": total}


class StorageClients:
    """Lazily created queue, blob and table service clients for one connection string.

    ``response_hook`` is called with every raw HTTP response of all three services, retries
    included (each attempt is a billable storage transaction): the benchmarks' transaction
    counter. ``request_hook`` is called with every raw request before it is sent (the listing
    tests ask for small pages, so a few hundred blobs need continuations as 5,000 would). Each
    client reads the HTTP environment once (``dal.http_environment``)."""

    def __init__(
        self,
        connection_string: str,
        *,
        profile: RetryProfile = "worker",
        response_hook: Callable[[Any], None] | None = None,
        request_hook: Callable[[Any], None] | None = None,
    ) -> None:
        self.connection_string = expand_connection_string(connection_string)
        self.profile = profile
        self._response_hook = response_hook
        self._request_hook = request_hook
        # Throttling (dal/retry.py): ServerBusy waits, retries are counted when the hook can.
        # Imported here, not at the top: the retry policy subclasses the Azure SDK's, and a
        # process that only reads Settings (``photomosaics render``) imports no Azure SDK.
        from dal.retry import retry_tuning_from_env

        self._retry_scale, self._server_busy_wait = retry_tuning_from_env()
        self._on_retry = getattr(response_hook, "record_retry", None)

    def _retry(self) -> ThrottleAwareRetry:
        from dal.retry import ThrottleAwareRetry

        busy = 0.0 if self.profile == "probe" else self._server_busy_wait  # a probe reports, it does not wait
        retries = _every_kind(_QUEUE_BLOB_RETRY[self.profile])
        return ThrottleAwareRetry(scale=self._retry_scale, server_busy_wait=busy, on_retry=self._on_retry, **retries)

    def _table_retry(self) -> dict[str, float]:
        """The table profile; ``PHOTOMOSAICS_RETRY_SCALE`` scales its waits too (no ServerBusy wait)."""
        retry = _every_kind(_TABLE_RETRY[self.profile])
        retry["retry_backoff_factor"] *= self._retry_scale
        retry["retry_backoff_max"] *= self._retry_scale
        return retry

    def __repr__(self) -> str:
        return f"StorageClients({describe_connection_string(self.connection_string)}, profile={self.profile!r})"

    def _common(self, service: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {**_TIMEOUTS[self.profile], **for_service(self.connection_string, service)}
        if self._response_hook is not None:
            kwargs["raw_response_hook"] = self._response_hook
        if self._request_hook is not None:
            kwargs["raw_request_hook"] = self._request_hook
        return kwargs

    @cached_property
    def queue_service(self) -> QueueServiceClient:
        from azure.storage.queue import QueueServiceClient

        return QueueServiceClient.from_connection_string(
            self.connection_string, retry_policy=self._retry(), **self._common("queue")
        )

    @cached_property
    def blob_service(self) -> BlobServiceClient:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(
            self.connection_string, retry_policy=self._retry(), **self._common("blob")
        )

    @cached_property
    def table_service(self) -> TableServiceClient:
        from azure.data.tables import TableServiceClient

        return TableServiceClient.from_connection_string(
            self.connection_string, **self._table_retry(), **self._common("table")
        )

    @property
    def account_name(self) -> str:
        return connection_string_parts(self.connection_string).get("AccountName", "")

    @property
    def account_key(self) -> str:
        """The shared key, for signing SAS tokens only; never log or return it."""
        return connection_string_parts(self.connection_string).get("AccountKey", "")
