"""The self-healing pipeline, with real processes and real Azurite.

Work-detected hints (``dal.hints.channel``) wake idle listeners; a lost hint costs one poll (the
cap); elastic concurrency grows with depth and shrinks back; a SIGKILLed processor's slice
is handed back by the supervisor from its lease journal; a killed embedded Azurite is
restarted on its ports and data. No wall-clock asserts: the tests check which mechanism
fired (a pickup "by hint" although the poll interval is 30 s, a hand-back count, a restart
count) and that the mosaics are still pixel-identical to the offline render.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dal.availability.storage_status import read_status
from dal.config import StorageClients
from dal.hints.channel import HINT_DIR_ENV, LocalHintChannel, short_hint_dir
from dal.queues.accessor import QueueAccessor
from dal.queues.consumable import ReceivedMessage
from dal.queues.messages import SliceRequestMessage
from dal.queues.work_queue import ImageProcessingQueue
from photomosaics.local.azurite import Azurite
from photomosaics.local.storage_keeper import AzuriteKeeper
from photomosaics.local.supervisor import ChildSpec, Supervisor
from tests.support.listeners import in_thread, listener, message
from tests.support.pipelines import (
    SLOW_POLLS,
    Pipeline,
    assert_job_pixel_identical,
    log_lines,
    synthetic_library,
    woken_queues,
)
from tests.support.sliceable import PLAIN_TILE, plain_photo
from tests.support.waiting import wait_for
from workers.runtime.leases import LEASE_DIR_ENV


def _put_unannounced(queue: ImageProcessingQueue) -> None:
    """A slice request sent with no wake-up hint (as another machine without pub/sub sends)."""
    queue.hints = None
    message = SliceRequestMessage(
        queue_uri=queue.url,
        client_id="tester",
        request_id=str(uuid.uuid4()),
        image_library_uri="http://127.0.0.1:10000/devstoreaccount1/lib",
        slice_uri="http://127.0.0.1:10000/devstoreaccount1/x/0.png",
        slice_sequence=0,
        tile_size=8,
    )
    queue.put_text(message.payload())


def _channels(tmp_path: Path) -> dict[str, str]:
    hints = short_hint_dir(tmp_path / "hints")
    return {HINT_DIR_ENV: str(hints), LEASE_DIR_ENV: str(tmp_path / "leases")}


# -- hints --------------------------------------------------------------------------------


def test_a_hint_wakes_every_role_although_they_poll_every_30_s(pipe: Pipeline, tmp_path: Path) -> None:
    env = {**SLOW_POLLS, **_channels(tmp_path)}
    for role in ("controller", "processor", "responder"):
        pipe.start(role, env=env)
    # Every listener has made its first (empty) receive and now sleeps 30 s: the four of the
    # workflow and the responder's jobcleanup listener (dal.operations.cleanup), which this job never wakes.
    wait_for(lambda: len(log_lines(pipe, "listener.start")) == 5 or None, seconds=60)
    wait_for(lambda: len(list(Path(env[HINT_DIR_ENV]).glob("*.sock"))) == 5 or None)
    # Each has made its first (empty) receive and says so: a job sent now is found by a hint.
    wait_for(lambda: len(log_lines(pipe, "listener.idle")) == 5 or None, seconds=60)
    pipe.services.queues.image_request.hints = LocalHintChannel(env[HINT_DIR_ENV])
    image = plain_photo(3, seed=11)
    rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=3)

    pipe.wait([rid], timeout=25)  # four hops at one 30 s poll each would need 120 s
    # The job is done with its stitch; the ImageResponse hop to the responder may still be on its way.
    wait_for(lambda: len(woken_queues(pipe)) == 4 or None, seconds=15)

    detected = log_lines(pipe, "listener.work_detected")
    assert detected and all("by=hint" in line for line in detected), detected
    queues = woken_queues(pipe)
    assert len(queues) == 4, detected  # imagerequest, slicerequest, sliceresponse, imageresponse
    assert_job_pixel_identical(pipe, rid, image, tile=PLAIN_TILE, slices=3)


@pytest.fixture
def hinted(storage, unique: str, tmp_path: Path) -> Iterator[tuple[ImageProcessingQueue, LocalHintChannel]]:  # type: ignore[no-untyped-def]
    """A fresh slice-response queue and a local hint channel; the queue goes with the test."""
    queue = QueueAccessor(storage, prefix=f"h{unique}").slice_response
    queue.ensure_exists()
    try:
        yield queue, LocalHintChannel(short_hint_dir(tmp_path / "hints"))
    finally:
        queue._client.delete_queue()
        queue.poison._client.delete_queue()


def test_a_lost_hint_costs_one_poll_at_the_cap(
    hinted: tuple[ImageProcessingQueue, LocalHintChannel], tmp_path: Path
) -> None:
    queue, channel = hinted
    handled: list[ReceivedMessage] = []
    # Subscribed to hints, so its idle cap is poll_max_hinted; the send below publishes none.
    consumer = listener(queue, handled.append, hints=channel, poll_min=0.05, poll_max=0.2, poll_max_hinted=1.0)
    thread = in_thread(consumer.run)
    try:
        wait_for(lambda: consumer.stats["empty_receives"] >= 3 or None)
        assert consumer.effective_poll_max == 1.0
        queue.hints = LocalHintChannel(tmp_path / "elsewhere")  # the hint goes nowhere: "lost"
        queue.submit(message(queue))
        wait_for(lambda: handled or None)
        assert (consumer.stats["poll_pickups"], consumer.stats["hint_pickups"], consumer.stats["hints"]) == (1, 0, 0)
        queue.hints = channel  # and with the hint delivered, the pickup is the hint's
        queue.submit(message(queue))
        wait_for(lambda: len(handled) == 2 or None)
        assert consumer.stats["hints"] == 1
    finally:
        consumer.stop()
        thread.join(timeout=15)


def test_covered_by_hints_an_empty_queue_is_not_polled_again_except_for_a_retry(
    hinted: tuple[ImageProcessingQueue, LocalHintChannel], tmp_path: Path
) -> None:
    """QueueEmpty with push: no 0.1, 0.2, 0.4 s ramp after the work, one poll and then
    the 60 s safety net; but a message this listener released with a retry delay is fetched when due."""
    queue, channel = hinted
    attempts: list[int] = []

    def flaky(received: ReceivedMessage) -> None:
        attempts.append(received.dequeue_count)
        if received.dequeue_count == 1:
            raise RuntimeError("transient")

    consumer = listener(queue, flaky, hints=channel, poll_min=0.05, poll_max=0.2, poll_max_hinted=60.0, retry_delay=1.0)
    thread = in_thread(consumer.run)
    try:
        wait_for(lambda: consumer.stats["idle_waits"] >= 1 or None)  # in its wait after the first empty receive
        assert consumer.stats["empty_receives"] == 1 and consumer.hint_covered
        assert consumer.idle_delay() >= 30  # the safety-net cap, not a ramp from 0.05 s
        queue.hints = channel
        queue.submit(message(queue))  # its hint wakes the listener; the first attempt fails
        wait_for(lambda: attempts == [1, 2] or None, seconds=10)  # retried after ~1 s, not 60 s
        assert consumer.stats["hint_pickups"] == 1 and consumer.stats["succeeded"] == 1
    finally:
        consumer.stop()
        thread.join(timeout=15)


def test_hint_credit_no_receive_after_the_announced_messages_were_taken(
    hinted: tuple[ImageProcessingQueue, LocalHintChannel], tmp_path: Path
) -> None:
    """A hint says how many messages its send added: one at a time, the listener takes them and
    then waits for the next hint, with no empty receive after each (a small job's trailing empty
    receives); a hint with no count (a hand-back) still polls until the queue is empty."""
    queue, channel = hinted
    handled: list[ReceivedMessage] = []
    consumer = listener(
        queue, handled.append, hints=channel, batch_size=1, poll_min=0.05, poll_max=0.2, poll_max_hinted=60.0
    )
    thread = in_thread(consumer.run)
    try:
        wait_for(lambda: consumer.stats["empty_receives"] >= 1 or None)
        queue.hints = channel
        queue.submit(message(queue, 0))
        wait_for(lambda: consumer.stats["succeeded"] == 1 or None)
        queue.submit([message(queue, seq) for seq in (1, 2, 3)])  # one hint: "3 messages"
        # The announced work taken, it waits for the next hint: no receive until one comes.
        wait_for(lambda: (consumer.stats["succeeded"], consumer.stats["waiting"]) == (4, 1) or None)
        assert (consumer.stats["receives"], consumer.stats["empty_receives"]) == (5, 1), consumer.stats
        queue.hints = LocalHintChannel(tmp_path / "elsewhere")  # sent unannounced ...
        queue.submit(message(queue, 4))
        channel.publish(queue.hint_name)  # ... then a hint with no count, as a hand-back sends
        wait_for(lambda: consumer.stats["succeeded"] == 5 or None)
        wait_for(lambda: consumer.stats["empty_receives"] == 2 or None)  # polled until empty, as before
        assert sorted(r.message.slice_sequence for r in handled) == [0, 1, 2, 3, 4]  # type: ignore[attr-defined]
    finally:
        consumer.stop()
        thread.join(timeout=15)


def test_competing_consumers_tell_each_other_what_they_took_so_neither_receives_in_vain(
    hinted: tuple[ImageProcessingQueue, LocalHintChannel], tmp_path: Path
) -> None:
    """Two listeners hear the same "4 sent": each tells the other what it took (a taken notice on
    the hint channel, no storage call), so neither receives again after the fourth is taken."""
    queue, channel = hinted
    handled: list[ReceivedMessage] = []

    def slow(received: ReceivedMessage) -> None:  # long enough for both to be busy at once
        time.sleep(0.3)
        handled.append(received)

    consumers = [
        listener(
            queue,
            slow,
            name=f"peer-{i}",
            hints=channel,
            batch_size=1,
            poll_min=0.05,
            poll_max=0.2,
            poll_max_hinted=60.0,
        )
        for i in range(2)
    ]
    threads = [in_thread(c.run) for c in consumers]
    try:
        wait_for(lambda: all(c.stats["empty_receives"] >= 1 for c in consumers) or None)  # subscribed, idle
        empty_before = [c.stats["empty_receives"] for c in consumers]
        queue.hints = channel
        queue.submit([message(queue, seq) for seq in range(4)])  # one hint: "4 messages"
        # Both done and both waiting for the next hint: no receive until one comes.
        wait_for(
            lambda: sum(c.stats["succeeded"] for c in consumers) == 4 and all(c.stats["waiting"] for c in consumers)
        )
        assert [c.stats["empty_receives"] for c in consumers] == empty_before, [c.stats for c in consumers]
        assert sum(c.stats["peer_taken"] for c in consumers) == 4  # each heard the other's notices, not its own
        assert sorted(r.message.slice_sequence for r in handled) == [0, 1, 2, 3]  # type: ignore[attr-defined]
        # Over a fan-out channel (folder and server) a notice arrives twice: it counts once.
        first, taken = consumers[0], consumers[0].stats["peer_taken"]
        first.wakeups.heard_taken(3, "elsewhere.1")
        first.wakeups.heard_taken(3, "elsewhere.1")
        first.wakeups.heard_taken(5, f"{first.wakeups.credit.sender}.99")  # its own, come back
        assert first.stats["peer_taken"] == taken + 3
    finally:
        for c in consumers:
            c.stop()
        for t in threads:
            t.join(timeout=15)


def test_a_lane_found_empty_is_skipped_until_a_hint_names_it(storage, unique: str) -> None:  # type: ignore[no-untyped-def]
    """Priority lanes under hints: a job's last receive (and the reversed one) tries only the lanes
    that may hold work, one call instead of one per lane; with every lane in doubt, all are tried."""
    from dataclasses import replace as _replace

    from dal.config import Settings, StorageClients
    from dal.observability.transactions import TransactionCounter
    from dal.queues.lanes import PriorityLanes

    counter = TransactionCounter()
    counted = StorageClients(storage.connection_string, response_hook=counter)
    queues = QueueAccessor(counted, settings=_replace(Settings(), fair_lanes=2, slice_shards=1), prefix=f"l{unique}")
    for lane in queues.slice_request_queues():
        lane.ensure_exists()
    lanes = queues.slice_requests
    assert isinstance(lanes, PriorityLanes)
    lanes.skip_known_empty = True  # what a hint-covered listener sets

    def receive() -> tuple[list[ReceivedMessage], int]:
        before = counter.counts().get("queue GetMessages", 0)
        got = lanes.accept_messages(1, visibility_timeout=30)
        return got, counter.counts().get("queue GetMessages", 0) - before

    def send(lane: int) -> None:
        queue = queues.slice_lanes[lane][0]
        _put_unannounced(queue)

    try:
        assert receive() == ([], 2)  # nothing known: both lanes tried
        send(0)
        lanes.hinted(0)  # the send's hint names lane 0
        got, calls = receive()
        assert len(got) == 1 and calls == 1
        assert receive() == ([], 1)  # the trailing receive: lane 1 was empty, no hint named it
        assert receive() == ([], 2)  # every lane in doubt (the listener's own poll): all tried
        send(1)
        lanes.hinted(1)
        got, calls = receive()  # the fifth receive goes lowest lane first: lane 1, found at once
        assert len(got) == 1 and calls == 1 and got[0].queue_name == queues.slice_lanes[1][0].name
        lanes.release(got[0])  # a released message makes its lane worth a call again
        got, calls = receive()
        assert len(got) == 1 and calls == 1  # lane 0 still known empty: straight to lane 1
        lanes.skip_known_empty = False  # no hints heard: every receive tries every lane, as before
        assert receive() == ([], 2) and receive() == ([], 2)
    finally:
        for lane in queues.slice_request_queues():
            lane._client.delete_queue()
            lane.poison._client.delete_queue()


def test_a_handed_back_lane_message_is_announced_where_the_listeners_listen(
    storage, unique: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A dead processor held a slice of lane 1 (``slicerequest-lane1``): the hand-back makes it
    visible and hints under the name the processors subscribe to, the one every send uses."""
    from dataclasses import replace as _replace

    from dal.config import Settings
    from workers.runtime.leases import HeldMessage, LeaseJournal, hand_back

    queues = QueueAccessor(storage, settings=_replace(Settings(), fair_lanes=2, slice_shards=1), prefix=f"h{unique}")
    for lane in queues.slice_request_queues():
        lane.ensure_exists()
    lanes = queues.slice_requests
    lane1 = queues.slice_lanes[1][0]
    try:
        _put_unannounced(lane1)
        held = lanes.accept_messages(1, visibility_timeout=300)
        assert len(held) == 1 and held[0].queue_name == lane1.name != lanes.name
        dead_pid = 2**22 + 7  # past pid_max's default: no live process has it
        LeaseJournal(tmp_path, pid=dead_pid).record("processor", lanes.name, [HeldMessage(held[0], held[0], 0.0)])
        announced: list[str] = []
        assert hand_back(tmp_path, dead_pid, storage.queue_service, announce=announced.append) == 1
        # What the processors subscribe to (the listener's queue name) and what a send to lane 1 hints under.
        assert announced == [lanes.name] == [lane1.hint_name]
        again = lanes.accept_messages(1, visibility_timeout=30)
        assert [m.id for m in again] == [held[0].id]  # visible at once, not after its 300 s lease
        assert not (tmp_path / f"{dead_pid}.json").exists()
    finally:
        for lane in queues.slice_request_queues():
            lane._client.delete_queue()
            lane.poison._client.delete_queue()


