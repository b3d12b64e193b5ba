"""Typed messages: exact round trips, and every kind of bad payload rejected with one error."""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dal import errors
from dal.errors import QueueMessageFormatException
from dal.queues.message_fields import MAX_INLINE_BAND_CHARS, rule_of
from dal.queues.messages import (
    MESSAGE_TYPES,
    ImageRequestMessage,
    ImageResponseMessage,
    LibraryCleanupMessage,
    QueueMessage,
    SliceRequestMessage,
    SliceResponseMessage,
)
from dal.queues.wire import MAX_ENCODED_MESSAGE_BYTES
from workers.imaging.slicing import INLINE_BAND_MAX_BYTES

PROPERTY = settings(max_examples=200, deadline=None)

RID = "0b7f4a8e-2c1d-4e5f-9a6b-1c2d3e4f5a6b"
Q = "http://127.0.0.1:10001/devstoreaccount1/"


def image_request(**changes: object) -> ImageRequestMessage:
    fields: dict[str, object] = dict(
        queue_uri=Q + "imagerequest",
        client_id="alice_01",
        request_id=RID,
        image_uri="http://127.0.0.1:10000/devstoreaccount1/imageinput/" + RID + ".jpg",
        image_library_uri="http://127.0.0.1:10000/devstoreaccount1/flowers",
        tile_size=16,
        slices=4,
        tiles_across=120,
    )
    fields.update(changes)
    return ImageRequestMessage(**fields)  # type: ignore[arg-type]


EXAMPLES: list[QueueMessage] = [
    image_request(),
    image_request(tiles_across=None),
    SliceRequestMessage(
        queue_uri=Q + "slicerequest",
        client_id="c",
        request_id=RID,
        image_library_uri="https://acct.blob.core.windows.net/flowers",
        slice_uri="https://x/s/0.png",
        slice_sequence=0,
        tile_size=64,
    ),
    SliceResponseMessage(
        queue_uri=Q + "sliceresponse",
        client_id="c-1",
        request_id=RID,
        slice_uri="https://x/r/3.png",
        slice_sequence=3,
    ),
    ImageResponseMessage(queue_uri=Q + "imageresponse", client_id="Z", request_id=RID, image_uri="https://x/o.png"),
]


def test_error_is_the_one_from_dal_errors() -> None:
    assert QueueMessageFormatException is errors.QueueMessageFormatException


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: m.TYPE)
def test_round_trip_of_each_type(message: QueueMessage) -> None:
    text = message.payload()
    body = json.loads(text)
    assert list(body)[:2] == ["type", "version"]
    assert body["type"] == message.TYPE and body["version"] == 1
    assert QueueMessage.parse(text) == message
    assert type(message).parse(text.encode()) == message
    assert QueueMessage.parse(text, queue_name=message.QUEUE) == message
    assert QueueMessage.parse(text, queue_name="t0123456789" + message.QUEUE) == message


def test_every_field_declares_its_rule_and_only_an_optional_one_defaults() -> None:
    """The rules live on the fields (``required``/``optional``): a field added without one fails
    here, and an optional one (may be absent on the wire) is exactly one whose default is None."""
    for cls in MESSAGE_TYPES.values():
        for f in dataclasses.fields(cls):
            rule = rule_of(f)  # KeyError: declared without a rule
            assert rule.optional == (f.default is None), (cls.__name__, f.name)
            assert rule.optional or f.default is dataclasses.MISSING, (cls.__name__, f.name)


def test_messages_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        image_request().tile_size = 3  # type: ignore[misc]


def test_base_class_is_abstract() -> None:
    with pytest.raises(TypeError):
        QueueMessage(queue_uri=Q, client_id="a", request_id=RID)


def test_tiles_across_may_be_absent_on_the_wire() -> None:
    body = json.loads(image_request().payload())
    del body["tiles_across"]
    assert ImageRequestMessage.parse(json.dumps(body)).tiles_across is None


