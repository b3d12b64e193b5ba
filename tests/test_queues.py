"""Work queues against a real Azurite: delivery, visibility, poison, TTL, claim checks."""

from __future__ import annotations

import base64
import uuid

import pytest

from dal.config import CLAIM_CHECK_CONTAINER, Settings, StorageClients
from dal.errors import QueueMessageFormatException
from dal.queues.accessor import QueueAccessor
from dal.queues.messages import (
    ImageRequestMessage,
    ImageResponseMessage,
    QueueMessage,
    SliceRequestMessage,
    SliceResponseMessage,
)
from dal.queues.stored_queue import StoredQueue
from dal.queues.wire import (
    MAX_ENCODED_MESSAGE_BYTES,
    ClaimCheck,
    PoisonEntry,
    claim_check_reference,
    encoded_length,
    parse_claim_check,
    poison_envelope,
)
from dal.queues.work_queue import ImageProcessingQueue
from tests.support.waiting import wait_for

RID = "5d0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
BLOB = "http://127.0.0.1:10000/devstoreaccount1"


@pytest.fixture
def queues(storage: StorageClients, unique: str) -> QueueAccessor:
    accessor = QueueAccessor(storage, prefix=f"q{unique}")
    accessor.ensure_all()
    return accessor


def image_request(queue: ImageProcessingQueue, **changes: object) -> ImageRequestMessage:
    fields: dict[str, object] = dict(
        queue_uri=queue.url,
        client_id="alice",
        request_id=RID,
        image_uri=f"{BLOB}/imageinput/{RID}.jpg",
        image_library_uri=f"{BLOB}/flowers",
        tile_size=8,
        slices=3,
        tiles_across=90,
    )
    fields.update(changes)
    return ImageRequestMessage(**fields)  # type: ignore[arg-type]


def one_of_each(queues: QueueAccessor) -> list[QueueMessage]:
    common = dict(client_id="bob", request_id=str(uuid.uuid4()))
    return [
        image_request(queues.image_request, tiles_across=None, **common),  # type: ignore[arg-type]
        SliceRequestMessage(
            queue_uri=queues.slice_request.url,
            image_library_uri=f"{BLOB}/flowers",
            slice_uri=f"{BLOB}/slicerequest/x/0.png",
            slice_sequence=0,
            tile_size=64,
            **common,
        ),
        SliceResponseMessage(
            queue_uri=queues.slice_response.url, slice_uri=f"{BLOB}/sliceresponse/x/2.png", slice_sequence=2, **common
        ),
        ImageResponseMessage(queue_uri=queues.image_response.url, image_uri=f"{BLOB}/imageoutput/x.jpg", **common),
    ]


def raw_client(queue: ImageProcessingQueue):  # type: ignore[no-untyped-def]
    """The plain SDK client of a queue, to put what our code never would (garbage)."""
    return queue.storage.queue_service.get_queue_client(queue.name)


def test_all_four_types_round_trip_through_real_queues(queues: QueueAccessor) -> None:
    for message in one_of_each(queues):
        queue = queues.for_message(message)
        queue.submit(message)
        [received] = queue.accept_messages(32)
        assert received.message == message
        assert received.dequeue_count == 1 and received.queue_name == queue.name
        assert received.inserted_on is not None and received.expires_on is not None
        assert queue.delete(received) is True
        assert queue.approximate_depth() == 0


def test_wire_encoding_is_base64_of_the_payload(queues: QueueAccessor) -> None:
    queue = queues.image_request
    message = image_request(queue)
    queue.submit(message)
    [raw] = raw_client(queue).peek_messages()
    assert base64.b64decode(raw.content, validate=True).decode() == message.payload()


def test_for_message_finds_the_queue_by_uri_and_checks_the_type(queues: QueueAccessor) -> None:
    for message, queue in zip(one_of_each(queues), queues.workflow()):
        assert queues.for_message(message) is queue
    assert queues.by_name("slicerequest") is queues.slice_request
    stray = image_request(queues.image_request, queue_uri=f"{BLOB}/elsewhere")
    with pytest.raises(QueueMessageFormatException, match="names none of the queues"):
        queues.for_message(stray)
    misaddressed = image_request(queues.image_request, queue_uri=queues.slice_request.url)
    with pytest.raises(QueueMessageFormatException, match="does not belong in queue"):
        queues.for_message(misaddressed)


