"""``slicerequest`` in K shards (``dal.queues.shards``): producers spread, consumers rotate, K=3 end to end."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from dal.config import Settings, StorageClients
from dal.queues.accessor import QueueAccessor
from dal.queues.messages import SliceRequestMessage
from dal.queues.shards import ShardedQueue
from tests.support.pipelines import Pipeline, synthetic_library
from tests.support.sliceable import unit_photo
from tests.support.waiting import wait_for


def slice_request(queues: QueueAccessor, rid: str, seq: int) -> SliceRequestMessage:
    shard = queues.slice_request_shard(rid, seq)
    return SliceRequestMessage(
        queue_uri=shard.url,
        client_id="shards",
        request_id=rid,
        slice_sequence=seq,
        image_library_uri="http://127.0.0.1/devstoreaccount1/lib",
        slice_uri=f"http://127.0.0.1/x/{seq}.png",
        tile_size=8,
    )


def test_one_shard_is_the_plain_queue(storage: StorageClients, unique: str) -> None:
    queues = QueueAccessor(storage, settings=Settings(fair_lanes=1), prefix=f"s{unique}")
    # the four work queues, jobcleanup and indexrequest
    assert queues.slice_requests is queues.slice_request and len(queues.monitored()) == 6
    assert len(QueueAccessor(storage, settings=Settings(), prefix=f"s{unique}").monitored()) == 8  # + the lanes
    with pytest.raises(ValueError, match="slice_shards"):
        QueueAccessor(storage, settings=Settings(slice_shards=0))


def test_producers_spread_and_consumers_rotate_over_three_shards(storage: StorageClients, unique: str) -> None:
    queues = QueueAccessor(storage, settings=Settings(slice_shards=3), prefix=f"s{unique}")
    queues.ensure_all()
    shards = queues.slice_request_shards
    assert [q.short_name for q in shards] == ["slicerequest", "slicerequest-1", "slicerequest-2"]
    assert [q.short_name for q in queues.monitored()][4:] == [
        "slicerequest-1",
        "slicerequest-2",
        "slicerequest-lane1",
        "slicerequest-lane1-1",
        "slicerequest-lane1-2",
        "imagerequest-lane1",
        "jobcleanup",
        "indexrequest",
    ]
    rid = str(uuid.uuid4())
    for seq in range(6):
        message = slice_request(queues, rid, seq)
        queues.for_message(message).submit(message)
    assert [len(q.peek(32)) for q in shards] == [2, 2, 2]  # one job's slices dealt evenly
    consumer = queues.slice_requests
    assert isinstance(consumer, ShardedQueue) and consumer.approximate_depth() == 6

    taken = [consumer.accept_messages(1, visibility_timeout=30)[0] for _ in range(6)]
    order = [r.queue_name for r in taken]
    assert Counter(order) == Counter({q.name: 2 for q in shards})
    assert all(order[i] != order[i + 1] for i in range(5))  # served in turn, never the same shard twice
    assert all(consumer.delete(r) for r in taken)
    assert consumer.accept_messages(32) == [] and consumer.approximate_depth() == 0


def test_a_job_runs_end_to_end_over_three_shards(
    azurite_connection_string: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOTOMOSAICS_SLICE_SHARDS", "3")
    pipe = Pipeline(azurite_connection_string, tmp_path)
    try:
        pipe.library_uri = pipe.create_library("tiles", synthetic_library())
        pipe.start("controller")
        rid = pipe.submit(unit_photo(6, seed=5), library_uri=pipe.library_uri, tile_size=8, slices=6)
        shards = pipe.services.queues.slice_request_shards
        wait_for(
            lambda: sum(q.approximate_depth() for q in shards) >= 6,
            seconds=60,
            step=0.2,
            what="six slices queued",
            details=pipe.logs,
        )
        assert [q.approximate_depth() for q in shards] == [2, 2, 2], pipe.logs()
        pipe.start("processor")
        pipe.start("responder")
        job = pipe.wait([rid], timeout=90)[rid]
        assert job.status == "done", job.error
        assert [q.approximate_depth() for q in shards] == [0, 0, 0]
    finally:
        pipe.stop_all()
