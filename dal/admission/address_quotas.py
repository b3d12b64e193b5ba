"""Submission quotas per network address: the bucket that holds when a client drops its cookie.

Contract
--------
``AddressBuckets.admit(address)`` takes one token from the bucket of the address's network
(an IPv4 address is its own /32; an IPv6 address counts as its /64, what one subscriber is
usually given) or raises ``QuotaExceeded`` with a ``retry_after`` (seconds until the next
token) and takes nothing. ``give_back(address)`` returns a token for a submission that was
refused or not stored after all (best effort).

Design
------
A token bucket, not a clock-minute window: ``burst`` submissions at once, then one every
``3600 / per_hour`` seconds, whatever the clock minute. It lives beside the per-client rows of
``dal.admission.quotas`` in the ``clientquotas`` table (``PartitionKey=<network key>,
RowKey="address"``): ``tokens`` and ``updated`` (epoch seconds). ``admit`` is a read and a
write with If-Match, two storage transactions; a writer that lost the ETag race re-reads and
decides again, so web processes never share out more tokens than the bucket holds. Network
keys hold a dot (IPv4) or start with ``net6-`` and sit under another RowKey, so they never
meet a client's row.

The same bucket counts other things under other RowKeys: library creations
(``library_buckets``: one bucket per network address, ``RowKey="library-address"``, and one per
client id, ``RowKey="library-client"``), so creating libraries is bounded for a client that
keeps its cookie and for one that drops it; and the bytes of photos a client declares for
direct upload (``upload_bytes_bucket``, ``RowKey="upload-bytes"``: ``admit`` takes ``amount``
tokens, one per byte).
"""

from __future__ import annotations

import ipaddress
import math
import random
import time
from collections.abc import Callable
from functools import cached_property

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableClient, TableEntity, UpdateMode

from dal.config import CLIENT_QUOTAS_TABLE, StorageClients
from dal.errors import QuotaExceeded
from dal.names import prefixed

__all__ = ["AddressBuckets", "library_buckets", "network_key", "upload_bytes_bucket"]

_ROW = "address"
_MAX_ATTEMPTS = 20
IPV6_PREFIX = 64


