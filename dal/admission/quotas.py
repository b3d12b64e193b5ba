"""Per-client submission quotas, counted in an Azure Table so they hold across web processes.

Contract
--------
``QuotaStore.admit(client_id)`` either records one more submission for the client and
returns, or raises ``QuotaExceeded`` (with a ``retry_after`` in seconds) and records nothing.
A client may have at most ``max_unfinished`` jobs not yet done or failed, and may submit at
most ``per_minute`` jobs in one clock minute.

Design
------
Table ``clientquotas``: one entity per client (``PartitionKey=client_id, RowKey="quota"``)
with ``unfinished`` (a counter), ``minute`` (the epoch minute of the rate window) and
``in_minute`` (submissions in it). ``admit`` is read + write-with-If-Match: two storage
transactions per submission. A writer that lost the ETag race (412) re-reads and decides
again, so two web processes never both take the last slot (optimistic concurrency).

``unfinished`` only ever grows on submission; nothing decrements it when a job finishes.
Instead, when the counter says the client is at its limit, ``admit`` recounts the truth:
the client's unfinished jobs in the jobs table (one query in the client's own partition),
and writes that. So a job that finished, failed, was deleted or expired frees its slot the
next time it matters, and a crash between counting and storing a job cannot leak a slot
forever. The recount costs one more transaction, only for clients at their limit.
"""

from __future__ import annotations

import random
import time
from functools import cached_property
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from dal.config import CLIENT_QUOTAS_TABLE, JOBS_TABLE, StorageClients
from dal.errors import QuotaExceeded
from dal.jobs.model import INDEX_MARK, TERMINAL_STATUSES
from dal.names import prefixed
from dal.retry import ensure_table

_ROW = "quota"
_MAX_ATTEMPTS = 20
# A client at its unfinished limit has no natural retry time: this is a polite poll interval.
UNFINISHED_RETRY_AFTER = 15


class QuotaStore:
    """Admission of submissions per client; ``prefix`` isolates tests like the other stores."""

    def __init__(self, storage: StorageClients, *, max_unfinished: int, per_minute: int, prefix: str = "") -> None:
        self.storage = storage
        self.max_unfinished = max_unfinished
        self.per_minute = per_minute
        self.table_name = prefixed(prefix, CLIENT_QUOTAS_TABLE)
        self.jobs_table = prefixed(prefix, JOBS_TABLE)

    @cached_property
    def _table(self) -> Any:
        return self.storage.table_service.get_table_client(self.table_name)

    @cached_property
    def _jobs(self) -> Any:
        return self.storage.table_service.get_table_client(self.jobs_table)

    def ensure_table(self) -> None:
        ensure_table(self.storage.table_service, self.table_name)

    def count_unfinished(self, client_id: str) -> int:
        """The truth: this client's jobs that are neither done nor failed (one partition query)."""
        rows = self._jobs.query_entities(
            "PartitionKey eq @pk and RowKey lt @mark",
            parameters={"pk": client_id, "mark": INDEX_MARK},
            select=["status"],
        )
        return sum(1 for row in rows if row.get("status") not in TERMINAL_STATUSES)

    def admit(self, client_id: str, *, now: float | None = None) -> None:
        """Record one submission for ``client_id``, or raise ``QuotaExceeded`` recording nothing."""
        for _ in range(_MAX_ATTEMPTS):
            clock = time.time() if now is None else now
            minute = int(clock // 60)
            try:
                entity = self._table.get_entity(client_id, _ROW)
            except ResourceNotFoundError:
                entity = None
            unfinished = int(entity["unfinished"]) if entity else 0
            in_minute = int(entity["in_minute"]) if entity and int(entity["minute"]) == minute else 0
            if in_minute >= self.per_minute:
                raise QuotaExceeded(
                    f"at most {self.per_minute} submissions per minute; try again shortly",
                    retry_after=60 - int(clock % 60),
                )
            if unfinished >= self.max_unfinished:
                unfinished = self.count_unfinished(client_id)  # self-healing: the counter never decrements
                if unfinished >= self.max_unfinished:
                    raise QuotaExceeded(
                        f"at most {self.max_unfinished} unfinished jobs per client; "
                        "wait for one to finish (or delete one)",
                        retry_after=UNFINISHED_RETRY_AFTER,
                    )
            new = {
                "PartitionKey": client_id,
                "RowKey": _ROW,
                "unfinished": unfinished + 1,
                "minute": minute,
                "in_minute": in_minute + 1,
            }
            try:
                if entity is None:
                    self._table.create_entity(new)
                else:
                    self._replace_if_unchanged(new, etag=entity.metadata["etag"])
                return
            except (ResourceModifiedError, ResourceExistsError):
                time.sleep(random.uniform(0.005, 0.05))  # lost the race: re-read and decide again
        raise QuotaExceeded("too many simultaneous submissions for this client", retry_after=1)

    def _replace_if_unchanged(self, entity: dict[str, Any], *, etag: str) -> None:
        """Write the row only if nobody wrote it since we read it (412 -> ResourceModifiedError)."""
        self._table.update_entity(
            entity, mode=UpdateMode.REPLACE, etag=etag, match_condition=MatchConditions.IfNotModified
        )

    def release(self, client_id: str) -> None:
        """Give back the slot of a submission that was not stored after all (best effort)."""
        for _ in range(_MAX_ATTEMPTS):
            try:
                entity = self._table.get_entity(client_id, _ROW)
            except ResourceNotFoundError:
                return
            entity["unfinished"] = max(0, int(entity["unfinished"]) - 1)
            try:
                self._replace_if_unchanged(entity, etag=entity.metadata["etag"])
                return
            except ResourceModifiedError:
                time.sleep(random.uniform(0.005, 0.05))
