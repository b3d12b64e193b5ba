"""Poison requeue and purge (``dal.operations.poison``, ``photomosaics queues requeue|purge``) on Azurite."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from dal.config import CONNECTION_STRING_ENV, Settings, StorageClients
from dal.hints.channel import HINT_DIR_ENV, HINTS_URL_ENV, LocalHintChannel, short_hint_dir
from dal.jobs.model import Job
from dal.jobs.store import JobStore
from dal.operations.poison import list_poison, purge, requeue
from dal.queues.accessor import QueueAccessor
from dal.queues.messages import SliceRequestMessage
from dal.queues.work_queue import ImageProcessingQueue
from photomosaics.cli import main
from photomosaics.local.children import local_channels
from tests.support.waiting import wait_for


def _poison_one(queue: ImageProcessingQueue, request_id: str, seq: int = 0) -> None:
    """A valid slice request that a worker gave up on: in poison with a reason."""
    queue.submit(
        SliceRequestMessage(
            queue_uri=queue.url,
            client_id="operator-test",
            request_id=request_id,
            image_library_uri="http://127.0.0.1/devstoreaccount1/lib",
            slice_uri=f"http://127.0.0.1/x/{seq}.png",
            slice_sequence=seq,
            tile_size=8,
        )
    )
    (received,) = queue.accept_messages(1)
    queue.move_to_poison(received, "handler kept crashing")


def _failed_job(jobs: JobStore, request_id: str) -> None:
    jobs.create(
        Job(
            client_id="operator-test",
            request_id=request_id,
            status="failed",
            library="lib",
            tile_size=8,
            slices=2,
            tiles_across=4,
            tiles_down=4,
            output_width=32,
            output_height=32,
            input_name="x.png",
            error="slice 1: handler kept crashing",
        )
    )


@pytest.fixture
def world(storage: StorageClients, unique: str) -> tuple[QueueAccessor, JobStore]:
    prefix = f"p{unique}"
    accessor = QueueAccessor(storage, settings=Settings(), prefix=prefix)
    accessor.ensure_all()
    jobs = JobStore(storage, prefix=prefix)
    jobs.ensure_tables()
    return accessor, jobs


def test_requeue_one_by_id_gives_a_fresh_message_reopens_the_job_and_notes_it(
    world: tuple[QueueAccessor, JobStore],
) -> None:
    accessor, jobs = world
    queue = accessor.slice_request
    rid, other = str(uuid.uuid4()), str(uuid.uuid4())
    _failed_job(jobs, rid)
    _poison_one(queue, rid)
    _poison_one(queue, other, seq=1)
    target = next(item for item in list_poison(queue) if rid in item.entry.payload)

    result = requeue(queue, jobs, message_id=target.id)

    assert result.done == [target.id] and not result.missing
    (back,) = queue.accept_messages(32)
    assert back.message.request_id == rid and back.dequeue_count == 1  # a fresh message
    (left,) = list_poison(queue)  # the other one stays, visible again
    assert other in left.entry.payload
    job = jobs.get("operator-test", rid)
    assert job is not None and job.status == "rendering" and job.error is None and job.finished_at is None
    (event,) = [e for e in jobs.events(rid) if e.kind == "requeued"]
    assert "handler kept crashing" in event.message and queue.poison.name in event.message


def test_requeue_all_leaves_garbage_and_purge_empties(
    world: tuple[QueueAccessor, JobStore], storage: StorageClients
) -> None:
    accessor, jobs = world
    queue = accessor.slice_request
    for seq in range(3):
        _poison_one(queue, str(uuid.uuid4()), seq)
    storage.queue_service.get_queue_client(queue.name).send_message("aGVsbG8=")  # "hello": not a message
    assert queue.accept_messages(32) == []  # moved to poison as garbage

    result = requeue(queue, jobs)

    assert len(result.done) == 3 and len(result.skipped) == 1
    assert "not a slicerequest message" in next(iter(result.skipped.values()))
    assert len(queue.accept_messages(32)) == 3
    assert len(list_poison(queue)) == 1
    assert purge(queue).count == 1 and list_poison(queue) == []
    assert requeue(queue, jobs, message_id="no-such-id").missing == ["no-such-id"]


def test_cli_lists_ids_requeues_and_purges(
    world: tuple[QueueAccessor, JobStore],
    azurite_connection_string: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    accessor, _ = world
    queue = accessor.slice_request
    monkeypatch.setenv(CONNECTION_STRING_ENV, azurite_connection_string)
    monkeypatch.setenv("PHOTOMOSAICS_NAME_PREFIX", queue.name.removesuffix("slicerequest"))
    _poison_one(queue, str(uuid.uuid4()), 0)
    _poison_one(queue, str(uuid.uuid4()), 1)
    runner = CliRunner()

    listed = runner.invoke(main, ["queues", "--poison"], catch_exceptions=False)
    assert listed.exit_code == 0, listed.output
    ids = [item.id for item in list_poison(queue)]
    assert all(i in listed.output for i in ids)

    bad = runner.invoke(main, ["queues", "requeue", "slicerequest"])
    assert bad.exit_code == 2 and "exactly one of --id ID or --all" in bad.output
    unknown = runner.invoke(main, ["queues", "purge", "nosuchqueue", "--all"])
    assert unknown.exit_code == 2 and "no work queue named 'nosuchqueue'" in unknown.output

    one = runner.invoke(main, ["queues", "requeue", "slicerequest", "--id", ids[0]], catch_exceptions=False)
    assert one.exit_code == 0 and "requeued 1 message(s)" in one.output, one.output
    missing = runner.invoke(main, ["queues", "requeue", "slicerequest", "--id", ids[0]])
    assert missing.exit_code == 1 and "no poison message" in missing.output
    purged = runner.invoke(main, ["queues", "purge", "slicerequest", "--all"], catch_exceptions=False)
    assert purged.exit_code == 0 and "purged 1 message(s)" in purged.output, purged.output
    assert list_poison(queue) == [] and len(queue.accept_messages(32)) == 1


def test_cli_requeue_beside_a_run_wakes_its_listeners_through_the_runs_hint_folder(
    world: tuple[QueueAccessor, JobStore],
    azurite_connection_string: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A requeue from the terminal while `make run` is up: the run's idle listeners poll every
    60 s, so the command announces what it sent in the run's hint folder, as a child would."""
    accessor, _ = world
    queue = accessor.slice_request
    monkeypatch.setenv(CONNECTION_STRING_ENV, azurite_connection_string)
    monkeypatch.setenv("PHOTOMOSAICS_NAME_PREFIX", queue.name.removesuffix("slicerequest"))
    monkeypatch.delenv(HINT_DIR_ENV, raising=False)
    monkeypatch.delenv(HINTS_URL_ENV, raising=False)
    _poison_one(queue, str(uuid.uuid4()), 0)
    data = tmp_path / "data"
    heard: list[int | None] = []
    listening = LocalHintChannel(local_channels(data.resolve())[HINT_DIR_ENV])  # what a run's children share
    subscription = listening.subscribe(queue.hint_name, lambda count, lane: heard.append(count))
    try:
        done = CliRunner().invoke(
            main, ["queues", "--data-dir", str(data), "requeue", "slicerequest", "--all"], catch_exceptions=False
        )
        assert done.exit_code == 0 and "requeued 1 message(s)" in done.output, done.output
        wait_for(lambda: heard, seconds=10, what="the run's listener hearing the requeue")
        assert heard == [1]
    finally:
        subscription.close()
    assert len(queue.accept_messages(32)) == 1
    # Without a run's folder there is nothing to wake: no folder is made for it.
    _poison_one(queue, str(uuid.uuid4()), 1)
    alone = tmp_path / "no-run"
    done = CliRunner().invoke(main, ["queues", "--data-dir", str(alone), "requeue", "slicerequest", "--all"])
    assert done.exit_code == 0 and not short_hint_dir(alone.resolve() / "hints").exists()