def test_an_inline_band_is_written_only_when_set_and_checked() -> None:
    plain = EXAMPLES[2]
    assert isinstance(plain, SliceRequestMessage) and plain.band is None
    assert "band" not in json.loads(plain.payload())  # without a band: byte for byte as before
    inline = dataclasses.replace(plain, band=base64.b64encode(b"\x89PNG band").decode())
    body = json.loads(inline.payload())
    assert body["version"] == 1 and base64.b64decode(body["band"]) == b"\x89PNG band"
    assert QueueMessage.parse(inline.payload()) == inline
    # The biggest band the controller inlines still fits the queue's 64 KiB after the wire's Base64.
    biggest = dataclasses.replace(plain, band=base64.b64encode(bytes(INLINE_BAND_MAX_BYTES)).decode())
    assert len(base64.b64encode(biggest.payload().encode())) < MAX_ENCODED_MESSAGE_BYTES - 4096
    for bad, why in (
        ("not base64!", "padded Base64"),
        ("", "padded Base64"),
        (7, "Base64 string"),
        ("A" * (MAX_INLINE_BAND_CHARS + 4), "padded Base64"),
    ):
        with pytest.raises(QueueMessageFormatException, match=why):
            QueueMessage.parse(json.dumps({**body, "band": bad}))


@pytest.mark.parametrize("kind", [ImageRequestMessage, SliceRequestMessage])
def test_the_colour_correction_is_written_only_when_set_and_checked(kind: type[QueueMessage]) -> None:
    plain = next(m for m in EXAMPLES if type(m) is kind)
    assert plain.correction is None and "correction" not in json.loads(plain.payload())
    for value in (0, 35, 100):
        chosen = dataclasses.replace(plain, correction=value)  # type: ignore[call-arg]
        body = json.loads(chosen.payload())
        assert body["version"] == 1 and body["correction"] == value
        assert QueueMessage.parse(chosen.payload()) == chosen
    for bad, why in ((-1, "0..100"), (101, "0..100"), (True, "integer"), ("50", "integer"), (50.0, "integer")):
        with pytest.raises(QueueMessageFormatException, match=f"correction must be .*{why}"):
            QueueMessage.parse(json.dumps({**json.loads(plain.payload()), "correction": bad}))


@pytest.mark.parametrize("kind", [ImageRequestMessage, SliceRequestMessage])
def test_the_library_version_is_written_only_when_set_and_checked(kind: type[QueueMessage]) -> None:
    """A job pins its library's version; a job of an index.zip library is byte for byte as before."""
    plain = next(m for m in EXAMPLES if type(m) is kind)
    assert plain.library_version is None and "library_version" not in json.loads(plain.payload())  # type: ignore[attr-defined]
    pinned = dataclasses.replace(plain, library_version="0123456789abcdef0123")  # type: ignore[call-arg]
    assert json.loads(pinned.payload())["version"] == 1 and QueueMessage.parse(pinned.payload()) == pinned
    for bad in ("", "ABC", "g" * 20, "a" * 65, 12, "../x"):
        with pytest.raises(QueueMessageFormatException, match="library_version must be"):
            QueueMessage.parse(json.dumps({**json.loads(plain.payload()), "library_version": bad}))


@pytest.mark.parametrize("kind", [ImageRequestMessage, SliceRequestMessage])
def test_cell_sizes_and_their_split_are_written_only_when_set_and_checked(kind: type[QueueMessage]) -> None:
    """Cells of several sizes ride as a JSON list (a tuple in the message); one size is the field
    left out, so a job of one size is byte for byte as before."""
    plain = next(m for m in EXAMPLES if type(m) is kind)
    body = json.loads(plain.payload())
    assert "cell_sizes" not in body and "split" not in body
    for sizes, split in (((1, 2), None), ((1, 4), 0), ((1, 2, 4), 100)):
        chosen = dataclasses.replace(plain, cell_sizes=list(sizes), split=split)  # type: ignore[call-arg]
        assert chosen.cell_sizes == sizes  # type: ignore[attr-defined]
        wire = json.loads(chosen.payload())
        assert wire["version"] == 1 and wire["cell_sizes"] == list(sizes) and wire.get("split") == split
        assert QueueMessage.parse(chosen.payload()) == chosen
    for bad, why in (
        ([1], "one size is the default"),
        ([2, 4], "rise from 1"),
        ([1, 3], "rise from 1"),
        ([1, 2, 2], "rise from 1"),
        ([1, True], "rise from 1"),
        ("1,2", "rise from 1"),
        ([], "rise from 1"),
    ):
        with pytest.raises(QueueMessageFormatException, match=f"cell_sizes: .*{why}"):
            QueueMessage.parse(json.dumps({**body, "cell_sizes": bad}))
    for bad in (-1, 101, 50.0, "50"):
        with pytest.raises(QueueMessageFormatException, match="split must be"):
            QueueMessage.parse(json.dumps({**body, "cell_sizes": [1, 2], "split": bad}))
    with pytest.raises(QueueMessageFormatException, match="split .* needs cell_sizes"):
        QueueMessage.parse(json.dumps({**body, "split": 50}))