# -- elastic dequeue ----------------------------------------------------------------------


def test_elastic_concurrency_grows_with_depth_and_shrinks_when_empty(storage, unique: str) -> None:  # type: ignore[no-untyped-def]
    queue = QueueAccessor(storage, prefix=f"e{unique}").slice_response
    queue.ensure_exists(timeout=30)

    def slow(received: ReceivedMessage) -> None:
        time.sleep(0.3)

    try:
        queue.submit([message(queue, i) for i in range(24)])
        fixed = listener(queue, slow, concurrency=1, batch_size=32)
        assert fixed.run(max_messages=4) == 4
        assert fixed.stats["peak_running"] == 1 and fixed.stats["scale_ups"] == 0

        elastic = listener(queue, slow, concurrency=8, min_concurrency=1, batch_size=32)
        assert elastic.run(burst=True) == 20
        assert elastic.stats["scale_ups"] >= 1 and elastic.stats["depth_checks"] >= 1
        assert elastic.stats["peak_running"] > 1  # more than one handler ran at once
        assert elastic.stats["peak_concurrency"] <= 8
        assert elastic.stats["scale_downs"] >= 1 and elastic.pool.active == 1  # QueueEmpty: back to one
    finally:
        queue._client.delete_queue()
        queue.poison._client.delete_queue()