def network_key(address: str) -> str:
    """The bucket key of a client address: ``net4-<a.b.c.d>`` or ``net6-<first four groups>``.

    IPv4-mapped IPv6 addresses count as their IPv4 address; anything unparsable (a Unix socket
    in tests, an empty address) shares the one bucket ``net-unknown``.
    """
    try:
        parsed = ipaddress.ip_address((address or "").strip().split("%", 1)[0])
    except ValueError:
        return "net-unknown"
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    if isinstance(parsed, ipaddress.IPv4Address):
        return f"net4-{parsed}"
    network = ipaddress.IPv6Network(f"{parsed}/{IPV6_PREFIX}", strict=False)
    groups = network.network_address.exploded.split(":")[: IPV6_PREFIX // 16]
    return "net6-" + "-".join(groups)


class AddressBuckets:
    """Token buckets per network address in the quotas table; ``prefix`` isolates tests."""

    def __init__(
        self,
        storage: StorageClients,
        *,
        burst: int,
        per_hour: int,
        prefix: str = "",
        row: str = _ROW,
        key: Callable[[str], str] = network_key,
        counted: str = "submissions",
        per: str = "one network address",
    ) -> None:
        """``row``, ``key`` (who shares a bucket), ``counted`` and ``per`` (the refusal's words) let
        the same bucket count something else or someone else (``library_buckets``)."""
        if burst < 1 or per_hour < 1:
            raise ValueError("the address quota needs a burst and a rate of at least 1")
        self.storage = storage
        self.burst = burst
        self.per_second = per_hour / 3600.0
        self.table_name = prefixed(prefix, CLIENT_QUOTAS_TABLE)
        self.row, self.key, self.counted, self.per = row, key, counted, per

    @cached_property
    def _table(self) -> TableClient:
        return self.storage.table_service.get_table_client(self.table_name)

    def _tokens(self, entity: TableEntity | None, now: float) -> float:
        if entity is None:
            return float(self.burst)
        elapsed = max(0.0, now - float(entity["updated"]))
        return min(float(self.burst), float(entity["tokens"]) + elapsed * self.per_second)

    def admit(self, address: str, *, now: float | None = None, amount: float = 1.0) -> None:
        """Take ``amount`` tokens (one submission; or bytes, ``upload_bytes_bucket``) for ``address``'s
        network, or raise ``QuotaExceeded`` taking nothing."""
        key = self.key(address)
        for _ in range(_MAX_ATTEMPTS):
            clock = time.time() if now is None else now
            entity = self._read(key)
            tokens = self._tokens(entity, clock)
            if tokens < amount:
                wait = math.ceil((amount - tokens) / self.per_second)
                if amount > self.burst:
                    wait = max(wait, 3600)
                raise QuotaExceeded(
                    f"at most {self.burst:,} {self.counted} at once from {self.per}, then "
                    f"{round(self.per_second * 3600):,} an hour"
                    + (f" (this request asks for {amount:,.0f})" if amount != 1.0 else "")
                    + f"; try again in {wait} s",
                    retry_after=wait,
                )
            if self._write(key, tokens - amount, clock, entity):
                return
            time.sleep(random.uniform(0.005, 0.05))  # lost the race: re-read and decide again
        raise QuotaExceeded(f"too many simultaneous {self.counted} from {self.per}", retry_after=1)

    def give_back(self, address: str, *, amount: float = 1.0) -> None:
        """Return the tokens of a submission that was refused or not stored (best effort)."""
        key = self.key(address)
        for _ in range(_MAX_ATTEMPTS):
            clock = time.time()
            entity = self._read(key)
            if entity is None:
                return
            if self._write(key, min(float(self.burst), self._tokens(entity, clock) + amount), clock, entity):
                return

    def _read(self, key: str) -> TableEntity | None:
        try:
            return self._table.get_entity(key, self.row)
        except ResourceNotFoundError:
            return None

    def _write(self, key: str, tokens: float, now: float, entity: TableEntity | None) -> bool:
        """Store the bucket if nobody else did since it was read; False when someone did."""
        row = {"PartitionKey": key, "RowKey": self.row, "tokens": float(tokens), "updated": float(now)}
        try:
            if entity is None:
                self._table.create_entity(row)
            else:
                self._table.update_entity(
                    row,
                    mode=UpdateMode.REPLACE,
                    etag=entity.metadata["etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
        except (ResourceModifiedError, ResourceExistsError):
            return False
        return True


def library_buckets(
    storage: StorageClients, *, address_burst: int, client_burst: int, per_hour: int, prefix: str = ""
) -> tuple[AddressBuckets, AddressBuckets]:
    """The buckets of library creation: ``(per network address, per client id)``."""
    by_address = AddressBuckets(
        storage, burst=address_burst, per_hour=per_hour, prefix=prefix, row="library-address", counted="libraries"
    )
    by_client = AddressBuckets(
        storage,
        burst=client_burst,
        per_hour=per_hour,
        prefix=prefix,
        row="library-client",
        key=lambda client_id: client_id,
        counted="libraries",
        per="one client",
    )
    return by_address, by_client


def upload_bytes_bucket(storage: StorageClients, *, per_hour: int, prefix: str = "") -> AddressBuckets:
    """The bytes of photos one client may declare for upload (``POST /api/libraries/<name>/uploads``):
    a bucket of ``per_hour`` bytes, refilled at that rate; ``admit(client_id, amount=bytes)``."""
    return AddressBuckets(
        storage,
        burst=per_hour,
        per_hour=per_hour,
        prefix=prefix,
        row="upload-bytes",
        key=lambda client_id: client_id,
        counted="bytes of uploads",
        per="one client",
    )
