"""A job and a job event, and how they are stored as Azure Table entities.

``slices_done`` is stored as a compact range list ("0-5,7,9-12": at most a few hundred
characters for 64 slices). ``slice_events``, the rendered slices' log lines (``slice_done``),
live in the job row too, as one JSON property written with the slice's progress (one write per
slice, not two; ``JobStore.events`` merges them into the job's event log); past
``MAX_SLICE_LOG_CHARS`` the oldest lines lose their step timings first, so a row never
outgrows the service's 64 KiB per property. Datetimes are aware UTC everywhere. The index key sorts a
client's jobs newest first: see ``dal.jobs.store`` for the table design.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from dal.queues.message_fields import ID_PATTERN, MAX_ID_LENGTH
from dal.queues.messages import ImageRequestMessage
from mosaic.grid import Grid
from mosaic.limits import MAX_TILE_SIZE


class JobStatus(StrEnum):
    """A job's status. A ``str``: equal to its value, stored and sent in JSON as that text."""

    QUEUED = "queued"
    SLICING = "slicing"
    RENDERING = "rendering"
    STITCHING = "stitching"
    DONE = "done"
    FAILED = "failed"


JOB_STATUSES: tuple[str, ...] = tuple(status.value for status in JobStatus)
TERMINAL_STATUSES = frozenset({JobStatus.DONE, JobStatus.FAILED})

_KEY = re.compile(rf"^{ID_PATTERN}$")
# Index RowKeys start with "~", which sorts after every character a request id may hold.
INDEX_MARK = "~"
_INVERT_FROM = 10**16 - 1
# A table string property holds 64 KiB (32 K UTF-16 characters); the slice log stays well under.
MAX_SLICE_LOG_CHARS = 24_000


def library_name(uri: str) -> str:
    """The container name of a library URI (``http://host/account/flowers`` -> ``flowers``)."""
    return unquote(PurePosixPath(urlsplit(uri).path).name)


def validate_key(what: str, value: str) -> str:
    """Reject ids that are unsafe as table keys (Azure forbids / \\ # ? and control characters)."""
    if not isinstance(value, str) or not _KEY.match(value):
        raise ValueError(f"{what} must be 1..{MAX_ID_LENGTH} characters of A-Z a-z 0-9 _ -, got {value!r}")
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