# -- crash recovery -----------------------------------------------------------------------


def test_a_sigkilled_processors_slice_is_handed_back_by_the_supervisor(pipe: Pipeline, tmp_path: Path) -> None:
    from photomosaics.local.children import hand_back_on_exit

    channels = _channels(tmp_path)
    # A 60 s lease (the default) and 30 s polls: without the hand-back the slice would wait a minute.
    env = {**SLOW_POLLS, **channels, "PHOTOMOSAICS_VISIBILITY_TIMEOUT": "300", "PHOTOMOSAICS_LEASE_SECONDS": "60"}
    pipe.start("controller", env=env)
    pipe.start("responder", env=env)
    handed: list[tuple[str, int]] = []
    hand_back = hand_back_on_exit(pipe.connection_string, channels)

    def on_exit(name: str, pid: int, code: int | None) -> None:
        before = len(list(Path(channels[LEASE_DIR_ENV]).glob(f"{pid}.json")))
        hand_back(name, pid, code)
        handed.append((name, before))

    argv = [sys.executable, "-c", "from photomosaics.cli import main; main()", "processor"]
    spec = ChildSpec(name="processor-1", argv=argv, env={**pipe.env, **env, "PHOTOMOSAICS_TEST_SLICE_DELAY": "1.5"})
    supervisor = Supervisor([spec], grace=10, backoff_min=0.2, backoff_max=1.0, poll_interval=0.05, on_exit=on_exit)
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    try:
        pipe.services.queues.image_request.hints = LocalHintChannel(channels[HINT_DIR_ENV])
        image = plain_photo(2, seed=12)
        rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=2)
        journal = lambda: list(Path(channels[LEASE_DIR_ENV]).glob("*.json"))  # noqa: E731
        wait_for(lambda: [p for p in journal() if p.stem == str(supervisor.pids()["processor-1"])] or None, seconds=60)
        victim = supervisor.pids()["processor-1"]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)  # mid-slice: it sleeps 1.5 s before rendering
        pipe.wait([rid], timeout=40)
    finally:
        supervisor.stop()
        thread.join(timeout=30)
    assert handed and handed[0] == ("processor-1", 1), handed
    events = [e.kind for e in pipe.services.jobs.events(rid)]
    assert events.count("done") == 1
    assert_job_pixel_identical(pipe, rid, image, tile=PLAIN_TILE, slices=2)