def test_a_job_of_several_cell_sizes_takes_neither_fair_use_nor_every_photo() -> None:
    for fair in ({"max_uses": 3}, {"use_every_photo": True}):
        with pytest.raises(QueueMessageFormatException, match="cannot be combined"):
            image_request(cell_sizes=(1, 2), **fair)


def test_a_slice_report_is_written_only_when_set_and_checked() -> None:
    """A SliceResponse may carry its slice's log line (the controller keeps it in the job row)."""
    plain = next(m for m in EXAMPLES if isinstance(m, SliceResponseMessage))
    assert plain.report is None and "report" not in json.loads(plain.payload())  # byte for byte as before
    report = {
        "actor": "processor-1",
        "message": "slice 1 rendered (960x188 px) in 0.05 s",
        "at": "2026-11-23T21:00:00.123456+00:00",
        "seconds": 0.05,
        "stages": {"render": 0.04, "slice_upload": 0.01},
    }
    reported = dataclasses.replace(plain, report=report)
    assert QueueMessage.parse(reported.payload()) == reported
    body = json.loads(reported.payload())
    for bad, why in (
        ([], "must be an object"),
        ({**report, "extra": 1}, "unexpected field"),
        ({**report, "actor": ""}, "report.actor"),
        ({**report, "message": "x" * 301}, "report.message"),
        ({**report, "at": "yesterday"}, "ISO 8601"),
        ({**report, "seconds": -1}, "report.seconds"),
        ({**report, "stages": {"render": "fast"}}, "report.stages"),
        ({**report, "stages": {f"s{i}": 0 for i in range(33)}}, "report.stages"),
    ):
        with pytest.raises(QueueMessageFormatException, match=why):
            QueueMessage.parse(json.dumps({**body, "report": bad}))


def test_an_image_response_may_say_its_stitcher_finished_the_job() -> None:
    plain = next(m for m in EXAMPLES if isinstance(m, ImageResponseMessage))
    assert plain.job_done is None and "job_done" not in json.loads(plain.payload())  # byte for byte as before
    done = dataclasses.replace(plain, job_done=True)  # the stitcher finished the job itself
    assert QueueMessage.parse(done.payload()) == done and json.loads(done.payload())["job_done"] is True
    for bad in (False, 1, "true"):
        with pytest.raises(QueueMessageFormatException, match="job_done"):
            QueueMessage.parse(json.dumps({**json.loads(done.payload()), "job_done": bad}))


def test_an_image_request_may_ask_for_every_photo_true_or_absent() -> None:
    plain = next(m for m in EXAMPLES if isinstance(m, ImageRequestMessage))
    assert plain.use_every_photo is None and "use_every_photo" not in json.loads(plain.payload())  # as before
    every = dataclasses.replace(plain, use_every_photo=True)
    assert QueueMessage.parse(every.payload()) == every and json.loads(every.payload())["use_every_photo"] is True
    for bad in (False, 1, "true"):
        with pytest.raises(QueueMessageFormatException, match="use_every_photo"):
            QueueMessage.parse(json.dumps({**json.loads(every.payload()), "use_every_photo": bad}))


def reason_of(text: str | bytes, **kwargs: object) -> str:
    with pytest.raises(QueueMessageFormatException) as info:
        QueueMessage.parse(text, **kwargs)  # type: ignore[arg-type]
    assert info.value.raw == text  # the poison copy can keep the original
    return str(info.value)