def test_submit_rejects_a_message_of_another_queue_and_sends_nothing(queues: QueueAccessor) -> None:
    good = image_request(queues.image_request)
    wrong = one_of_each(queues)[3]
    with pytest.raises(QueueMessageFormatException, match="does not belong"):
        queues.image_request.submit([good, wrong])
    assert queues.image_request.peek() == []


def test_batches_are_bounded_and_fan_out_is_complete(queues: QueueAccessor) -> None:
    queue = queues.slice_request
    for bad in (0, 33):
        with pytest.raises(ValueError, match="1..32"):
            queue.accept_messages(bad)
    fan_out = [
        SliceRequestMessage(
            queue_uri=queue.url,
            client_id="c",
            request_id=RID,
            image_library_uri=f"{BLOB}/l",
            slice_uri=f"{BLOB}/slicerequest/{RID}/{seq}.png",
            slice_sequence=seq,
            tile_size=4,
        )
        for seq in range(40)
    ]
    queue.submit(fan_out)
    first = queue.accept_messages(32)
    assert len(first) == 32  # one bounded receive, never more than asked
    rest = queue.accept_messages(32)
    assert sorted(r.message.slice_sequence for r in first + rest) == list(range(40))  # type: ignore[attr-defined]


def test_message_reappears_after_its_invisibility_and_dequeue_count_rises(queues: QueueAccessor) -> None:
    queue = queues.image_request
    queue.submit(image_request(queue))
    [first] = queue.accept_messages(visibility_timeout=1)
    assert queue.accept_messages() == []  # invisible while in hand
    again = wait_for(lambda: queue.accept_messages(visibility_timeout=1))
    assert [r.id for r in again] == [first.id]
    assert again[0].dequeue_count == 2
    assert queue.delete(first) is False  # the old pop receipt no longer works
    assert queue.delete(again[0]) is True


def test_renew_keeps_it_invisible_and_the_old_receipt_stops_working(queues: QueueAccessor) -> None:
    queue = queues.image_request
    queue.submit(image_request(queue))
    [held] = queue.accept_messages(visibility_timeout=1)
    renewed = queue.renew(held, timeout=30)
    assert renewed is not None and renewed.pop_receipt != held.pop_receipt
    # A witness taken for 1 s after it: the receive that sees the witness again is past the
    # held message's first invisibility, and the held one is not in it.
    witness = image_request(queue, request_id=str(uuid.uuid4()))
    queue.submit(witness)
    [taken] = queue.accept_messages(visibility_timeout=1)
    assert taken.message == witness
    back = wait_for(lambda: queue.accept_messages(32, visibility_timeout=30), what="the witness visible again")
    assert [r.id for r in back] == [taken.id]
    assert queue.renew(held, timeout=30) is None
    assert queue.release(held) is False
    assert queue.delete(held) is False
    assert queue.delete(renewed) is True


def test_release_makes_it_visible_at_once(queues: QueueAccessor) -> None:
    queue = queues.image_request
    queue.submit(image_request(queue))
    [held] = queue.accept_messages(visibility_timeout=300)
    assert queue.release(held) is True
    [again] = queue.accept_messages()
    assert again.id == held.id and again.dequeue_count == 2


def test_a_queue_whose_messages_are_all_in_flight_has_none_visible_though_its_count_says_one(
    queues: QueueAccessor,
) -> None:
    """What the hedger asks before it hedges (``workers.controller.hedging``): is a message
    waiting? The approximate count cannot say (it counts messages in a worker's hands); a peek can."""
    queue = queues.image_request
    assert queue.oldest_visible() is None
    queue.submit(image_request(queue))
    assert queue.oldest_visible() is not None
    [held] = queue.accept_messages(visibility_timeout=300)
    assert queue.oldest_visible() is None and queue.approximate_depth() == 1
    assert queue.release(held)
    assert queue.oldest_visible() is not None