def test_a_child_that_died_before_journaling_gets_its_queues_announced_once_its_lease_ran_out(
    azurite_connection_string: str, tmp_path: Path
) -> None:
    """Killed between a receive and its journal write, a child leaves messages nobody can hand
    back; they come back unannounced when the lease runs out. The supervisor's hook says "poll
    now" on every work queue then, so hint-covered listeners do not wait for their 60 s poll."""
    from photomosaics.local.children import hand_back_on_exit

    channels = _channels(tmp_path)
    channel = LocalHintChannel(channels[HINT_DIR_ENV])
    names = {q.hint_name for q in QueueAccessor(StorageClients(azurite_connection_string)).monitored()}
    heard: dict[str, list[int | None]] = {name: [] for name in names}
    subscriptions = [
        channel.subscribe(name, lambda count, lane, name=name: heard[name].append(count)) for name in names
    ]
    try:
        on_exit = hand_back_on_exit(azurite_connection_string, channels, hints_url="", lease_seconds=1)
        on_exit("processor-1", 2**22 + 7, -9)  # no journal: it died before writing one
        wait_for(lambda: all(heard.values()) or None)
    finally:
        for subscription in subscriptions:
            subscription.close()
    assert all(counts == [None] for counts in heard.values()), heard  # once each, "poll now"