def mutated(change: dict[str, object], *, drop: str | None = None, base: QueueMessage | None = None) -> str:
    body = json.loads((base or image_request()).payload())
    body.update(change)
    if drop:
        del body[drop]
    return json.dumps(body)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (mutated({}, drop="image_uri"), "missing field(s): image_uri"),
        (mutated({"colour": "red"}), "unexpected field(s): 'colour'"),
        (mutated({"tile_size": "16"}), "tile_size must be an integer, got str"),
        (mutated({"tile_size": 16.0}), "tile_size must be an integer, got float"),
        (mutated({"tile_size": True}), "tile_size must be an integer, got bool"),
        (mutated({"tile_size": 0}), "tile_size must be 1..64, got 0"),
        (mutated({"tile_size": 65}), "tile_size must be 1..64, got 65"),
        (mutated({"slices": 0}), "slices must be >= 1"),
        (mutated({"tiles_across": 0}), "tiles_across must be >= 1"),
        (mutated({"slice_sequence": -1}, base=EXAMPLES[2]), "slice_sequence must be >= 0"),
        (mutated({"image_uri": "imageinput/x.jpg"}), "image_uri must be an absolute http(s) URI"),
        (mutated({"queue_uri": "ftp://host/q"}), "queue_uri must be an absolute http(s) URI"),
        (mutated({"slice_uri": "http://h/a b"}, base=EXAMPLES[3]), "slice_uri must be an absolute"),
        (mutated({"request_id": "not-a-uuid"}), "request_id must be a UUID"),
        (mutated({"request_id": RID.upper()}), "canonical lower-case UUID"),
        (mutated({"client_id": ""}), "client_id must be 1..64"),
        (mutated({"client_id": "a" * 65}), "client_id must be 1..64"),
        (mutated({"client_id": "bob smith"}), "client_id must be 1..64"),
        (mutated({"client_id": 7}), "client_id must be a string, got int"),
        (mutated({"type": "Nonsense"}), "unknown message type 'Nonsense'"),
        (mutated({"type": 3}), "unknown message type"),
        (mutated({}, drop="type"), "missing field 'type'"),
        (mutated({"version": 3}), "unknown payload version 3"),
        (mutated({"version": 2}), "a version 2 payload, and only that, carries a traceparent"),
        (
            mutated({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
            "a version 2 payload, and only that, carries a traceparent",
        ),
        (mutated({"version": 2, "traceparent": "00-abc-def-01"}), "traceparent must be a W3C traceparent"),
        (
            mutated({"version": 2, "traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"}),
            "must be a W3C traceparent",
        ),
        (mutated({"version": 2, "traceparent": None}), "traceparent must be a W3C traceparent"),
        (mutated({"version": "1"}), "unknown payload version '1'"),
        (mutated({}, drop="version"), "missing field 'version'"),
        ('{"type":"ImageResponse","type":"ImageResponse"}', "appears twice"),
        ('{"tile_size": NaN}', "NaN"),
        ("[1, 2]", "must be a JSON object, got list"),
        ("", "payload is not JSON"),
        ("{" * 100_000, "payload is not JSON"),
        (b"\xff\xfe{}", "payload is not UTF-8"),
    ],
)
def test_bad_payloads_say_what_is_wrong(text: str | bytes, expected: str) -> None:
    assert expected in reason_of(text)


def test_message_of_the_wrong_type_for_its_queue() -> None:
    text = EXAMPLES[2].payload()  # a SliceRequest
    assert "belongs in queue 'slicerequest', not 'imagerequest'" in reason_of(text, queue_name="imagerequest")
    with pytest.raises(QueueMessageFormatException, match="expected a ImageRequest message, got SliceRequest"):
        ImageRequestMessage.parse(text)


def test_constructing_an_invalid_message_fails_the_same_way() -> None:
    with pytest.raises(QueueMessageFormatException, match="tile_size must be 1..64"):
        image_request(tile_size=100)


# --- properties -------------------------------------------------------------------------

