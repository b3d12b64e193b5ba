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

Table ``jobevents``: ``PartitionKey=request_id``, ``RowKey`` = 20-digit nanoseconds since the
epoch + ``-`` + 12 random hex digits. Time-ordered (oldest first, as the service sorts), and
unique even when two writers log at the same instant. Across hosts the order is as good as
their clocks.
"""

from __future__ import annotations

import base64
import contextlib
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Literal, get_args

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableTransactionError, UpdateMode

from dal.config import JOB_EVENTS_TABLE, JOBS_TABLE, StorageClients
from dal.errors import PhotoMosaicsError, StorageConfigurationError

JobStatus = Literal["queued", "slicing", "rendering", "stitching", "done", "failed"]
JOB_STATUSES: tuple[str, ...] = get_args(JobStatus)
TERMINAL_STATUSES = frozenset({"done", "failed"})

_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TABLE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{2,62}$")
_INDEX_MARK = "~"
_INVERT_FROM = 10**16 - 1
_TOKEN_VERSION = "v1:"
_MAX_UPDATE_ATTEMPTS = 50
_BATCH = 100  # operations per entity-group transaction


class JobNotFoundError(PhotoMosaicsError, LookupError):
    """The job does not exist (never created, or deleted)."""


class JobExistsError(PhotoMosaicsError):
    """A job with this client id and request id already exists."""


class JobUpdateConflictError(PhotoMosaicsError):
    """An update lost the ETag race more times than is reasonable; the table is too contended."""


def validate_key(what: str, value: str) -> str:
    """Reject ids that are unsafe as table keys (Azure forbids / \\ # ? and control characters)."""
    if not isinstance(value, str) or not _KEY.match(value):
        raise ValueError(f"{what} must be 1..64 characters of A-Z a-z 0-9 _ -, got {value!r}")
    return value


def encode_slices(slices: Iterable[int]) -> str:
    """A set of slice numbers as a compact range list: {0,1,2,3,7} -> "0-3,7"."""
    parts: list[str] = []
    ordered = sorted(set(slices))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def decode_slices(text: str | None) -> frozenset[int]:
    """The inverse of ``encode_slices``."""
    result: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        result.update(range(int(first), int(last or first) + 1))
    return frozenset(result)


def _utc(value: datetime | None) -> datetime | None:
    """A plain aware UTC datetime (the SDK returns a subclass; naive means UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return datetime(*value.timetuple()[:6], value.microsecond, tzinfo=UTC)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True)
class Job:
    """One mosaic job as stored in the ``jobs`` table. Change it with ``dataclasses.replace``."""

    client_id: str
    request_id: str
    status: str
    library: str
    tile_size: int
    slices: int
    tiles_across: int
    tiles_down: int
    output_width: int
    output_height: int
    input_name: str
    output_name: str | None = None
    slices_done: frozenset[int] = field(default_factory=frozenset)
    error: str | None = None
    created_at: datetime = field(default_factory=_now)
    updated_at: datetime = field(default_factory=_now)
    finished_at: datetime | None = None
    etag: str | None = None

    @property
    def progress(self) -> float:
        """Fraction of slices rendered, 0.0..1.0."""
        return len(self.slices_done) / self.slices if self.slices else 0.0

    def validate(self) -> None:
        """Raise ValueError when the job could not be stored or makes no sense."""
        validate_key("client_id", self.client_id)
        validate_key("request_id", self.request_id)
        if self.status not in JOB_STATUSES:
            raise ValueError(f"status must be one of {', '.join(JOB_STATUSES)}, got {self.status!r}")
        if not 1 <= self.tile_size <= 64:
            raise ValueError(f"tile_size must be 1..64, got {self.tile_size}")
        if self.slices < 1:
            raise ValueError(f"slices must be at least 1, got {self.slices}")
        for name in ("tiles_across", "tiles_down", "output_width", "output_height"):
            value = getattr(self, name)
            if not 0 <= value < 2**31:
                raise ValueError(f"{name} must be 0..2**31-1, got {value}")
        outside = sorted(s for s in self.slices_done if not 0 <= s < self.slices)
        if outside:
            raise ValueError(f"slices_done holds {outside}, outside 0..{self.slices - 1}")


@dataclass(frozen=True, kw_only=True)
class JobEvent:
    """One line of a job's history: who did what, when, and how long it took."""

    request_id: str
    kind: str
    actor: str
    message: str
    at: datetime
    slice: int | None = None
    seconds: float | None = None


def _index_key(job: Job) -> str:
    created = _utc(job.created_at)
    assert created is not None
    micros = int((created - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1_000_000)
    return f"{_INDEX_MARK}{_INVERT_FROM - micros:016d}{_INDEX_MARK}{job.request_id}"


def _to_entity(job: Job) -> dict[str, Any]:
    return {
        "PartitionKey": job.client_id,
        "RowKey": job.request_id,
        "status": job.status,
        "library": job.library,
        "tile_size": job.tile_size,
        "slices": job.slices,
        "tiles_across": job.tiles_across,
        "tiles_down": job.tiles_down,
        "output_width": job.output_width,
        "output_height": job.output_height,
        "input_name": job.input_name,
        "output_name": job.output_name,
        "slices_done": encode_slices(job.slices_done),
        "error": job.error,
        "created_at": _utc(job.created_at),
        "updated_at": _utc(job.updated_at),
        "finished_at": _utc(job.finished_at),
        "index_key": _index_key(job),
    }


def _from_entity(entity: Any) -> Job:
    return _from_entity_dict(entity, etag=entity.metadata.get("etag"))


def _from_entity_dict(entity: Any, *, etag: str | None) -> Job:
    created = _utc(entity["created_at"])
    updated = _utc(entity["updated_at"])
    assert created is not None and updated is not None
    return Job(
        client_id=entity["PartitionKey"],
        request_id=entity["RowKey"],
        status=entity["status"],
        library=entity["library"],
        tile_size=int(entity["tile_size"]),
        slices=int(entity["slices"]),
        tiles_across=int(entity["tiles_across"]),
        tiles_down=int(entity["tiles_down"]),
        output_width=int(entity["output_width"]),
        output_height=int(entity["output_height"]),
        input_name=entity["input_name"],
        output_name=entity.get("output_name"),
        slices_done=decode_slices(entity.get("slices_done")),
        error=entity.get("error"),
        created_at=created,
        updated_at=updated,
        finished_at=_utc(entity.get("finished_at")),
        etag=etag,
    )


def _encode_token(row_key: str) -> str:
    return base64.urlsafe_b64encode((_TOKEN_VERSION + row_key).encode()).decode().rstrip("=")


def _decode_token(token: str) -> str:
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        text = ""
    row_key = text.removeprefix(_TOKEN_VERSION)
    if not text.startswith(_TOKEN_VERSION) or not re.fullmatch(r"~\d{16}~[A-Za-z0-9_-]{1,64}", row_key):
        raise ValueError(f"not a continuation token of this job list: {token!r}")
    return row_key


class JobStore:
    """Jobs and their events; ``prefix`` isolates tests (table names become prefix + name)."""

    def __init__(self, storage: StorageClients, *, prefix: str = "") -> None:
        self.storage = storage
        self.jobs_table = f"{prefix}{JOBS_TABLE}"
        self.events_table = f"{prefix}{JOB_EVENTS_TABLE}"
        for name in (self.jobs_table, self.events_table):
            if not _TABLE_NAME.match(name):
                raise ValueError(f"invalid table name {name!r}: letters and digits, starting with a letter")

    @cached_property
    def _jobs(self) -> Any:
        return self.storage.table_service.get_table_client(self.jobs_table)

    @cached_property
    def _events(self) -> Any:
        return self.storage.table_service.get_table_client(self.events_table)

    def ensure_tables(self) -> None:
        for name in (self.jobs_table, self.events_table):
            self.storage.table_service.create_table_if_not_exists(name)

    def _raise_if_table_missing(self, exc: Exception, table: str | None = None) -> None:
        """A missing table is a deployment mistake, not a missing job: say so."""
        code = getattr(exc, "error_code", None)
        if str(getattr(code, "value", code)) == "TableNotFound" or (code is None and "TableNotFound" in str(exc)):
            tables = table or f"{self.jobs_table}/{self.events_table}"
            raise StorageConfigurationError(
                f"table {tables!r} does not exist: call JobStore.ensure_tables() at start-up"
            ) from None

    @contextlib.contextmanager
    def _tables_exist(self) -> Iterator[None]:
        try:
            yield
        except (ResourceNotFoundError, TableTransactionError) as exc:
            self._raise_if_table_missing(exc)
            raise

    def create(self, job: Job) -> Job:
        """Store a new job (job row and index entity, atomically); JobExistsError if it exists."""
        job.validate()
        entity = _to_entity(job)
        index = {"PartitionKey": job.client_id, "RowKey": entity["index_key"], "request_id": job.request_id}
        try:
            with self._tables_exist():
                results = self._jobs.submit_transaction([("create", entity), ("create", index)])
        except (TableTransactionError, ResourceExistsError) as exc:
            if getattr(exc, "error_code", None) == "EntityAlreadyExists" or isinstance(exc, ResourceExistsError):
                raise JobExistsError(f"job {job.client_id}/{job.request_id} already exists") from None
            self._raise_if_table_missing(exc, self.jobs_table)
            raise
        return _from_entity_dict(entity, etag=results[0].get("etag"))

    def get(self, client_id: str, request_id: str) -> Job | None:
        validate_key("client_id", client_id)
        validate_key("request_id", request_id)
        try:
            return _from_entity(self._jobs.get_entity(client_id, request_id))
        except ResourceNotFoundError as exc:
            self._raise_if_table_missing(exc, self.jobs_table)
            return None

    def update(self, client_id: str, request_id: str, change: Callable[[Job], Job | None]) -> Job:
        """Read, apply ``change``, write with If-Match; on 412 back off, re-read and re-apply.

        ``change`` may run several times, so it must be a pure function of the job it is given.
        It returns None for "nothing to write". The store sets ``updated_at``, and
        ``finished_at`` when the job first reaches a terminal status.
        """
        for attempt in range(_MAX_UPDATE_ATTEMPTS):
            current = self.get(client_id, request_id)
            if current is None:
                raise JobNotFoundError(f"job {client_id}/{request_id} does not exist")
            changed = change(current)
            if changed is None or changed == current:
                return current
            if (changed.client_id, changed.request_id, changed.created_at) != (
                current.client_id,
                current.request_id,
                current.created_at,
            ):
                raise ValueError("an update may not change client_id, request_id or created_at")
            now = _now()
            finished = changed.finished_at
            if finished is None and changed.status in TERMINAL_STATUSES:
                finished = now
            changed = replace(changed, updated_at=now, finished_at=finished)
            changed.validate()
            try:
                metadata = self._jobs.update_entity(
                    _to_entity(changed),
                    mode=UpdateMode.REPLACE,
                    etag=current.etag,
                    match_condition=MatchConditions.IfNotModified,
                )
            except ResourceModifiedError:
                time.sleep(random.uniform(0, min(0.5, 0.01 * 2**attempt)))
                continue
            except ResourceNotFoundError:
                raise JobNotFoundError(f"job {client_id}/{request_id} was deleted during the update") from None
            return replace(changed, etag=metadata.get("etag"))
        raise JobUpdateConflictError(
            f"job {client_id}/{request_id}: update lost the race {_MAX_UPDATE_ATTEMPTS} times"
        )

    def list_for_client(
        self, client_id: str, *, limit: int = 20, continuation: str | None = None
    ) -> tuple[list[Job], str | None]:
        """The client's jobs, newest first, ``limit`` at a time; pass the token back for the next page."""
        validate_key("client_id", client_id)
        if not 1 <= limit <= 1000:
            raise ValueError(f"limit must be 1..1000, got {limit}")
        after = _decode_token(continuation) if continuation else _INDEX_MARK
        query = self._jobs.query_entities(
            "PartitionKey eq @pk and RowKey gt @after",
            parameters={"pk": client_id, "after": after},
            select=["RowKey", "request_id"],
            results_per_page=limit + 1,
        )
        with self._tables_exist():
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
        found = self._events.query_entities("PartitionKey eq @pk", parameters={"pk": request_id}, select=["RowKey"])
        with self._tables_exist():
            keys = [e["RowKey"] for e in found]
        for start in range(0, len(keys), _BATCH):
            ops = [("delete", {"PartitionKey": request_id, "RowKey": k}) for k in keys[start : start + _BATCH]]
            self._events.submit_transaction(ops)
        try:
            entity = self._jobs.get_entity(client_id, request_id)
        except ResourceNotFoundError:
            return
        self._jobs.submit_transaction(
            [
                ("delete", {"PartitionKey": client_id, "RowKey": request_id}),
                ("delete", {"PartitionKey": client_id, "RowKey": entity["index_key"]}),
            ]
        )

    def add_event(
        self,
        request_id: str,
        kind: str,
        *,
        actor: str,
        message: str,
        slice: int | None = None,
        seconds: float | None = None,
    ) -> None:
        """Append one event to the job's log (no read, one write)."""
        validate_key("request_id", request_id)
        if not kind:
            raise ValueError("event kind must not be empty")
        event = {
            "PartitionKey": request_id,
            "RowKey": f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}",
            "kind": kind,
            "actor": actor,
            "message": message,
            "at": _now(),
            "slice": slice,
            "seconds": None if seconds is None else float(seconds),
        }
        with self._tables_exist():
            self._events.create_entity(event)

    def events(self, request_id: str) -> list[JobEvent]:
        """The job's events, oldest first."""
        validate_key("request_id", request_id)
        with self._tables_exist():
            rows = list(self._events.query_entities("PartitionKey eq @pk", parameters={"pk": request_id}))
        found = []
        for e in rows:
            at = _utc(e["at"])
            assert at is not None
            found.append(
                JobEvent(
                    request_id=request_id,
                    kind=e["kind"],
                    actor=e.get("actor", ""),
                    message=e.get("message", ""),
                    at=at,
                    slice=e.get("slice"),
                    seconds=e.get("seconds"),
                )
            )
        return found


def _take(items: Iterator[Any] | Iterable[Any], count: int) -> list[Any]:
    taken = []
    for item in items:
        taken.append(item)
        if len(taken) >= count:
            break
    return taken