def test_ttl_expiry(queues: QueueAccessor) -> None:
    queue = queues.image_response
    queue.submit(one_of_each(queues)[3], ttl=1)
    assert len(queue.peek()) == 1
    assert wait_for(lambda: queue.peek() == []) is True
    assert queue.accept_messages() == []


def test_threshold_and_timeout_come_from_queue_metadata(storage: StorageClients, unique: str) -> None:
    queue = ImageProcessingQueue(storage, "imagerequest", prefix=f"m{unique}", settings=Settings(poison_threshold=9))
    assert (queue.poison_threshold, queue.timeout) == (9, 300)  # no queue yet: the settings
    queue.ensure_exists()
    raw_client(queue).set_queue_metadata(metadata={"poisonthreshold": "2", "defaulttimeout": "42"})
    fresh = ImageProcessingQueue(storage, "imagerequest", prefix=f"m{unique}")
    assert (fresh.poison_threshold, fresh.timeout) == (2, 42)
    raw_client(queue).set_queue_metadata(metadata={"poisonthreshold": "many", "defaulttimeout": "0"})
    fresh.refresh()
    assert (fresh.poison_threshold, fresh.timeout) == (5, 300)  # nonsense: the defaults, with a warning
    fresh.configure(timeout=1, poison_threshold=3)
    assert ImageProcessingQueue(storage, "imagerequest", prefix=f"m{unique}").timeout == 1
    # the metadata timeout is the default invisibility of a receive
    fresh.submit(image_request(fresh))
    [held] = fresh.accept_messages()
    assert wait_for(lambda: fresh.accept_messages())[0].id == held.id


def test_poison_after_the_threshold_keeps_reason_count_and_payload(queues: QueueAccessor) -> None:
    queue = queues.image_request
    queue.configure(poison_threshold=2)
    message = image_request(queue)
    queue.submit(message)
    for attempt in (1, 2):
        [held] = queue.accept_messages()
        assert held.dequeue_count == attempt
        assert queue.release(held)
    assert queue.accept_messages() == []  # third delivery: moved aside before it is handed out
    assert queue.peek() == []
    [entry] = queue.poison.peek()
    assert entry.dequeue_count == 3 and "exceeds the poison threshold 2" in entry.reason
    assert entry.queue == queue.name and QueueMessage.parse(entry.payload) == message
    [raw] = raw_client(queue.poison).peek_messages()
    assert raw.expires_on.year == 9999  # ttl -1: poison copies never expire


def test_a_message_poisoned_for_its_dequeue_count_is_reported_so_its_job_can_fail(
    queues: QueueAccessor,
) -> None:
    """A worker that dies on a message every time never returns: the receiver tells the job."""
    queue = queues.image_request
    queue.configure(poison_threshold=1)
    message = image_request(queue)
    queue.submit(message)
    [held] = queue.accept_messages()
    assert queue.release(held)  # as if the worker had crashed and the lease ran out
    told: list[tuple[QueueMessage, int, str]] = []
    assert queue.accept_messages(on_poison=lambda r, why: told.append((r.message, r.dequeue_count, why))) == []
    assert told == [(message, 2, "dequeue count 2 exceeds the poison threshold 1")]
    queue.submit(message)
    raw_client(queue).send_message("not base64 at all!")  # garbage has no job: nobody is told
    told.clear()
    assert len(queue.accept_messages(on_poison=lambda r, why: told.append((r.message, 0, why)))) == 1
    assert told == []


def test_move_to_poison_on_a_permanent_error(queues: QueueAccessor) -> None:
    queue = queues.slice_response
    message = one_of_each(queues)[2]
    queue.submit(message)
    [held] = queue.accept_messages()
    queue.move_to_poison(held, "slice blob is corrupt")
    assert queue.peek() == []
    [entry] = queue.poison.peek()
    assert (entry.reason, entry.dequeue_count, entry.message_id) == ("slice blob is corrupt", 1, held.id)
    assert QueueMessage.parse(entry.payload) == message
    assert queue.poison.approximate_depth() == 1