def to_utc(value: datetime | None) -> datetime | None:
    """A plain aware UTC datetime (the SDK returns a subclass; naive means UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return datetime(*value.timetuple()[:6], value.microsecond, tzinfo=UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True)
class Job:
    """One mosaic job as stored in the ``jobs`` table. Change it with ``dataclasses.replace``."""

    client_id: str
    request_id: str
    status: JobStatus
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
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)
    finished_at: datetime | None = None
    # The rendered slices' log lines (kind ``slice_done``), recorded with their progress.
    slice_events: tuple[JobEvent, ...] = ()
    # The stitch claim: the id of the SliceResponse message whose handler stitches (stable across
    # its redeliveries), set by the update that completes ``slices_done`` (workers.controller.controller).
    stitcher: str | None = None
    # The library version the job renders with (ImageRequestMessage.library_version); None: as it is.
    library_version: str | None = None
    # The job's cell sizes (ImageRequestMessage.cell_sizes); None: one size. Its bands align to the largest.
    cell_sizes: tuple[int, ...] | None = None
    etag: str | None = None

    @classmethod
    def for_request(
        cls,
        message: ImageRequestMessage,
        *,
        status: JobStatus,
        input_name: str,
        grid: Grid | None = None,
        error: str | None = None,
        library: str | None = None,
    ) -> Job:
        """The job row of an image request: the one constructor of a job from its message.

        The web app calls it for the jobs it submits, the controller and ``fail_job`` for a job
        a CLI producer sent without the web app. ``grid`` is the planned layout; without one
        (the request failed before planning) the sizes are 0. ``library``: the name the client
        chose (default: the library's container name from the message's URI).
        """
        return cls(
            client_id=message.client_id,
            request_id=message.request_id,
            status=status,
            error=error,
            library=library if library is not None else library_name(message.image_library_uri),
            tile_size=message.tile_size,
            slices=message.slices,
            tiles_across=grid.tiles_across if grid else 0,
            tiles_down=grid.tiles_down if grid else 0,
            output_width=grid.output_width if grid else 0,
            output_height=grid.output_height if grid else 0,
            input_name=input_name,
            library_version=message.library_version,
            cell_sizes=message.cell_sizes,
        )

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
        if not 1 <= self.tile_size <= MAX_TILE_SIZE:
            raise ValueError(f"tile_size must be 1..{MAX_TILE_SIZE}, got {self.tile_size}")
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
    stages: dict[str, float] | None = None  # where ``seconds`` went, step by step (``make bench``)


def index_key(job: Job) -> str:
    """The RowKey of the job's index entity: newest first within the client's partition."""
    created = to_utc(job.created_at)
    assert created is not None
    micros = (created - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return f"{INDEX_MARK}{_INVERT_FROM - micros:016d}{INDEX_MARK}{job.request_id}"


def job_to_entity(job: Job) -> dict[str, Any]:
    return {
        "PartitionKey": job.client_id,
        "RowKey": job.request_id,
        "status": str(job.status),  # plain text in the table, whatever the enum
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
        "created_at": to_utc(job.created_at),
        "updated_at": to_utc(job.updated_at),
        "finished_at": to_utc(job.finished_at),
        "index_key": index_key(job),
        "slice_events": encode_slice_events(job.slice_events),
        "stitcher": job.stitcher,
        "library_version": job.library_version,
        "cell_sizes": None if job.cell_sizes is None else ",".join(map(str, job.cell_sizes)),
    }


def _event_dict(event: JobEvent, *, stages: bool) -> dict[str, Any]:
    at = to_utc(event.at)
    assert at is not None
    row: dict[str, Any] = {
        "slice": event.slice,
        "actor": event.actor,
        "message": event.message,
        "at": at.isoformat(),
        "seconds": event.seconds,
    }
    if stages and event.stages:
        row["stages"] = event.stages
    return row


def encode_slice_events(events: tuple[JobEvent, ...]) -> str | None:
    """The slice log as one JSON text (None when empty); bounded by ``MAX_SLICE_LOG_CHARS``:
    the oldest lines drop their step timings first, then messages shrink, then the oldest go."""
    if not events:
        return None
    keep = len(events)
    while True:
        rows = [_event_dict(e, stages=i >= len(events) - keep) for i, e in enumerate(events)]
        text = json.dumps(rows, separators=(",", ":"))
        if len(text) <= MAX_SLICE_LOG_CHARS:
            return text
        if keep == 0:  # hundreds of slices: short messages, and the newest lines that fit
            for row in rows:
                row["message"] = row["message"][:60]
            while len(text := json.dumps(rows, separators=(",", ":"))) > MAX_SLICE_LOG_CHARS:
                rows = rows[len(rows) // 4 + 1 :]
            return text
        keep = keep // 2 if keep > 1 else 0


def slice_event(request_id: str, row: Any) -> JobEvent:
    """A ``slice_done`` line from its dict form: a row of the stored slice log, or a processor's
    ``report`` (``dal.queues.messages``) with its ``slice`` added."""
    return JobEvent(
        request_id=request_id,
        kind="slice_done",
        actor=str(row["actor"]),
        message=str(row["message"]),
        at=to_utc(datetime.fromisoformat(row["at"])) or utcnow(),
        slice=row.get("slice"),
        seconds=row.get("seconds"),
        stages={str(k): float(v) for k, v in row["stages"].items()} if row.get("stages") else None,
    )


def decode_slice_events(request_id: str, text: str | None) -> tuple[JobEvent, ...]:
    """The inverse of ``encode_slice_events``; an unreadable log is an empty one (the job is not
    lost over its log)."""
    try:
        return tuple(slice_event(request_id, row) for row in (json.loads(text) if text else []))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ()


def job_from_entity(entity: Any) -> Job:
    return job_from_entity_dict(entity, etag=entity.metadata.get("etag"))


def _cell_sizes(text: object) -> tuple[int, ...] | None:
    """A stored ``cell_sizes`` ("1,2,4") as the tuple; None when absent (one size)."""
    return tuple(int(part) for part in text.split(",")) if isinstance(text, str) and text else None


def job_from_entity_dict(entity: Any, *, etag: str | None) -> Job:
    created = to_utc(entity["created_at"])
    updated = to_utc(entity["updated_at"])
    assert created is not None and updated is not None
    return Job(
        client_id=entity["PartitionKey"],
        request_id=entity["RowKey"],
        status=JobStatus(entity["status"]) if entity["status"] in JOB_STATUSES else entity["status"],
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
        finished_at=to_utc(entity.get("finished_at")),
        slice_events=decode_slice_events(entity["RowKey"], entity.get("slice_events")),
        stitcher=entity.get("stitcher"),
        library_version=entity.get("library_version"),
        cell_sizes=_cell_sizes(entity.get("cell_sizes")),
        etag=etag,
    )