_uri_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp", "Cf", "Co", "Cn")),
    max_size=60,
)
uris = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}/{path}",
    st.sampled_from(["http", "https"]),
    st.from_regex(r"[a-z0-9.-]{1,30}(:[0-9]{1,5})?", fullmatch=True),
    _uri_text,
)
common = dict(
    queue_uri=uris,
    client_id=st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
    request_id=st.uuids().map(str),
    # Absent (version 1, what every untraced sender writes) or a W3C traceparent (version 2).
    traceparent=st.none()
    | st.from_regex(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", fullmatch=True).filter(
        lambda t: t[3:35] != "0" * 32 and t[36:52] != "0" * 16
    ),
)
messages = st.one_of(
    st.builds(
        ImageRequestMessage,
        **common,
        image_uri=uris,
        image_library_uri=uris,
        tile_size=st.integers(1, 64),
        slices=st.integers(1, 10**6),
        tiles_across=st.none() | st.integers(1, 10**9),
        cell_sizes=st.none() | st.sampled_from([(1, 2), (1, 4), (1, 2, 4)]),
    ),
    st.builds(
        SliceRequestMessage,
        **common,
        image_library_uri=uris,
        slice_uri=uris,
        slice_sequence=st.integers(0, 10**6),
        tile_size=st.integers(1, 64),
        band=st.none() | st.binary(min_size=1, max_size=300).map(lambda b: base64.b64encode(b).decode()),
    ),
    st.builds(SliceResponseMessage, **common, slice_uri=uris, slice_sequence=st.integers(0, 10**6)),
    st.builds(ImageResponseMessage, **common, image_uri=uris),
    st.builds(
        LibraryCleanupMessage,
        **common,
        library=st.from_regex(r"[a-z0-9]{1,20}(-[a-z0-9]{1,20}){0,2}", fullmatch=True).filter(lambda n: len(n) >= 3),
    ),
)


@PROPERTY
@given(messages)
def test_parse_is_the_exact_inverse_of_payload(message: QueueMessage) -> None:
    text = message.payload()
    assert text.isascii()
    parsed = QueueMessage.parse(text)
    assert parsed == message and type(parsed) is type(message)
    assert parsed.payload() == text


def _only_format_errors(raw: object) -> None:
    """Garbage never parses, and says why with the one error type (never a crash)."""
    with pytest.raises(QueueMessageFormatException) as caught:
        QueueMessage.parse(raw)  # type: ignore[arg-type]
    assert str(caught.value)


@PROPERTY
@given(st.text())
def test_garbage_text_raises_only_format_errors(text: str) -> None:
    _only_format_errors(text)


@PROPERTY
@given(st.binary())
def test_garbage_bytes_raise_only_format_errors(data: bytes) -> None:
    _only_format_errors(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@PROPERTY
@given(
    base=messages,
    type_tag=st.sampled_from([*MESSAGE_TYPES, "Other"]),
    changes=st.dictionaries(
        st.sampled_from(
            [
                "queue_uri",
                "client_id",
                "request_id",
                "tile_size",
                "slices",
                "tiles_across",
                "slice_sequence",
                "slice_uri",
                "image_uri",
                "library",
                "version",
                "extra",
            ]
        ),
        json_values,
        max_size=3,
    ),
    drop=st.none() | st.sampled_from(["client_id", "request_id", "tile_size", "slice_uri", "version"]),
)
def test_near_miss_payloads_parse_or_raise_only_format_errors(
    base: QueueMessage, type_tag: str, changes: dict[str, object], drop: str | None
) -> None:
    body = json.loads(base.payload())
    body["type"] = type_tag
    body.update(changes)
    if drop is not None:
        body.pop(drop, None)
    text = json.dumps(body)
    try:
        parsed = QueueMessage.parse(text)
    except QueueMessageFormatException as exc:
        assert str(exc)  # always says something
        return
    # whatever parses is a valid message that round-trips
    assert QueueMessage.parse(parsed.payload()) == parsed


def test_request_ids_from_uuid4_are_accepted() -> None:
    rid = str(uuid.uuid4())
    assert image_request(request_id=rid).request_id == rid