def test_garbage_in_a_queue_lands_in_poison_with_the_reason(queues: QueueAccessor) -> None:
    queue = queues.image_request
    client = raw_client(queue)
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    garbage = {
        "%%% not base64 %%%": ("not Base64", "wire"),
        b64(b"\xff\xfe\x00"): ("not Base64 of UTF-8", "wire"),
        b64(b"hello, world"): ("payload is not JSON", "text"),
        b64(one_of_each(queues)[1].payload().encode()): ("belongs in queue 'slicerequest'", "text"),
        b64(image_request(queue).payload().replace('"tile_size":8', '"tile_size":99').encode()): (
            "tile_size must be 1..64",
            "text",
        ),
    }
    for text in garbage:
        client.send_message(text)
    good = image_request(queue)
    queue.submit(good)
    accepted = queue.accept_messages(32)
    assert [r.message for r in accepted] == [good]  # one bad message never blocks the good ones
    entries = queue.poison.peek()
    assert len(entries) == len(garbage)
    by_wire = {}
    for entry in entries:
        wire = entry.payload if entry.payload_encoding == "wire" else b64(entry.payload.encode())
        by_wire[wire] = entry
    assert set(by_wire) == set(garbage)  # nothing lost: each original text is in its envelope
    for text, (reason, encoding) in garbage.items():
        assert reason in by_wire[text].reason and by_wire[text].payload_encoding == encoding
        assert by_wire[text].dequeue_count == 1


def test_claim_check_envelope_functions() -> None:
    check = ClaimCheck(container="queuepayloads", blob="imagerequest/abc.json", length=204_800)
    assert parse_claim_check(claim_check_reference(check)) == check
    assert parse_claim_check('{"type":"ImageRequest","version":1}') is None
    assert parse_claim_check('{"type":"ClaimCheck","container":3}') is None
    assert encoded_length("abc") == 4 and encoded_length("é") == 4
    text = poison_envelope(reason="r", dequeue_count=6, queue="q", payload="p\x00é", message_id="m")
    entry = PoisonEntry.from_text(text)
    assert (entry.reason, entry.dequeue_count, entry.queue, entry.payload, entry.message_id) == (
        "r",
        6,
        "q",
        "p\x00é",
        "m",
    )


def test_large_payload_travels_as_a_claim_check_and_its_blob_goes_with_the_message(
    queues: QueueAccessor, storage: StorageClients
) -> None:
    queue = queues.image_request
    big = image_request(queue, image_uri=f"{BLOB}/imageinput/" + "x" * (200 * 1024) + ".jpg")
    assert encoded_length(big.payload()) > MAX_ENCODED_MESSAGE_BYTES
    queue.submit(big)
    container = storage.blob_service.get_container_client(f"{queues.prefix}{CLAIM_CHECK_CONTAINER}")
    [blob_name] = [b.name for b in container.list_blobs()]
    [raw] = raw_client(queue).peek_messages()
    reference = base64.b64decode(raw.content).decode()
    assert parse_claim_check(reference) == ClaimCheck(
        container=container.container_name, blob=blob_name, length=len(big.payload())
    )
    [peeked] = queue.peek()
    assert peeked.message == big
    [held] = queue.accept_messages()
    assert held.message == big and held.claim_check is not None
    assert queue.delete(held) is True
    assert list(container.list_blobs()) == []


def test_a_claim_check_whose_blob_is_gone_is_poison(queues: QueueAccessor, storage: StorageClients) -> None:
    queue = queues.image_request
    queue.submit(image_request(queue, image_uri=f"{BLOB}/" + "y" * 70_000))
    container = storage.blob_service.get_container_client(f"{queues.prefix}{CLAIM_CHECK_CONTAINER}")
    for blob in container.list_blobs():
        container.delete_blob(blob.name)
    assert queue.accept_messages() == []
    [entry] = queue.poison.peek()
    assert "ClaimCheckMissingError" in entry.reason and parse_claim_check(entry.payload) is not None


