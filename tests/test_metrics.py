"""The storage transaction counter on real SDK requests against Azurite."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import ResourceModifiedError

from dal.config import StorageClients
from dal.observability.transactions import COUNT_ENV, TransactionCounter, counter_from_env, merge_counts


def counted(connection_string: str) -> tuple[StorageClients, TransactionCounter]:
    counter = TransactionCounter()
    return StorageClients(connection_string, profile="probe", response_hook=counter), counter


def test_queue_operations_are_named(azurite_connection_string: str, unique: str) -> None:
    storage, counter = counted(azurite_connection_string)
    queue = storage.queue_service.get_queue_client(f"m{unique}")
    queue.create_queue()
    queue.set_queue_metadata({"poisonthreshold": "3"})
    queue.get_queue_properties()
    queue.send_message("a")
    queue.send_message("b")
    queue.peek_messages(max_messages=2)
    received = next(queue.receive_messages(messages_per_page=2, visibility_timeout=30).by_page())
    first, second = list(received)
    updated = queue.update_message(first.id, first.pop_receipt, visibility_timeout=0)
    queue.delete_message(first.id, updated.pop_receipt)
    queue.delete_message(second.id, second.pop_receipt)
    queue.clear_messages()
    queue.delete_queue()

    assert counter.counts() == {
        "queue CreateQueue": 1,
        "queue SetQueueMetadata": 1,
        "queue GetQueueMetadata": 1,
        "queue PutMessage": 2,
        "queue PeekMessages": 1,
        "queue GetMessages": 1,
        "queue UpdateMessage": 1,
        "queue DeleteMessage": 2,
        "queue ClearMessages": 1,
        "queue DeleteQueue": 1,
    }
    assert counter.total() == 12
    assert counter.failures() == {}


def test_blob_and_table_operations_are_named_and_failures_counted(azurite_connection_string: str, unique: str) -> None:
    storage, counter = counted(azurite_connection_string)
    container = storage.blob_service.get_container_client(f"m{unique}")
    container.create_container()
    container.upload_blob("a.txt", b"hello")
    container.get_blob_client("a.txt").download_blob().readall()
    container.get_blob_client("a.txt").get_blob_properties()
    list(container.list_blobs())
    container.delete_blob("a.txt")
    container.delete_container()

    table = storage.table_service.create_table(f"m{unique}")
    table.create_entity({"PartitionKey": "p", "RowKey": "r", "n": 1})
    entity = table.get_entity("p", "r")
    table.update_entity(
        {"PartitionKey": "p", "RowKey": "r", "n": 2},
        etag=entity.metadata["etag"],
        match_condition=MatchConditions.IfNotModified,
    )
    with pytest.raises(ResourceModifiedError):  # the stale ETag loses: a 412 is still a billable transaction
        table.update_entity(
            {"PartitionKey": "p", "RowKey": "r", "n": 3},
            etag=entity.metadata["etag"],
            match_condition=MatchConditions.IfNotModified,
        )
    table.upsert_entity({"PartitionKey": "p", "RowKey": "s"})
    list(table.query_entities("PartitionKey eq 'p'"))
    table.delete_entity("p", "r")
    storage.table_service.delete_table(f"m{unique}")

    counts = counter.counts()
    assert {k: v for k, v in counts.items() if k.startswith("blob ")} == {
        "blob CreateContainer": 1,
        "blob PutBlob": 1,
        "blob GetBlob": 1,
        "blob GetBlobProperties": 1,
        "blob ListBlobs": 1,
        "blob DeleteBlob": 1,
        "blob DeleteContainer": 1,
    }
    table_counts = {k: v for k, v in counts.items() if k.startswith("table ")}
    assert table_counts["table CreateTable"] == 1
    assert table_counts["table InsertEntity"] == 1
    assert table_counts["table GetEntity"] == 1
    assert table_counts["table MergeEntity"] == 2, table_counts  # update_entity merges by default
    assert table_counts["table QueryEntities"] == 1
    assert table_counts["table DeleteEntity"] == 1
    assert table_counts["table DeleteTable"] == 1
    assert sum(v for k, v in table_counts.items() if "Upsert" in k) == 1
    assert counter.failures() == {"table MergeEntity 412": 1}


def test_counting_is_thread_safe(azurite_connection_string: str, unique: str) -> None:
    storage, counter = counted(azurite_connection_string)
    queue = storage.queue_service.get_queue_client(f"t{unique}")
    queue.create_queue()
    counter.reset()

    def peek_many() -> None:
        for _ in range(25):
            queue.peek_messages(max_messages=1)

    threads = [threading.Thread(target=peek_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    queue.delete_queue()
    assert counter.counts()["queue PeekMessages"] == 200


def test_env_switch_dumps_json_and_snapshots_merge(tmp_path: Path, azurite_connection_string: str) -> None:
    assert counter_from_env(role="x", environ={}) is None
    counter = TransactionCounter()
    storage = StorageClients(azurite_connection_string, profile="probe", response_hook=counter)
    list(storage.queue_service.list_queues())
    counter.dump(tmp_path / "a.json", role="controller")
    snap = json.loads((tmp_path / "a.json").read_text())
    assert snap["role"] == "controller" and snap["operations"] == {"queue ListQueues": 1} and snap["total"] == 1
    assert merge_counts([snap, {"operations": {"queue ListQueues": 2, "blob PutBlob": 1}}]) == {
        "queue ListQueues": 3,
        "blob PutBlob": 1,
    }
    assert COUNT_ENV == "PHOTOMOSAICS_COUNT_TRANSACTIONS"
