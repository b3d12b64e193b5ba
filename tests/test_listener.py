"""The queue listener against a real Azurite: delete, retry, poison, renewal, back-off, stop."""

from __future__ import annotations

import random
import threading
import time
import uuid
from datetime import UTC, datetime

import pytest

from dal.config import StorageClients
from dal.queues.accessor import QueueAccessor
from dal.queues.consumable import ReceivedMessage
from dal.queues.work_queue import ImageProcessingQueue
from tests.support.listeners import in_thread, listener, message
from tests.support.queues import drop_queue
from tests.support.waiting import wait_for
from workers.runtime.backoff import poll_delay, retry_delay_for
from workers.runtime.errors import PermanentJobError, RetryLater
from workers.runtime.listener import QueueListener
from workers.runtime.listener_options import ListenerOptions

# ``queue`` (conftest): a fresh sliceresponse queue, 2 deliveries allowed, 2 s default invisibility.


def test_handled_messages_are_deleted(queue: ImageProcessingQueue) -> None:
    sent = [message(queue, i) for i in range(5)]
    queue.submit(sent)
    seen: list[ReceivedMessage] = []
    lock = threading.Lock()

    def handler(received: ReceivedMessage) -> None:
        with lock:
            seen.append(received)

    handled = listener(queue, handler, concurrency=3, batch_size=4).run(burst=True)

    assert handled == 5
    assert sorted(r.message.slice_sequence for r in seen) == [0, 1, 2, 3, 4]  # type: ignore[attr-defined]
    assert {r.message for r in seen} == set(sent)
    assert queue.peek() == []
    assert queue.approximate_depth() == 0
    assert queue.poison.peek() == []


def test_a_failed_message_comes_back_after_the_retry_delay_then_goes_to_poison(queue: ImageProcessingQueue) -> None:
    queue.submit(message(queue))
    attempts: list[tuple[int, float]] = []

    def handler(received: ReceivedMessage) -> None:
        attempts.append((received.dequeue_count, time.monotonic()))
        if len(attempts) == 1:
            # Released with the retry delay: not visible (not redelivered at once).
            threading.Timer(0.3, lambda: seen_while_waiting.append(len(queue.peek()))).start()
        raise ValueError("disk on fire")

    seen_while_waiting: list[int] = []
    subject = listener(queue, handler, retry_delay=2.0)
    thread = in_thread(subject.run)
    poisoned = wait_for(queue.poison.peek)
    subject.stop()
    thread.join(timeout=15)

    assert [count for count, _ in attempts] == [1, 2]  # threshold 2: two attempts, no third
    assert attempts[1][1] - attempts[0][1] >= 1.9  # came back only after the 2 s retry delay
    assert seen_while_waiting == [0]
    assert len(poisoned) == 1
    assert "ValueError: disk on fire" in poisoned[0].reason
    assert poisoned[0].dequeue_count == 2
    assert queue.peek() == []
    assert subject.stats["poisoned"] == 1 and subject.stats["released"] == 1


def test_retry_later_releases_without_poison(queue: ImageProcessingQueue) -> None:
    queue.submit(message(queue))
    counts: list[int] = []

    def handler(received: ReceivedMessage) -> None:
        counts.append(received.dequeue_count)
        if received.dequeue_count == 1:
            raise RetryLater("library not ready", delay=1)

    subject = listener(queue, handler)
    thread = in_thread(lambda: subject.run(max_messages=2))
    thread.join(timeout=15)

    assert counts == [1, 2]
    assert queue.peek() == [] and queue.poison.peek() == []


def test_permanent_error_goes_to_poison_at_once_with_the_reason(queue: ImageProcessingQueue) -> None:
    queue.submit(message(queue))
    hook_calls: list[tuple[str, str, bool]] = []

    def handler(received: ReceivedMessage) -> None:
        raise PermanentJobError("the image is not a picture")

    def on_poison(r: ReceivedMessage, reason: str, *, permanent: bool = False) -> None:
        hook_calls.append((r.message.request_id, reason, permanent))

    subject = listener(queue, handler, on_poison=on_poison)
    subject.run(burst=True)

    poisoned = queue.poison.peek()
    assert len(poisoned) == 1
    assert poisoned[0].reason == "the image is not a picture"
    assert poisoned[0].dequeue_count == 1
    assert len(hook_calls) == 1 and hook_calls[0][1:] == ("the image is not a picture", True)
    assert queue.peek() == []


