"""Job state and the job event log, in two Azure Tables, so any process can answer "where is my job".

Design
------
Table ``jobs`` (prefixable for test isolation) holds two entities per job, both in the
partition ``client_id`` so that they are written and deleted together in one entity-group
transaction (atomic; a transaction must stay inside one partition):

- the *job row*: ``PartitionKey=client_id, RowKey=request_id``, every field of ``Job``;
  ``slices_done`` is stored as a compact range list (``"0-5,7,9-12"``);
- the *index entity*: ``RowKey="~" + inverted creation time + "~" + request_id``, where the
  inverted time is ``10**16 - 1 - microseconds since the epoch`` zero-padded to 16 digits.
  Tables return a partition sorted by RowKey, so index entities come newest first, and
  ``~`` sorts after every character allowed in a request id, so index entities never mix with
  job rows (``RowKey gt '~'`` selects exactly the index).

``list_for_client`` reads ``limit + 1`` index entities after the cursor (following the
service's own continuation tokens, since a page may be short or even empty), then point-reads
each job. The continuation token handed back is the last index RowKey returned (base64url
with a version tag): a keyset cursor, stateless on the server, stable while new jobs arrive
(they sort before the cursor, so a page is never repeated or skipped). The ``+ 1`` tells
whether another page exists, so the last page returns ``None`` instead of an empty next page.

``update`` is read-change-write with the row's ETag (``If-Match``): a writer that lost the
race gets 412 (``ResourceModifiedError``), waits a short jittered back-off, re-reads and
re-applies its change, so concurrent updaters never lose each other's changes.

Table ``jobevents`` is the event log (``dal.jobs.events``): one partition per job, oldest first.

A rendered slice's log line is not a row of ``jobevents``: the processor sends it in its
SliceResponse (``report``) and the controller stores it in the job row (``Job.slice_events``)
with the slice's progress, in the one ETag write it makes per slice anyway (an entity-group
transaction cannot span the two tables, and merging them would cost every query). So a slice
costs one table transaction, not two, and its line is written exactly when its progress is:
a redelivered response changes neither. ``events(request_id, job=row)`` merges both.
"""

from __future__ import annotations

import base64
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from functools import cached_property
from typing import Any, NamedTuple

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableTransactionError, UpdateMode

from dal.config import JOB_EVENTS_TABLE, JOBS_TABLE, StorageClients
from dal.errors import JobExistsError, JobNotFoundError, JobUpdateConflictError
from dal.jobs.events import JobEventLog
from dal.jobs.model import (
    INDEX_MARK,
    TERMINAL_STATUSES,
    Job,
    JobEvent,
    job_from_entity,
    job_from_entity_dict,
    job_to_entity,
    utcnow,
    validate_key,
)
from dal.jobs.tables import BATCH, check_table_name, raise_if_table_missing, tables_exist
from dal.names import prefixed
from dal.queues.message_fields import ID_PATTERN
from dal.retry import ensure_table

__all__ = [
    "JobStore",
    "JobUpdate",
]

_TOKEN_VERSION = "v1:"
_MAX_UPDATE_ATTEMPTS = 50


def _encode_token(row_key: str) -> str:
    return base64.urlsafe_b64encode((_TOKEN_VERSION + row_key).encode()).decode().rstrip("=")


def _decode_token(token: str) -> str:
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        text = ""
    row_key = text.removeprefix(_TOKEN_VERSION)
    if not text.startswith(_TOKEN_VERSION) or not re.fullmatch(rf"~\d{{16}}~{ID_PATTERN}", row_key):
        raise ValueError(f"not a continuation token of this job list: {token!r}")
    return row_key


class JobUpdate(NamedTuple):
    """What ``JobStore.update`` did: the job as stored now, and whether this call wrote it."""

    job: Job
    wrote: bool