# -- the embedded Azurite is supervised ---------------------------------------------------


def test_a_killed_embedded_azurite_is_restarted_and_jobs_complete(tmp_path: Path) -> None:
    azurite = Azurite(location=tmp_path / "azurite")
    azurite.start()
    repaired: list[str] = []
    keeper = AzuriteKeeper(azurite, tmp_path / "storage-status.json", backoff_min=0.2, on_restart=repaired.append)
    stop = threading.Event()

    def watch() -> None:  # what the supervisor's on_tick does in `photomosaics run`
        while not stop.wait(0.1):
            keeper.check()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    pipe = Pipeline(azurite.connection_string, tmp_path / "roles")
    (tmp_path / "roles").mkdir()
    try:
        pipe.library_uri = pipe.create_library("tiles", synthetic_library())
        for role in ("controller", "processor", "responder"):
            pipe.start(role, env={"PHOTOMOSAICS_RETRY_DELAY_SECONDS": "1"})
        first = plain_photo(2, seed=13)
        rid1 = pipe.submit(first, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=2)
        pipe.wait([rid1], timeout=60)
        time.sleep(6.5)  # Azurite saves its metadata every 5 s (LokiJS autosave): let it, or the kill loses it
        ports = dict(azurite.ports)
        os.killpg(azurite.pid, signal.SIGKILL)

        def said_restarted() -> bool:  # the keeper's last step: counted, repaired, then this
            status = read_status({"PHOTOMOSAICS_STORAGE_STATUS_FILE": str(keeper.status_file)})
            return status is not None and status["state"] == "running" and "restarted" in str(status["message"])

        wait_for(said_restarted, seconds=60, what="the status file saying Azurite was restarted")
        assert keeper.restarts == 1
        assert keeper.azurite.ports == ports  # same ports: every connection string stays valid
        assert repaired == [keeper.azurite.connection_string]  # the storage repair hook ran once
        second = plain_photo(2, seed=14)
        rid2 = pipe.submit(second, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=2)
        pipe.wait([rid2], timeout=120)
        assert_job_pixel_identical(pipe, rid2, second, tile=PLAIN_TILE, slices=2)
    finally:
        pipe.stop_all()
        stop.set()
        watcher.join(timeout=5)
        keeper.azurite.stop()