def test_garbage_is_poisoned_and_valid_messages_keep_flowing(queue: ImageProcessingQueue) -> None:
    queue._client.send_message("this is not base64 json {")
    good = message(queue)
    queue.submit(good)
    seen: list[object] = []

    listener(queue, lambda r: seen.append(r.message)).run(burst=True)

    assert seen == [good]
    assert len(queue.poison.peek()) == 1
    assert queue.peek() == []


def test_a_slow_handler_keeps_its_message_invisible_and_deletes_it_at_the_end(
    queue: ImageProcessingQueue,
) -> None:
    queue.submit(message(queue))  # queue timeout is 2 s; the handler runs until past it, renewed
    peeks: list[int] = []
    calls: list[int] = []
    competitors: list[QueueListener] = []
    proved: list[bool] = []

    def handler(received: ReceivedMessage) -> None:
        """Work until the competitor has made a receive after the moment the message would have
        been visible again unrenewed (``next_visible_on`` of this delivery), and two renewals."""
        calls.append(received.dequeue_count)
        assert received.next_visible_on is not None
        empties_after: int | None = None
        give_up = time.monotonic() + 15
        while time.monotonic() < give_up:
            peeks.append(len(queue.peek()))  # a competing consumer would see it here
            if competitors and datetime.now(UTC) > received.next_visible_on:
                empties = competitors[0].stats["empty_receives"]
                empties_after = empties if empties_after is None else empties_after
                if empties > empties_after and subject.stats["renewed"] >= 2:
                    proved.append(True)
                    return
            time.sleep(0.1)

    subject = listener(queue, handler)
    subject_thread = in_thread(lambda: subject.run(max_messages=1))
    wait_for(lambda: calls)
    competitor_seen: list[ReceivedMessage] = []
    competitor = listener(queue, competitor_seen.append, name="competitor")
    competitors.append(competitor)
    competitor_thread = in_thread(competitor.run)
    subject_thread.join(timeout=20)
    competitor.stop()
    competitor_thread.join(timeout=15)

    assert calls == [1] and proved == [True]
    assert peeks and set(peeks) == {0}
    assert competitor_seen == []
    assert subject.stats["renewed"] >= 2
    assert subject.stats["succeeded"] == 1 and subject.stats["lost"] == 0
    assert queue.peek() == []


def test_stop_hands_back_unstarted_messages_at_once(queue: ImageProcessingQueue) -> None:
    queue.submit([message(queue, i) for i in range(4)])
    started = threading.Event()
    proceed = threading.Event()

    def handler(received: ReceivedMessage) -> None:
        started.set()
        proceed.wait(timeout=20)

    subject = listener(queue, handler, concurrency=1, prefetch=3, batch_size=16)
    thread = in_thread(subject.run)
    try:
        assert started.wait(timeout=15)
        wait_for(lambda: subject.held_count() == 4)  # one running, three prefetched
        subject.stop()
        visible = wait_for(lambda: len(queue.peek()) == 3 and queue.peek())  # while the first still runs
    finally:
        proceed.set()
        subject.stop()
        thread.join(timeout=15)

    assert not thread.is_alive()
    assert len(visible) == 3 and all(p.dequeue_count == 1 for p in visible)
    assert subject.stats["succeeded"] == 1 and subject.stats["released"] == 3
    assert len(queue.peek()) == 3  # the finished one was deleted, the others wait for the next worker


def test_immediate_stop_releases_even_running_work(queue: ImageProcessingQueue) -> None:
    queue.submit(message(queue))
    started = threading.Event()
    proceed = threading.Event()

    def handler(received: ReceivedMessage) -> None:
        started.set()
        proceed.wait(timeout=20)

    subject = listener(queue, handler)
    thread = in_thread(subject.run)
    try:
        assert started.wait(timeout=15)
        subject.stop(immediate=True)
        thread.join(timeout=15)
        assert not thread.is_alive()  # returned while the handler is still busy
        assert len(queue.peek()) == 1
    finally:
        proceed.set()
    wait_for(lambda: subject.stats["handled"] == 1)
    assert len(queue.peek()) == 1  # the abandoned handler did not delete what another worker may now own


