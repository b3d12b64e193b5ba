"""Counting storage transactions: what a job and an idle hour cost.

Azure Storage bills per transaction (every REST call, retries included), so the cost of a
design is a number you can count. ``TransactionCounter`` is a ``response_hook`` for
``StorageClients(response_hook=...)``: the SDK calls it once per HTTP attempt, and it
counts the request under an operation name (``queue GetMessages``, ``blob PutBlob``,
``table UpdateEntity`` ...) derived from the service (the SDK's User-Agent), the HTTP method
and the URL (``comp=``, ``restype=``, path shape). Thread-safe: one counter serves every
thread of a process.

A role process counts when ``PHOTOMOSAICS_COUNT_TRANSACTIONS`` names a folder: at exit it
writes ``<folder>/<role>-<pid>.json`` (``exit_role`` calls ``dump_installed_counter``; an
``atexit`` hook covers normal interpreter exits).

Retries are counted too: ``record_retry`` is the retry policies' callback (``dal.retry``), so
a snapshot says how many attempts were retries, why (``throttled``, ``server``,
``connection``) and how long the process waited between them.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = [
    "COUNT_ENV",
    "TransactionCounter",
    "counter_from_env",
    "dump_installed_counter",
    "merge_counts",
    "operation_name",
]

COUNT_ENV = "PHOTOMOSAICS_COUNT_TRANSACTIONS"

_ENTITY = re.compile(r"\(.*\)$")  # table(PartitionKey='a',RowKey='b') or table()


def _service(user_agent: str) -> str:
    agent = user_agent.lower()
    for marker, service in (("storage-queue", "queue"), ("storage-blob", "blob"), ("data-tables", "table")):
        if marker in agent:
            return service
    return "other"


def _queue_operation(method: str, segments: list[str], query: dict[str, list[str]]) -> str:
    comp = query.get("comp", [""])[0]
    if comp == "list":
        return "ListQueues"
    if comp == "metadata":
        return "SetQueueMetadata" if method == "PUT" else "GetQueueMetadata"
    if len(segments) >= 3 and segments[2] == "messages":
        if len(segments) >= 4:
            return {"DELETE": "DeleteMessage", "PUT": "UpdateMessage"}.get(method, f"{method} message")
        if method == "GET":
            return "PeekMessages" if query.get("peekonly", [""])[0].lower() == "true" else "GetMessages"
        return {"POST": "PutMessage", "DELETE": "ClearMessages"}.get(method, f"{method} messages")
    return {"PUT": "CreateQueue", "DELETE": "DeleteQueue"}.get(method, f"{method} queue")


def _blob_operation(method: str, segments: list[str], query: dict[str, list[str]], headers: Any) -> str:
    comp = query.get("comp", [""])[0]
    restype = query.get("restype", [""])[0]
    if restype == "container":
        if comp == "list":
            return "ListBlobs"
        if comp == "metadata":
            return "SetContainerMetadata" if method == "PUT" else "GetContainerMetadata"
        if comp:
            return f"{method} container comp={comp}"
        return {"PUT": "CreateContainer", "DELETE": "DeleteContainer"}.get(method, "GetContainerProperties")
    if len(segments) <= 1:
        return "ListContainers" if comp == "list" else f"{method} account comp={comp or '-'}"
    if comp:
        named = {
            ("PUT", "block"): "PutBlock",
            ("PUT", "blocklist"): "PutBlockList",
            ("PUT", "metadata"): "SetBlobMetadata",
            ("GET", "metadata"): "GetBlobMetadata",
            ("PUT", "properties"): "SetBlobProperties",
            ("GET", "blocklist"): "GetBlockList",
        }
        return named.get((method, comp), f"{method} blob comp={comp}")
    if method == "PUT":
        return "CopyBlob" if "x-ms-copy-source" in headers else "PutBlob"
    return {"GET": "GetBlob", "HEAD": "GetBlobProperties", "DELETE": "DeleteBlob"}.get(method, f"{method} blob")


def _table_operation(method: str, segments: list[str], headers: Any) -> str:
    resource = segments[1] if len(segments) > 1 else ""
    if resource == "$batch":
        return "EntityBatch"
    if resource == "Tables" or resource.startswith("Tables("):
        return {"POST": "CreateTable", "GET": "QueryTables", "DELETE": "DeleteTable"}.get(method, f"{method} Tables")
    single = bool(_ENTITY.search(resource)) and not resource.endswith("()")
    if method == "GET":
        return "GetEntity" if single else "QueryEntities"
    if method == "POST":
        return "InsertEntity"
    conditional = "If-Match" in headers
    if method == "PUT":
        return "UpdateEntity" if conditional else "UpsertEntity"
    if method in ("MERGE", "PATCH"):
        return "MergeEntity" if conditional else "UpsertMergeEntity"
    if method == "DELETE":
        return "DeleteEntity"
    return f"{method} entity"


def operation_name(request: Any) -> str:
    """``"<service> <Operation>"`` for an ``azure.core`` HTTP request."""
    headers = request.headers
    service = _service(str(headers.get("User-Agent", "")))
    parts = urlsplit(request.url)
    segments = [unquote(s) for s in parts.path.split("/") if s]
    # Path-style URLs (Azurite, custom endpoints) start with the account; host-style do not.
    host_style = parts.hostname is not None and parts.hostname.count(".") >= 3 and not parts.hostname[0].isdigit()
    if host_style:
        segments = ["<account>", *segments]
    query = parse_qs(parts.query, keep_blank_values=True)
    method = request.method.upper()
    if service == "queue":
        return f"queue {_queue_operation(method, segments, query)}"
    if service == "blob":
        return f"blob {_blob_operation(method, segments, query, headers)}"
    if service == "table":
        return f"table {_table_operation(method, segments, headers)}"
    return f"other {method}"


class TransactionCounter:
    """Counts storage requests by operation; pass it as ``StorageClients(response_hook=...)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._failures: Counter[str] = Counter()
        self._retries: Counter[str] = Counter()
        self._backoff_seconds = 0.0

    def record_retry(self, kind: str, seconds: float) -> None:
        """A retry policy's callback (``dal.retry``): one retry of ``kind`` after ``seconds``."""
        with self._lock:
            self._retries[kind] += 1
            self._backoff_seconds += seconds

    def retries(self) -> dict[str, int]:
        """Retries by cause: ``throttled`` (503/500 ServerBusy, OperationTimedOut), ``server``, ``connection``."""
        with self._lock:
            return dict(self._retries.most_common())

    def backoff_seconds(self) -> float:
        """Seconds spent (or about to be spent) waiting between attempts."""
        with self._lock:
            return self._backoff_seconds

    def __call__(self, response: Any) -> None:
        request = response.http_request
        status = getattr(response.http_response, "status_code", 0)
        name = operation_name(request)
        with self._lock:
            self._counts[name] += 1
            if status >= 400:
                self._failures[f"{name} {status}"] += 1

    def counts(self) -> dict[str, int]:
        """Requests per operation, most frequent first."""
        with self._lock:
            return dict(self._counts.most_common())

    def failures(self) -> dict[str, int]:
        """Requests answered with 4xx/5xx, per operation and status (412s are ETag races)."""
        with self._lock:
            return dict(self._failures.most_common())

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._failures.clear()
            self._retries.clear()
            self._backoff_seconds = 0.0

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "total": sum(self._counts.values()),
                "operations": dict(self._counts.most_common()),
                "failures": dict(self._failures.most_common()),
                "retries": dict(self._retries.most_common()),
                "backoff_seconds": round(self._backoff_seconds, 3),
            }

    def dump(self, path: str | Path, **extra: Any) -> None:
        """Write the snapshot as JSON (atomically: a reader never sees half a file)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(json.dumps({**extra, **self.snapshot()}, indent=1, sort_keys=True))
        os.replace(tmp, target)


def merge_counts(snapshots: list[dict[str, Any]]) -> dict[str, int]:
    """Sum the ``operations`` of several snapshots (one per process)."""
    total: Counter[str] = Counter()
    for snap in snapshots:
        total.update(snap.get("operations", {}))
    return dict(total.most_common())


_installed: tuple[TransactionCounter, Path, str] | None = None
_installed_lock = threading.Lock()


def counter_from_env(*, role: str, environ: dict[str, str] | None = None) -> TransactionCounter | None:
    """The process's counter when ``PHOTOMOSAICS_COUNT_TRANSACTIONS`` names a folder, else None."""
    global _installed
    folder = (os.environ if environ is None else environ).get(COUNT_ENV)
    if not folder:
        return None
    with _installed_lock:
        if _installed is None:
            counter = TransactionCounter()
            _installed = (counter, Path(folder) / f"{role}-{os.getpid()}.json", role)
            atexit.register(dump_installed_counter)
        return _installed[0]


def dump_installed_counter(**extra: Any) -> None:
    """Write the installed counter's file (idempotent; called at exit); ``extra`` goes in too."""
    with _installed_lock:
        installed = _installed
    if installed is not None:
        counter, path, role = installed
        counter.dump(path, role=role, pid=os.getpid(), **extra)