def test_a_job_queued_before_a_stop_finishes_after_the_next_start_on_the_same_data(tmp_path: Path) -> None:
    """Ctrl-C, then `make run` again: the job accepted before the stop is still queued, and its
    messages name blobs by URL, address included. The embedded Azurite comes back on its ports
    (``PORTS_FILE``), so the roles of the next run take the job as their own account's."""
    first = Azurite(location=tmp_path / "azurite")
    first.start()
    before = Pipeline(first.connection_string, tmp_path / "roles")
    before.library_uri = before.create_library("tiles", synthetic_library())
    photo = plain_photo(2, seed=15)
    rid = before.submit(photo, library_uri=before.library_uri, tile_size=PLAIN_TILE, slices=2)  # no role runs yet
    first.stop()  # as `photomosaics run` stops it after its children
    (tmp_path / "roles").mkdir()
    with Azurite(location=tmp_path / "azurite") as again:
        after = Pipeline(again.connection_string, tmp_path / "roles", prefix=before.prefix)
        after.library_uri = before.library_uri
        try:
            for role in ("controller", "processor", "responder"):
                after.start(role)
            after.wait([rid], timeout=120)
            assert_job_pixel_identical(after, rid, photo, tile=PLAIN_TILE, slices=2)
        finally:
            after.stop_all()


def test_healthz_says_what_happened_to_the_embedded_azurite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dal.availability.storage_status import write_status
    from dal.connection_strings import azurite_connection_string

    status_file = tmp_path / "status.json"
    write_status(
        status_file,
        state="restarting",
        restarts=0,
        message="the embedded Azurite started by `photomosaics run` exited (code -9)",
    )
    monkeypatch.setenv("PHOTOMOSAICS_STORAGE_STATUS_FILE", str(status_file))
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite_connection_string("127.0.0.1", 9, 9, 9))
    monkeypatch.setenv("PHOTOMOSAICS_SECRET_KEY", uuid.uuid4().hex)
    from webapp import create_app

    client = create_app().test_client()
    response = client.get("/healthz")
    assert response.status_code == 503
    detail = response.get_json()["detail"]
    assert "exited (code -9)" in detail and "unset it" not in detail.split(" (")[0]