def test_max_messages_ends_the_loop(queue: ImageProcessingQueue) -> None:
    queue.submit([message(queue, i) for i in range(5)])
    assert listener(queue, lambda r: None).run(max_messages=2) == 2
    assert len(queue.peek()) == 3


def test_backoff_schedule_doubles_with_jitter_and_saturates_at_the_maximum() -> None:
    rng = random.Random(7)
    delays = [poll_delay(n, poll_min=0.1, poll_max=10.0, rng=rng) for n in range(1, 16)]
    for n, delay in enumerate(delays, start=1):
        base = 0.1 * 2 ** (n - 1)
        assert min(10.0, max(0.1, 0.8 * base)) - 1e-9 <= delay <= min(10.0, 1.2 * base) + 1e-9
    assert delays[-5:] == [10.0] * 5  # saturated: exactly the cap, <= 360 receives per idle hour
    assert len({round(d, 6) for d in delays[:6]}) == 6  # jittered, not lock-step
    assert poll_delay(0, poll_min=0.1, poll_max=10.0) == 0.0


def test_retry_delay_grows_with_the_dequeue_count() -> None:
    assert [retry_delay_for(n, retry_delay=5, max_retry_delay=300) for n in range(1, 9)] == [
        5,
        10,
        20,
        40,
        80,
        160,
        300,
        300,
    ]


def test_an_idle_listener_backs_off_and_a_new_message_resets_it(queue: ImageProcessingQueue) -> None:
    idle_at_handling: list[int] = []
    done = threading.Event()

    def handler(received: ReceivedMessage) -> None:
        idle_at_handling.append(subject.idle_polls)
        done.set()

    subject = listener(queue, handler, poll_min=0.02, poll_max=0.1)
    thread = in_thread(subject.run)
    wait_for(lambda: subject.idle_polls >= 6)
    queue.submit(message(queue))
    assert done.wait(timeout=15)
    subject.stop()
    thread.join(timeout=15)
    assert idle_at_handling == [0]
    assert queue.peek() == []


def test_invalid_options_are_refused(queue: ImageProcessingQueue) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        ListenerOptions(batch_size=33)
    with pytest.raises(ValueError, match="poll_min"):
        ListenerOptions(poll_min=2, poll_max=1)


def test_nudge_ends_an_idle_wait_at_once(queue: ImageProcessingQueue) -> None:
    done = threading.Event()
    subject = listener(queue, lambda r: done.set(), poll_min=30.0, poll_max=30.0)
    thread = in_thread(subject.run)
    wait_for(lambda: subject.stats["empty_receives"] >= 1)  # now asleep for 30 s
    queue.submit(message(queue))
    subject.nudge()
    assert done.wait(timeout=15)  # without the nudge the next poll is 30 s away
    subject.stop()
    thread.join(timeout=15)
    assert not thread.is_alive()


def test_work_on_one_queue_of_a_role_wakes_its_other_listeners(storage: StorageClients, unique: str) -> None:
    from dal.queues.messages import SliceRequestMessage
    from workers.runtime.role import Role, run_role

    queues = QueueAccessor(storage, prefix=f"n{unique}")
    busy, sleepy = queues.slice_request, queues.slice_response
    for q in (busy, sleepy):
        q.ensure_exists(poison_threshold=2, timeout=5)
    done = threading.Event()
    fast = listener(busy, lambda r: None, name="fast", poll_min=0.05, poll_max=0.1)
    slow = listener(sleepy, lambda r: done.set(), name="slow", poll_min=30.0, poll_max=30.0)
    role = Role("pair", [fast, slow])
    thread = in_thread(lambda: run_role(role, install_signals=False))
    try:
        wait_for(lambda: slow.stats["empty_receives"] >= 1)  # the slow one sleeps 30 s now
        sleepy.submit(message(sleepy))
        busy.submit(
            SliceRequestMessage(
                queue_uri=busy.url,
                client_id="tester",
                request_id=str(uuid.uuid4()),
                tile_size=8,
                slice_sequence=0,
                image_library_uri="http://127.0.0.1/devstoreaccount1/lib",
                slice_uri="http://127.0.0.1/devstoreaccount1/s/0.png",
            )
        )
        assert done.wait(timeout=15)  # picked up after the nudge, not after 30 s
    finally:
        role.stop()
        thread.join(timeout=15)
        for q in (busy, sleepy):
            drop_queue(q)
    assert not thread.is_alive()
