"""JobStore against a real Azurite table service: CRUD, paging, ETag concurrency, events."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from dal.config import StorageClients
from dal.errors import JobExistsError, JobNotFoundError, StorageConfigurationError
from dal.jobs.model import Job, decode_slices, encode_slices
from dal.jobs.store import JobStore
from tests.support.faultproxy import faulty_account


@pytest.fixture
def store(storage: StorageClients, unique: str) -> JobStore:
    jobs = JobStore(storage, prefix=f"t{unique}")
    jobs.ensure_tables()
    return jobs


def make_job(client_id: str = "alice", *, created_at: datetime | None = None, **changes: object) -> Job:
    job = Job(
        client_id=client_id,
        request_id=str(uuid.uuid4()),
        status="queued",
        library="flowers",
        tile_size=16,
        slices=8,
        tiles_across=40,
        tiles_down=30,
        output_width=640,
        output_height=480,
        input_name="in.png",
        created_at=created_at or datetime.now(UTC),
    )
    return replace(job, **changes)  # type: ignore[arg-type]


def test_slices_round_trip_compactly() -> None:
    assert encode_slices({0, 1, 2, 3, 7, 9, 10}) == "0-3,7,9-10"
    assert decode_slices("0-3,7,9-10") == frozenset({0, 1, 2, 3, 7, 9, 10})
    assert decode_slices("") == frozenset()
    everything = frozenset(range(64))
    assert decode_slices(encode_slices(everything)) == everything


def test_create_get_update(store: JobStore) -> None:
    job = make_job()
    created = store.create(job)
    assert created.etag
    assert replace(created, etag=None, created_at=job.created_at, updated_at=job.updated_at) == job
    assert store.get(job.client_id, job.request_id) == created
    assert store.get(job.client_id, str(uuid.uuid4())) is None

    done, wrote = store.update(
        job.client_id, job.request_id, lambda j: replace(j, status="done", slices_done=frozenset(range(8)))
    )
    assert wrote
    assert done.status == "done" and done.progress == 1.0
    assert done.finished_at is not None and done.etag != created.etag
    again = store.get(job.client_id, job.request_id)
    assert again == done
    # None means "nothing to change": no write, the ETag stays, and the update says so.
    unchanged, wrote = store.update(job.client_id, job.request_id, lambda j: None)
    assert unchanged.etag == done.etag and not wrote
    same = store.update(job.client_id, job.request_id, lambda j: replace(j, status="done"))
    assert same == (done, False)  # a change that changes nothing writes nothing either


def test_create_twice_is_refused(store: JobStore) -> None:
    job = make_job()
    store.create(job)
    with pytest.raises(JobExistsError):
        store.create(replace(job, library="other"))
    stored = store.get(job.client_id, job.request_id)
    assert stored is not None and stored.library == "flowers"


@pytest.mark.parametrize(
    "bad",
    [
        {"client_id": "a/b"},
        {"client_id": "a#b"},
        {"request_id": "x?y"},
        {"request_id": "back\\slash"},
        {"request_id": ""},
        {"status": "exploded"},
        {"tile_size": 0},
        {"slices_done": frozenset({8})},
    ],
)
def test_bad_jobs_are_rejected_before_storage(store: JobStore, bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        store.create(make_job(**bad))  # type: ignore[arg-type]
    assert store.list_for_client("alice") == ([], None)


def test_bad_keys_are_rejected_on_read(store: JobStore) -> None:
    with pytest.raises(ValueError, match="client_id"):
        store.get("a/b", "x")
    with pytest.raises(ValueError, match="request_id"):
        store.events("a#b")
    with pytest.raises(ValueError, match="continuation"):
        store.list_for_client("alice", continuation="garbage!")


def test_update_of_missing_job(store: JobStore) -> None:
    with pytest.raises(JobNotFoundError):
        store.update("alice", str(uuid.uuid4()), lambda j: replace(j, status="done"))


def test_list_pages_newest_first_with_continuation(store: JobStore) -> None:
    base = datetime(2024, 5, 1, tzinfo=UTC)
    jobs = [store.create(make_job("bob", created_at=base + timedelta(seconds=i))) for i in range(7)]
    store.create(make_job("carol"))  # another client's job never shows up
    seen: list[str] = []
    pages = 0
    token: str | None = None
    while True:
        page, token = store.list_for_client("bob", limit=3, continuation=token)
        pages += 1
        assert len(page) <= 3
        seen += [j.request_id for j in page]
        if token is None:
            break
    assert pages == 3
    assert seen == [j.request_id for j in reversed(jobs)]
    # Exactly one page: no token, so callers never fetch an empty last page.
    page, token = store.list_for_client("bob", limit=7)
    assert len(page) == 7 and token is None


def test_concurrent_updates_lose_nothing(store: JobStore) -> None:
    job = store.create(make_job(slices=64))

    def add(slice_number: int) -> None:
        store.update(job.client_id, job.request_id, lambda j: replace(j, slices_done=j.slices_done | {slice_number}))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(add, range(32)))
    final = store.get(job.client_id, job.request_id)
    assert final is not None
    assert final.slices_done == frozenset(range(32))


def test_events_oldest_first_and_unique(store: JobStore) -> None:
    request_id = str(uuid.uuid4())
    for i in range(5):
        store.add_event(request_id, "slice-done", actor="processor-1", message=f"slice {i}", slice=i, seconds=0.5)
    store.add_event(request_id, "stitched", actor="controller", message="done")
    events = store.events(request_id)
    assert [e.message for e in events] == [f"slice {i}" for i in range(5)] + ["done"]
    assert events[0].slice == 0 and events[0].seconds == 0.5 and events[-1].slice is None
    assert all(a.at <= b.at for a, b in zip(events, events[1:], strict=False))
    # Many writers at once: no two events collide on their RowKey.
    other = str(uuid.uuid4())
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: store.add_event(other, "tick", actor=f"t{i}", message=str(i)), range(40)))
    assert sorted(int(e.message) for e in store.events(other)) == list(range(40))


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("fault", ["reset", "lost"])
def test_an_event_write_whose_connection_drops_is_retried_and_stored_once(
    store: JobStore, azurite_connection_string: str, unique: str, fault: str, count: int
) -> None:
    # One event is a PUT, several are one $batch POST: each must survive a dropped connection,
    # before the server ran it ("reset") or after ("lost": a repeat must not fail or duplicate),
    # or a job's "done" line is lost for good.
    request_id = str(uuid.uuid4())
    with faulty_account(azurite_connection_string, faults={fault: 1.0}, max_faults=1) as account:
        proxied = JobStore(StorageClients(account.connection_string, profile="interactive"), prefix=f"t{unique}")
        account.set_active(True)
        proxied.add_events(request_id, [dict(kind="tick", actor="test", message=str(i)) for i in range(count)])
        assert account.counts()[fault] == 1
    assert [e.message for e in store.events(request_id)] == [str(i) for i in range(count)]


@pytest.mark.parametrize("fault", ["reset", "lost"])
def test_creating_the_tables_survives_a_dropped_connection(azurite_connection_string: str, fault: str) -> None:
    # A role's start-up creates its tables (a POST): a dropped connection must not stop it.
    prefix = f"t{uuid.uuid4().hex[:10]}"
    with faulty_account(azurite_connection_string, faults={fault: 1.0}, max_faults=1) as account:
        account.set_active(True)
        JobStore(StorageClients(account.connection_string, profile="interactive"), prefix=prefix).ensure_tables()
        assert account.counts()[fault] == 1
    store = JobStore(StorageClients(azurite_connection_string, profile="probe"), prefix=prefix)
    assert store.events("r1") == []  # both tables are there (a missing one is a configuration error)
    assert store.get("alice", "r1") is None


def test_an_update_whose_answer_is_lost_still_says_it_wrote(
    store: JobStore, azurite_connection_string: str, unique: str
) -> None:
    # The server ran the write, the answer was lost, the SDK's retry met the new ETag (412):
    # the caller must still learn that it made the change, or it skips what follows (the event).
    job = store.create(make_job("erin"))
    with faulty_account(azurite_connection_string, faults={"lost": 1.0}, max_faults=1) as account:
        proxied = JobStore(StorageClients(account.connection_string, profile="interactive"), prefix=f"t{unique}")
        account.set_active(True)
        done = proxied.update(job.client_id, job.request_id, lambda j: replace(j, status="done"), current=job)
        assert account.counts()["lost"] == 1
    assert done.wrote and done.job.status == "done"
    stored = store.get(job.client_id, job.request_id)
    assert stored is not None and stored.status == "done" and stored.etag == done.job.etag
    # A change that someone else made first is still not ours.
    again = store.update(
        job.client_id, job.request_id, lambda j: None if j.status == "done" else replace(j, status="done")
    )
    assert not again.wrote


def test_delete_removes_job_index_and_events(store: JobStore) -> None:
    keep = store.create(make_job("dave"))
    job = store.create(make_job("dave"))
    for i in range(105):  # more than one transaction's worth
        store.add_event(job.request_id, "tick", actor="test", message=str(i))
    store.add_event(keep.request_id, "tick", actor="test", message="kept")
    store.delete("dave", job.request_id)
    assert store.get("dave", job.request_id) is None
    assert store.events(job.request_id) == []
    page, token = store.list_for_client("dave")
    assert [j.request_id for j in page] == [keep.request_id] and token is None
    remaining = list(store._jobs.query_entities("PartitionKey eq 'dave'"))
    assert len(remaining) == 2  # keep's job row and its index entity, nothing of the deleted job
    assert len(store.events(keep.request_id)) == 1
    store.delete("dave", job.request_id)  # idempotent


def test_lost_race_is_retried_on_fresh_data(store: JobStore) -> None:
    """A writer that sneaks in between our read and write forces a 412; our change is re-applied."""
    job = store.create(make_job())
    calls: list[frozenset[int]] = []

    def change(current: Job) -> Job:
        calls.append(current.slices_done)
        if len(calls) == 1:  # a competing writer commits first
            store.update(job.client_id, job.request_id, lambda j: replace(j, slices_done=j.slices_done | {1}))
        return replace(current, slices_done=current.slices_done | {2})

    final = store.update(job.client_id, job.request_id, change).job
    assert calls == [frozenset(), frozenset({1})]
    assert final.slices_done == frozenset({1, 2})
    stored = store.get(job.client_id, job.request_id)
    assert stored is not None and stored.slices_done == frozenset({1, 2})


def test_missing_tables_are_a_configuration_error(storage: StorageClients, unique: str) -> None:
    store = JobStore(storage, prefix=f"missing{unique}")  # ensure_tables() never called
    with pytest.raises(StorageConfigurationError, match="ensure_tables"):
        store.get("alice", "r1")
    with pytest.raises(StorageConfigurationError, match="ensure_tables"):
        store.create(make_job())
    with pytest.raises(StorageConfigurationError, match="ensure_tables"):
        store.list_for_client("alice")
    with pytest.raises(StorageConfigurationError, match="ensure_tables"):
        store.add_event("r1", "tick", actor="test", message="m")