def test_text_no_move_put_in_a_poison_queue_is_listed_with_why_not_a_crash(
    world: tuple[QueueAccessor, JobStore],
    storage: StorageClients,
    azurite_connection_string: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Anyone with the account's key can send to `slicerequest-poison` by hand: a text that is
    not Base64, or Base64 of something that is no envelope, must not stop `queues --poison`
    or the Queues page from showing the poison queue."""
    accessor, jobs = world
    queue = accessor.slice_request
    _poison_one(queue, str(uuid.uuid4()))
    by_hand = storage.queue_service.get_queue_client(queue.poison.name)  # no encode policy: the text as sent
    by_hand.send_message("not base64 {")
    by_hand.send_message("aGVsbG8=")  # Base64 of "hello"

    listed = list_poison(queue)
    reasons = sorted(item.entry.reason for item in listed)
    assert len(listed) == 3 and sum("not a poison envelope" in r for r in reasons) == 2, reasons
    assert {item.entry.payload for item in listed} >= {"not base64 {", "hello"}
    monkeypatch.setenv(CONNECTION_STRING_ENV, azurite_connection_string)
    monkeypatch.setenv("PHOTOMOSAICS_NAME_PREFIX", queue.name.removesuffix("slicerequest"))
    shown = CliRunner().invoke(main, ["queues", "--poison"], catch_exceptions=False)
    assert shown.exit_code == 0 and shown.output.count("not a poison envelope") == 2, shown.output

    result = requeue(queue, jobs)  # the envelope goes back; the two texts stay, each with why
    assert len(result.done) == 1 and len(result.skipped) == 2
    assert purge(queue).count == 2 and list_poison(queue) == []


def test_a_message_whose_check_fails_on_every_delivery_goes_to_poison_not_round_for_good(
    world: tuple[QueueAccessor, JobStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault no real message produces any more (a text nested past the JSON decoder once
    raised out of the claim-check parse): the check is made to raise. Past the poison threshold
    the message is moved aside with what happened, as a handler's failures are."""
    accessor, _ = world
    queue = accessor.slice_request
    queue.tuning.configure(poison_threshold=2)
    _poison_one(queue, str(uuid.uuid4()))
    (envelope,) = list_poison(queue)
    requeue(queue, None, message_id=envelope.id)  # a valid message on the work queue again
    monkeypatch.setattr(queue, "_parse", lambda content: (_ for _ in ()).throw(RuntimeError("unforeseen")))

    def receive_until_poisoned() -> bool:
        batch = queue.accept_messages(32, visibility_timeout=1)
        assert batch == []  # never handed out: its check fails
        return batch.poisoned == 1

    wait_for(receive_until_poisoned, seconds=30, step=0.5, what="the message moved to poison")
    (moved,) = list_poison(queue)
    assert "could not be checked on 3 deliveries: RuntimeError: unforeseen" in moved.entry.reason
    assert '"type":"SliceRequest"' in moved.entry.payload.replace(" ", "")
