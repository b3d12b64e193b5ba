"""The job event log: table ``jobevents``, one partition per job, oldest first.

``PartitionKey=request_id``, ``RowKey`` = 20-digit nanoseconds since the epoch + ``-`` + 12
random hex digits: time-ordered (as the service sorts), and unique even when two writers log at
the same instant. Across hosts the order is as good as their clocks. A rendered slice's log line
lives in the job row instead (``Job.slice_events``); ``events(request_id, job=row)`` merges both.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from typing import Any

from azure.data.tables import TableClient, UpdateMode

from dal.jobs.model import Job, JobEvent, to_utc, utcnow, validate_key
from dal.jobs.tables import BATCH, tables_exist
from dal.retry import REPEATABLE_POST


class JobEventLog:
    """The events of every job in one table (``table``: its client, ``name``: its name)."""

    def __init__(self, table: TableClient, name: str) -> None:
        self.table = table
        self.name = name

    def keys(self, request_id: str) -> list[str]:
        """The RowKeys of a job's events (to delete them)."""
        found = self.table.query_entities("PartitionKey eq @pk", parameters={"pk": request_id}, select=["RowKey"])
        with tables_exist(self.name):
            return [e["RowKey"] for e in found]

    def rows(self, request_id: str) -> list[dict[str, Any]]:
        """A job's event entities as stored (to copy them to another account)."""
        with tables_exist(self.name):
            return [dict(e) for e in self.table.query_entities("PartitionKey eq @pk", parameters={"pk": request_id})]

    def add_events(self, request_id: str, events: Iterable[dict[str, Any]]) -> None:
        """Append several events (keyword arguments of ``add_event`` each) in one transaction.

        All events of a job share its partition, so up to 100 go in one entity-group
        transaction: a controller dispatching 16 slices logs them in one write, not 16.
        ``stages`` (name -> seconds) is where the time of a step went; ``make bench`` sums it.

        Each key is made here, so the write is an upsert, safe to repeat after a dropped
        connection (``dal.retry``): a lost "done" line would never be written again.
        """
        validate_key("request_id", request_id)
        rows = [_event_entity(request_id, **e) for e in events]
        with tables_exist(self.name):
            if len(rows) == 1:
                self.table.upsert_entity(rows[0], mode=UpdateMode.REPLACE)  # a PUT: retried
                return
            for start in range(0, len(rows), BATCH):
                self.table.submit_transaction(
                    [("upsert", r, {"mode": UpdateMode.REPLACE}) for r in rows[start : start + BATCH]],
                    retry_on_methods=REPEATABLE_POST,  # the batch is a POST, but of upserts
                )

    def read(self, request_id: str, *, job: Job | None = None) -> list[JobEvent]:
        """The job's events, oldest first; with its ``job`` row, its slices' ``slice_done`` lines
        too (kept in the row, ``Job.slice_events``), merged in time order."""
        validate_key("request_id", request_id)
        with tables_exist(self.name):
            rows = list(self.table.query_entities("PartitionKey eq @pk", parameters={"pk": request_id}))
        found = []
        for e in rows:
            at = to_utc(e["at"])
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
                    stages=_stages(e.get("stages")),
                )
            )
        if job is not None and job.request_id == request_id and job.slice_events:
            found = sorted([*found, *job.slice_events], key=lambda event: event.at)  # stable: ties keep table order
        return found


def _event_entity(
    request_id: str,
    *,
    kind: str,
    actor: str,
    message: str,
    slice: int | None = None,
    seconds: float | None = None,
    stages: dict[str, float] | None = None,
) -> dict[str, Any]:
    if not kind:
        raise ValueError("event kind must not be empty")
    return {
        "PartitionKey": request_id,
        "RowKey": f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}",
        "kind": kind,
        "actor": actor,
        "message": message,
        "at": utcnow(),
        "slice": slice,
        "seconds": None if seconds is None else float(seconds),
        "stages": json.dumps({k: round(float(v), 4) for k, v in stages.items()}) if stages else None,
    }


def _stages(text: str | None) -> dict[str, float] | None:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None  # an unreadable breakdown is lost, never the event
    return {str(k): float(v) for k, v in value.items()} if isinstance(value, dict) else None