class JobStore:
    """Jobs and their events; ``prefix`` isolates tests (table names become prefix + name)."""

    def __init__(self, storage: StorageClients, *, prefix: str = "") -> None:
        self.storage = storage
        self.jobs_table = prefixed(prefix, JOBS_TABLE)
        self.events_table = prefixed(prefix, JOB_EVENTS_TABLE)
        for name in (self.jobs_table, self.events_table):
            check_table_name(name)
        self._tables = f"{self.jobs_table}/{self.events_table}"

    @cached_property
    def _jobs(self) -> Any:
        return self.storage.table_service.get_table_client(self.jobs_table)

    @cached_property
    def _events(self) -> Any:
        return self.storage.table_service.get_table_client(self.events_table)

    @cached_property
    def event_log(self) -> JobEventLog:
        """The jobs' event log (``dal.jobs.events``)."""
        return JobEventLog(self._events, self.events_table)

    def ensure_tables(self) -> None:
        for name in (self.jobs_table, self.events_table):
            ensure_table(self.storage.table_service, name)

    def create(self, job: Job) -> Job:
        """Store a new job (job row and index entity, atomically); JobExistsError if it exists."""
        job.validate()
        entity = job_to_entity(job)
        index = {"PartitionKey": job.client_id, "RowKey": entity["index_key"], "request_id": job.request_id}
        try:
            with tables_exist(self._tables):
                results = self._jobs.submit_transaction([("create", entity), ("create", index)])
        except (TableTransactionError, ResourceExistsError) as exc:
            if getattr(exc, "error_code", None) == "EntityAlreadyExists" or isinstance(exc, ResourceExistsError):
                raise JobExistsError(f"job {job.client_id}/{job.request_id} already exists") from None
            raise
        return job_from_entity_dict(entity, etag=results[0].get("etag"))

    def get(self, client_id: str, request_id: str) -> Job | None:
        validate_key("client_id", client_id)
        validate_key("request_id", request_id)
        try:
            return job_from_entity(self._jobs.get_entity(client_id, request_id))
        except ResourceNotFoundError as exc:
            raise_if_table_missing(exc, self.jobs_table)
            return None

    def update(
        self, client_id: str, request_id: str, change: Callable[[Job], Job | None], *, current: Job | None = None
    ) -> JobUpdate:
        """Read, apply ``change``, write with If-Match; on 412 back off, re-read and re-apply.

        Returns ``JobUpdate(job, wrote)``: the job as stored now, and whether this call changed it
        (False when ``change`` said "nothing to write" on the last read), so a caller knows
        whether it is the one that made the transition (and should log its event).

        ``change`` may run several times, so it must be a pure function of the job it is given.
        It returns None for "nothing to write". The store sets ``updated_at``, and
        ``finished_at`` when the job first reaches a terminal status.

        ``current``: a job this caller just read or wrote (with its ETag). The first attempt
        applies ``change`` to it instead of reading the row again (one transaction less); if
        it is stale the write gets 412 and the loop re-reads as usual; "nothing to write" on it
        is confirmed on a fresh read, so it is never wrong. A write the server ran whose answer
        was lost is retried by the SDK and meets its own ETag (412): the read after a 412 finds
        the row equal to what this call wrote, so ``wrote`` stays true.
        """
        # ``fresh``: the row read after a 412, where the next attempt starts
        known, fresh = (current if current is not None and current.etag is not None else None), None
        for attempt in range(_MAX_UPDATE_ATTEMPTS):
            unverified = known is not None
            current, known, fresh = known or fresh or self.get(client_id, request_id), None, None
            if current is None:
                raise JobNotFoundError(f"job {client_id}/{request_id} does not exist")
            changed = change(current)
            if changed is None or changed == current:
                if unverified:
                    continue  # the caller's copy may be stale: decide on the stored row
                return JobUpdate(current, False)
            if (changed.client_id, changed.request_id, changed.created_at) != (
                current.client_id,
                current.request_id,
                current.created_at,
            ):
                raise ValueError("an update may not change client_id, request_id or created_at")
            now = utcnow()
            finished = changed.finished_at
            if finished is None and changed.status in TERMINAL_STATUSES:
                finished = now
            changed = replace(changed, updated_at=now, finished_at=finished)
            changed.validate()
            try:
                metadata = self._jobs.update_entity(
                    job_to_entity(changed),
                    mode=UpdateMode.REPLACE,
                    etag=current.etag,
                    match_condition=MatchConditions.IfNotModified,
                )
            except ResourceModifiedError:
                fresh = self.get(client_id, request_id)
                if fresh is not None and replace(fresh, etag=None) == replace(changed, etag=None):
                    return JobUpdate(fresh, True)  # ours, to the microsecond of updated_at
                time.sleep(random.uniform(0, min(0.5, 0.01 * 2**attempt)))
                continue
            except ResourceNotFoundError:
                raise JobNotFoundError(f"job {client_id}/{request_id} was deleted during the update") from None
            return JobUpdate(replace(changed, etag=metadata.get("etag")), True)
        raise JobUpdateConflictError(f"job {client_id}/{request_id}: update lost the race {_MAX_UPDATE_ATTEMPTS} times")

    def unfinished_ahead(self, client_id: str, request_id: str) -> tuple[Job | None, int]:
        """The job as stored (None if it is not) and how many of the same client's unfinished
        jobs are ahead of it (created earlier; all of them when the job has no row yet).

        One query in the client's partition that returns this job's row and the unfinished
        ones, so a caller that needs the job anyway (the controller) learns the count for free:
        it is the job's lane in fair scheduling (``dal.queues.lanes``).
        """
        validate_key("client_id", client_id)
        validate_key("request_id", request_id)
        terminal = " and ".join(f"status ne '{status.value}'" for status in sorted(TERMINAL_STATUSES))
        rows = self._jobs.query_entities(
            f"PartitionKey eq @pk and RowKey lt @mark and (RowKey eq @rid or ({terminal}))",
            parameters={"pk": client_id, "mark": INDEX_MARK, "rid": request_id},
        )
        with tables_exist(self._tables):
            jobs = [job_from_entity(row) for row in rows]
        mine = next((job for job in jobs if job.request_id == request_id), None)
        others = [job for job in jobs if job.request_id != request_id and job.status not in TERMINAL_STATUSES]
        if mine is None:
            return None, len(others)
        ahead = [job for job in others if (job.created_at, job.request_id) < (mine.created_at, mine.request_id)]
        return mine, len(ahead)

    def list_for_client(
        self, client_id: str, *, limit: int = 20, continuation: str | None = None
    ) -> tuple[list[Job], str | None]:
        """The client's jobs, newest first, ``limit`` at a time; pass the token back for the next page."""
        validate_key("client_id", client_id)
        if not 1 <= limit <= 1000:
            raise ValueError(f"limit must be 1..1000, got {limit}")
        after = _decode_token(continuation) if continuation else INDEX_MARK
        query = self._jobs.query_entities(
            "PartitionKey eq @pk and RowKey gt @after",
            parameters={"pk": client_id, "after": after},
            select=["RowKey", "request_id"],
            results_per_page=limit + 1,
        )
        with tables_exist(self._tables):
            index = _take(query, limit + 1)
        page, more = index[:limit], len(index) > limit
        jobs = [job for entry in page if (job := self.get(client_id, entry["request_id"])) is not None]
        token = _encode_token(page[-1]["RowKey"]) if more else None
        return jobs, token

    def delete(self, client_id: str, request_id: str) -> None:
        """Remove the job, its index entity and its events; deleting a missing job is a no-op."""
        validate_key("client_id", client_id)
        validate_key("request_id", request_id)
        # Events first: if we die half-way the job still exists, so a retry finds everything.
        keys = self.event_log.keys(request_id)
        for start in range(0, len(keys), BATCH):
            _delete_together(self._events, [(request_id, k) for k in keys[start : start + BATCH]])
        try:
            entity = self._jobs.get_entity(client_id, request_id)
        except ResourceNotFoundError:
            return
        _delete_together(self._jobs, [(client_id, request_id), (client_id, entity["index_key"])])

    def copy_to(self, other: JobStore, client_id: str, request_id: str) -> bool:
        """Copy a job (its events, then its row and index entity) into ``other``, another account.

        The failover syphon's move of a job row (``dal.operations.syphon``). Idempotent: events keep their
        keys (a repeat overwrites them), a row ``other`` already has is left alone (it may have
        moved on). True when the row was copied; False when ``other`` had it or this store has not.
        """
        validate_key("client_id", client_id)
        validate_key("request_id", request_id)
        try:
            entity = self._jobs.get_entity(client_id, request_id)
        except ResourceNotFoundError as exc:
            raise_if_table_missing(exc, self.jobs_table)
            return False
        events = self.event_log.rows(request_id)
        for start in range(0, len(events), BATCH):
            other.event_log.table.submit_transaction([("upsert", e) for e in events[start : start + BATCH]])
        index = {"PartitionKey": client_id, "RowKey": entity["index_key"], "request_id": request_id}
        try:
            other._jobs.submit_transaction([("create", dict(entity)), ("create", index)])
        except (TableTransactionError, ResourceExistsError) as exc:
            if getattr(exc, "error_code", None) == "EntityAlreadyExists" or isinstance(exc, ResourceExistsError):
                return False
            raise
        return True

    def add_event(
        self,
        request_id: str,
        kind: str,
        *,
        actor: str,
        message: str,
        slice: int | None = None,
        seconds: float | None = None,
        stages: dict[str, float] | None = None,
    ) -> None:
        """Append one event to the job's log (no read, one write)."""
        self.add_events(
            request_id, [dict(kind=kind, actor=actor, message=message, slice=slice, seconds=seconds, stages=stages)]
        )

    def add_events(self, request_id: str, events: Iterable[dict[str, Any]]) -> None:
        """Append several events (keyword arguments of ``add_event`` each) in one transaction, up
        to 100 (a job's events share its partition): an upsert, safe to repeat (``dal.jobs.events``)."""
        self.event_log.add_events(request_id, events)

    def events(self, request_id: str, *, job: Job | None = None) -> list[JobEvent]:
        """The job's events, oldest first; with its ``job`` row, its slices' ``slice_done`` lines
        too (kept in the row, ``Job.slice_events``), merged in time order."""
        return self.event_log.read(request_id, job=job)


def _take(items: Iterator[Any] | Iterable[Any], count: int) -> list[Any]:
    taken = []
    for item in items:
        taken.append(item)
        if len(taken) >= count:
            break
    return taken


def _delete_together(table: Any, keys: list[tuple[str, str]]) -> None:
    """Delete entities of one partition in one transaction. A concurrent deleter (the web's
    immediate delete and the responder's queued cleanup run together by design) may have taken
    some first: the transaction then fails as a whole with ResourceNotFound, and the rest is
    deleted one by one (``delete_entity`` ignores an entity that is already gone)."""
    try:
        table.submit_transaction([("delete", {"PartitionKey": pk, "RowKey": rk}) for pk, rk in keys])
    except TableTransactionError as exc:
        if exc.error_code != "ResourceNotFound":  # type: ignore[attr-defined]  # the SDK documents and sets it, never declares it
            raise
        for pk, rk in keys:
            table.delete_entity(pk, rk)