def test_a_claim_check_naming_another_container_is_poison_and_that_blob_is_left_alone(
    queues: QueueAccessor, storage: StorageClients, unique: str
) -> None:
    """A forged reference could make a worker read, and on delete remove, any blob of the account
    (a library's index, a job's result): only the project's claim-check container is resolved."""
    queue = queues.image_request
    foreign = storage.blob_service.get_container_client(f"f{unique}elsewhere")
    foreign.create_container()
    payload = image_request(queue).payload()
    foreign.upload_blob("index.zip", payload.encode())
    forged = ClaimCheck(container=foreign.container_name, blob="index.zip", length=len(payload))
    raw_client(queue).send_message(base64.b64encode(claim_check_reference(forged).encode()).decode())

    [peeked] = queue.peek()
    assert peeked.message is None and "only" in (peeked.error or "") and foreign.container_name in (peeked.error or "")
    assert queue.accept_messages() == []
    [entry] = queue.poison.peek()
    assert "ClaimCheckRefusedError" in entry.reason and foreign.container_name in entry.reason
    assert parse_claim_check(entry.payload) == forged  # the reference itself is the evidence
    assert foreign.get_blob_client("index.zip").download_blob().readall() == payload.encode()
    queue.poison.clear()
    assert foreign.get_blob_client("index.zip").exists()  # clearing the poison does not delete it either
    foreign.delete_container()


def test_clear_and_depth(queues: QueueAccessor, storage: StorageClients) -> None:
    queue = queues.image_request
    queue.submit([image_request(queue), image_request(queue, image_uri=f"{BLOB}/" + "z" * 70_000)])
    assert queue.approximate_depth() == 2
    queue.clear()
    assert queue.approximate_depth() == 0
    container = storage.blob_service.get_container_client(f"{queues.prefix}{CLAIM_CHECK_CONTAINER}")
    assert list(container.list_blobs()) == []


def test_a_large_message_moved_to_poison_keeps_its_whole_payload(
    queues: QueueAccessor, storage: StorageClients
) -> None:
    queue = queues.image_request
    big = image_request(queue, image_uri=f"{BLOB}/" + "w" * 100_000)
    queue.submit(big)
    [held] = queue.accept_messages()
    queue.move_to_poison(held, "too big to render")
    container = storage.blob_service.get_container_client(f"{queues.prefix}{CLAIM_CHECK_CONTAINER}")
    [blob] = [b.name for b in container.list_blobs()]
    assert blob.startswith(f"{queue.poison.name}/")  # the envelope's own claim check; the original is gone
    [entry] = queue.poison.peek()
    assert QueueMessage.parse(entry.payload) == big and entry.reason == "too big to render"
    queue.poison.clear()
    assert list(container.list_blobs()) == []


def test_a_stored_queue_puts_takes_and_deletes_plain_texts_with_claim_checks(
    storage: StorageClients, unique: str
) -> None:
    """The public text surface the failover backlog uses: any size, claim checks cleaned up."""
    queue = StoredQueue(storage, f"t{unique}-texts", claim_container=f"t{unique}{CLAIM_CHECK_CONTAINER}")
    assert queue.take_texts(1, visibility_timeout=5) == []  # no queue yet: nothing, no error
    queue.create()
    big = "x" * 70_000  # over the 64 KiB message limit: a claim check
    queue.put_text("small")
    queue.put_text(big)
    taken = queue.take_texts(32, visibility_timeout=5)
    assert sorted(t.text for t in taken) == sorted(["small", big])
    [checked] = [t for t in taken if t.claim_check is not None]
    assert all(queue.delete_taken(t) for t in taken)
    assert queue.approximate_depth() == 0
    claims = storage.blob_service.get_container_client(checked.claim_check.container)
    assert not claims.get_blob_client(checked.claim_check.blob).exists()
    queue._client.delete_queue()
