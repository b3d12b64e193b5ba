"""Typed, immutable queue messages and their versioned text payload.

A payload is compact JSON: ``{"type": "SliceRequest", "version": 1, ...fields}``. The type
tag lets one parser read any queue and lets a message that landed in the wrong queue be
recognised; the version lets a later release change a message without a flag day.
``parse(m.payload()) == m`` exactly, and every way a payload can be wrong (not UTF-8, not
JSON, a missing or extra field, a wrong type, a value out of range, an unknown type or
version, a message for another queue) raises ``QueueMessageFormatException`` and nothing
else, so a listener can move it to the poison queue instead of crashing.

Delivery metadata (message id, pop receipt, dequeue count, times) is not part of a message:
``dal.queues.consumable.ReceivedMessage`` wraps it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, NoReturn, TypeVar
from urllib.parse import urlsplit

from dal.config import (
    IMAGE_REQUEST_QUEUE,
    IMAGE_RESPONSE_QUEUE,
    INDEX_REQUEST_QUEUE,
    JOB_CLEANUP_QUEUE,
    SLICE_REQUEST_QUEUE,
    SLICE_RESPONSE_QUEUE,
)
from dal.errors import QueueMessageFormatException
from mosaic.limits import MAX_TILE_SIZE

__all__ = [
    "ID_CHARS",
    "ID_PATTERN",
    "LIBRARY_NAME_PATTERN",
    "MAX_ID_LENGTH",
    "MAX_INLINE_BAND_CHARS",
    "MAX_PHOTOS_PER_INDEX_REQUEST",
    "MAX_REPORT_STAGES",
    "MESSAGE_TYPES",
    "PAYLOAD_VERSION",
    "REPORT_FIELDS",
    "REQUEST_ID_PATTERN",
    "TRACED_PAYLOAD_VERSION",
    "ImageRequestMessage",
    "ImageResponseMessage",
    "IndexRequestMessage",
    "JobCleanupMessage",
    "LibraryCleanupMessage",
    "QueueMessage",
    "SliceRequestMessage",
    "SliceResponseMessage",
]

PAYLOAD_VERSION = 1
# Version 2 = version 1 plus ``traceparent`` (W3C Trace Context), sent only when tracing is on
# (dal/queues/tracing.py): untraced messages stay version 1, byte for byte, and both are read.
TRACED_PAYLOAD_VERSION = 2
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
# The id rules, one home each: client and request ids are table keys (``dal.jobs.model``).
MAX_ID_LENGTH = 64
ID_CHARS = r"[A-Za-z0-9_-]"
ID_PATTERN = rf"{ID_CHARS}{{1,{MAX_ID_LENGTH}}}"
# Request ids the web app mints: uuid4 text. A prefix pattern (no anchors) for blob names.
REQUEST_ID_PATTERN = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_CLIENT_ID = re.compile(ID_PATTERN)
# A tile library's name: a container name (3-63 lowercase letters, digits and single hyphens).
LIBRARY_NAME_PATTERN = r"(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*"
_LIBRARY_NAME = re.compile(LIBRARY_NAME_PATTERN)
# Field kinds: how each field is checked. Optional fields may be null or absent.
_OPTIONAL = {
    "tiles_across",
    "traceparent",
    "max_uses",
    "correction",
    "band",
    "report",
    "job_done",
    "use_every_photo",
    "library_version",
}
# Optional fields written only when set, so messages without them stay byte for byte as before.
_OMITTED_WHEN_NONE = {"max_uses", "correction", "band", "report", "job_done", "use_every_photo", "library_version"}
# A SliceResponse ``report``: the slice's log line, which the controller keeps in the job row.
REPORT_FIELDS = {"actor": 100, "message": 300, "at": 40}  # text fields and their longest length
MAX_REPORT_STAGES = 32
# An inline band (SliceRequest ``band``): Base64 of the band's PNG. The queue's 64 KiB limit
# applies to the whole message after the wire's own Base64 (dal.queues.wire): 48 KiB of payload text,
# so at most 44 KiB here (the controller inlines bands of at most 32 KiB: workers.slicing); a
# message that still ends up over the limit (very long URIs) goes through the claim check.
MAX_INLINE_BAND_CHARS = 44 * 1024
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
# An IndexRequest's photos: staged names (dal.blobs.staging.safe_photo_name), one receive's worth.
MAX_PHOTOS_PER_INDEX_REQUEST = 32
_PHOTO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,159}")
# A library version (``dal.blobs.indexed``: 20 hex digits of a hash), as a job pins it.
_LIBRARY_VERSION = re.compile(r"[0-9a-f]{1,64}")

M = TypeVar("M", bound="QueueMessage")


def _fail(reason: str, raw: str | bytes | None = None) -> QueueMessageFormatException:
    return QueueMessageFormatException(reason, raw)


def _check_uri(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise _fail(f"{name} must be a string, got {type(value).__name__}")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise _fail(f"{name} must be an absolute http(s) URI without spaces or control characters")
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise _fail(f"{name} is not a valid URI: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _fail(f"{name} must be an absolute http(s) URI, got {value[:200]!r}")


def _check_int(name: str, value: object, *, low: int, high: int | None = None) -> None:
    if type(value) is not int:  # bool is an int subclass but never a count
        raise _fail(f"{name} must be an integer, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise _fail(f"{name} must be {bounds}, got {value}")


FieldCheck = Callable[[object], None]


def _optional(check: FieldCheck) -> FieldCheck:
    """``check`` for a field that may also be absent (None)."""

    def checked(value: object) -> None:
        if value is not None:
            check(value)

    return checked


# How each field is validated; every message field must appear here.
_FIELD_CHECKS: dict[str, FieldCheck] = {
    "queue_uri": lambda v: _check_uri("queue_uri", v),
    "image_uri": lambda v: _check_uri("image_uri", v),
    "image_library_uri": lambda v: _check_uri("image_library_uri", v),
    "slice_uri": lambda v: _check_uri("slice_uri", v),
    "tile_size": lambda v: _check_int("tile_size", v, low=1, high=MAX_TILE_SIZE),
    "slices": lambda v: _check_int("slices", v, low=1),
    "tiles_across": _optional(lambda v: _check_int("tiles_across", v, low=1)),
    "max_uses": _optional(lambda v: _check_int("max_uses", v, low=1)),
    "correction": _optional(lambda v: _check_int("correction", v, low=0, high=100)),
    "slice_sequence": lambda v: _check_int("slice_sequence", v, low=0),
    "traceparent": _optional(lambda v: _check_traceparent(v)),
    "band": _optional(lambda v: _check_band(v)),
    "report": _optional(lambda v: _check_report(v)),
    "job_done": _optional(lambda v: _check_true("job_done", v)),
    "use_every_photo": _optional(lambda v: _check_true("use_every_photo", v)),
    "library": lambda v: _check_library(v),
    "library_uri": lambda v: _check_uri("library_uri", v),
    "photos": lambda v: _check_photos(v),
    "library_version": _optional(lambda v: _check_library_version(v)),
}


def _check_photos(value: object) -> None:
    if not isinstance(value, tuple) or not 1 <= len(value) <= MAX_PHOTOS_PER_INDEX_REQUEST:
        raise _fail(f"photos must be a list of 1..{MAX_PHOTOS_PER_INDEX_REQUEST} staged photo names")
    for name in value:
        if not isinstance(name, str) or not _PHOTO_NAME.fullmatch(name) or ".." in name:
            raise _fail(f"photos: {str(name)[:80]!r} is not a staged photo name ([A-Za-z0-9._-], 1..160)")
    if len(set(value)) != len(value):
        raise _fail("photos names a photo twice")


def _check_library_version(value: object) -> None:
    if not isinstance(value, str) or not _LIBRARY_VERSION.fullmatch(value):
        raise _fail(f"library_version must be 1..64 lower-case hex digits, got {str(value)[:80]!r}")


def _check_library(value: object) -> None:
    if not isinstance(value, str):
        raise _fail(f"library must be a string, got {type(value).__name__}")
    if not _LIBRARY_NAME.fullmatch(value):
        raise _fail(f"library must be a library name (3-63 of a-z, 0-9 and single hyphens), got {value[:80]!r}")


def _check_true(name: str, value: object) -> None:
    if value is not True:  # a flag that is either there (true) or absent: one spelling on the wire
        raise _fail(f"{name} must be true or absent, got {str(value)[:40]!r}")


def _number(value: object) -> bool:
    # type(), not isinstance: a bool is an int subclass but never a number of seconds
    return isinstance(value, int | float) and type(value) in (int, float) and math.isfinite(value) and value >= 0


def _check_report(value: object) -> None:
    """A slice's log line: ``actor``, ``message``, ``at`` (ISO 8601) and optional ``seconds`` and
    ``stages`` (step name -> seconds), each bounded, so a report never grows a message much."""
    if not isinstance(value, dict):
        raise _fail(f"report must be an object, got {type(value).__name__}")
    extra = sorted(set(value) - set(REPORT_FIELDS) - {"seconds", "stages"})
    if extra:
        raise _fail(f"report has unexpected field(s): {', '.join(repr(str(e)[:40]) for e in extra[:5])}")
    for name, longest in REPORT_FIELDS.items():
        text = value.get(name)
        if not isinstance(text, str) or not 0 < len(text) <= longest:
            raise _fail(f"report.{name} must be text of 1..{longest} characters")
    try:
        datetime.fromisoformat(value["at"])
    except ValueError:
        raise _fail(f"report.at must be an ISO 8601 time, got {value['at'][:40]!r}") from None
    if "seconds" in value and not _number(value["seconds"]):
        raise _fail("report.seconds must be a number >= 0")
    stages = value.get("stages")
    if stages is not None and not (
        isinstance(stages, dict)
        and len(stages) <= MAX_REPORT_STAGES
        and all(isinstance(k, str) and 0 < len(k) <= 40 and _number(v) for k, v in stages.items())
    ):
        raise _fail(f"report.stages must map at most {MAX_REPORT_STAGES} step names to seconds >= 0")


def _check_band(value: object) -> None:
    if not isinstance(value, str):
        raise _fail(f"band must be a Base64 string, got {type(value).__name__}")
    if not value or len(value) > MAX_INLINE_BAND_CHARS or len(value) % 4 or not _BASE64.fullmatch(value):
        raise _fail(f"band must be 1..{MAX_INLINE_BAND_CHARS} characters of padded Base64, got {len(value)} characters")


def _check_traceparent(value: object) -> None:
    if not isinstance(value, str) or not _TRACEPARENT.fullmatch(value):
        raise _fail(f"traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>), got {str(value)[:80]!r}")


_STRING_FIELDS = {
    "queue_uri",
    "client_id",
    "request_id",
    "image_uri",
    "image_library_uri",
    "slice_uri",
    "library",
    "library_uri",
}


def _check_client_id(value: str) -> None:
    if not _CLIENT_ID.fullmatch(value):
        raise _fail(f"client_id must be 1..{MAX_ID_LENGTH} characters of [A-Za-z0-9_-], got {value[:80]!r}")


def _check_request_id(value: str) -> None:
    try:
        canonical = str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise _fail(f"request_id must be a UUID, got {value[:80]!r}") from None
    if canonical != value:
        raise _fail(f"request_id must be a canonical lower-case UUID ({canonical}), got {value!r}")


@dataclass(frozen=True, kw_only=True)
class QueueMessage:
    """The fields every message carries; never sent itself.

    Constructing a message validates it, so an invalid message can neither be sent nor be
    parsed: the same checks guard both directions.
    """

    queue_uri: str
    client_id: str
    request_id: str
    # The trace this message belongs to (version 2 payloads only); not part of its meaning.
    traceparent: str | None = None

    TYPE: ClassVar[str] = ""
    QUEUE: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if not self.TYPE:
            raise TypeError("QueueMessage is abstract: use one of its four subclasses")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _STRING_FIELDS and not isinstance(value, str):
                raise _fail(f"{f.name} must be a string, got {type(value).__name__}")
        _check_client_id(self.client_id)
        _check_request_id(self.request_id)
        for f in dataclasses.fields(self):
            check = _FIELD_CHECKS.get(f.name)
            if check is not None:
                check(getattr(self, f.name))

    def payload(self) -> str:
        """The wire text: type tag and version first, then the fields in declaration order.

        ASCII only (``ensure_ascii``), so any Unicode in a URI survives every encoding.
        """
        traced = self.traceparent is not None
        body: dict[str, object] = {"type": self.TYPE, "version": TRACED_PAYLOAD_VERSION if traced else PAYLOAD_VERSION}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "traceparent" and not (value is None and f.name in _OMITTED_WHEN_NONE):
                body[f.name] = value
        if traced:
            body["traceparent"] = self.traceparent
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def parse(cls: type[M], text: str | bytes, *, queue_name: str | None = None) -> M:
        """Read a payload; ``QueueMessageFormatException`` says what is wrong with it.

        On ``QueueMessage`` any type is accepted; on a subclass only that type. With
        ``queue_name`` the message must belong to that queue (a test prefix on the name is
        allowed: ``"t1a2b3imagerequest"`` is the ``imagerequest`` queue).
        """
        try:
            return cls._parse(text, queue_name=queue_name)
        except QueueMessageFormatException as exc:
            if exc.raw is None:
                exc.raw = text
            raise

    @classmethod
    def _parse(cls: type[M], text: str | bytes, *, queue_name: str | None) -> M:
        if isinstance(text, (bytes, bytearray, memoryview)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _fail(f"payload is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
        if not isinstance(text, str):
            raise _fail(f"payload must be text or bytes, got {type(text).__name__}")
        body = _load_json(text)
        kind = body.get("type")
        if "type" not in body:
            raise _fail("missing field 'type' (the message type tag)")
        message_cls = MESSAGE_TYPES.get(kind) if isinstance(kind, str) else None
        if message_cls is None:
            known = ", ".join(sorted(MESSAGE_TYPES))
            raise _fail(f"unknown message type {str(kind)[:80]!r} (known: {known})")
        if "version" not in body:
            raise _fail("missing field 'version'")
        version = body["version"]
        if type(version) is not int or version not in (PAYLOAD_VERSION, TRACED_PAYLOAD_VERSION):
            raise _fail(
                f"unknown payload version {version!r} (this release reads versions "
                f"{PAYLOAD_VERSION} and {TRACED_PAYLOAD_VERSION})"
            )
        if ("traceparent" in body) != (version == TRACED_PAYLOAD_VERSION):
            raise _fail(f"a version {TRACED_PAYLOAD_VERSION} payload, and only that, carries a traceparent")
        if version == TRACED_PAYLOAD_VERSION:  # null would not round-trip: no traceparent is version 1
            _check_traceparent(body["traceparent"])
        if cls is not QueueMessage and message_cls is not cls:
            raise _fail(f"expected a {cls.TYPE} message, got {kind}")
        if queue_name is not None and not queue_name.endswith(message_cls.QUEUE):
            raise _fail(f"a {kind} message belongs in queue {message_cls.QUEUE!r}, not {queue_name!r}")
        return message_cls._from_fields(body)  # type: ignore[return-value]  # message_cls is cls unless cls is QueueMessage (checked above)

    @classmethod
    def _from_fields(cls: type[M], body: dict[str, object]) -> M:
        names = [f.name for f in dataclasses.fields(cls)]
        given = set(body) - {"type", "version"}
        missing = [n for n in names if n not in given and n not in _OPTIONAL]
        if missing:
            raise _fail(f"{cls.TYPE} message is missing field(s): {', '.join(missing)}")
        extra = sorted(given - set(names))
        if extra:
            shown = ", ".join(repr(e[:40]) for e in extra[:5])
            raise _fail(f"{cls.TYPE} message has unexpected field(s): {shown}")
        return cls(**{n: body[n] for n in names if n in given})  # type: ignore[arg-type]  # JSON values; __post_init__ checks each field's type


def _reject_constant(name: str) -> NoReturn:
    raise _fail(f"payload contains {name}, which is not valid JSON")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise _fail(f"field {key[:40]!r} appears twice")
        result[key] = value
    return result


def _load_json(text: str) -> dict[str, object]:
    try:
        body = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
    except QueueMessageFormatException:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, huge ints, deep nesting
        raise _fail(f"payload is not JSON: {str(exc)[:200]}") from None
    if not isinstance(body, dict):
        raise _fail(f"payload must be a JSON object, got {type(body).__name__}")
    return body


@dataclass(frozen=True, kw_only=True)
class ImageRequestMessage(QueueMessage):
    """A job: make a mosaic of ``image_uri`` from the tiles of ``image_library_uri``."""

    image_uri: str
    image_library_uri: str
    tile_size: int
    slices: int
    tiles_across: int | None = None
    # Fair use: no tile more than this many times in the whole mosaic (None: the variety rule).
    # The controller assigns every cell once for the whole job and ships each band its rows.
    max_uses: int | None = None
    # How far each tile's colour moves toward its cell's, 0..100 % (None: the engine's default,
    # ``mosaic.render.RenderOptions.correction``): the person's choice between tiles and photo.
    correction: int | None = None
    # Every library photo (every group of near-duplicates) at least once: true or absent. The
    # controller chooses the whole grid once (``mosaic.render.choose_whole``), as for max_uses.
    use_every_photo: bool | None = None
    # The version of a library the indexer fills that the job renders with, pinned when it was
    # admitted (``dal.blobs.indexed``): photos added or removed later do not change it. None:
    # the library as it is (one with an ``index.zip``).
    library_version: str | None = None

    TYPE: ClassVar[str] = "ImageRequest"
    QUEUE: ClassVar[str] = IMAGE_REQUEST_QUEUE


@dataclass(frozen=True, kw_only=True)
class SliceRequestMessage(QueueMessage):
    """One band of a job for an ImageProcessor; ``slice_sequence`` is 0-based.

    ``band``: the band's PNG itself (Base64), when it is small enough to travel in the message;
    then no blob was written at ``slice_uri`` and the processor reads nothing (two storage
    transactions less per slice). Absent (None), the band is the blob at ``slice_uri``.
    """

    image_library_uri: str
    slice_uri: str
    slice_sequence: int
    tile_size: int
    band: str | None = None
    correction: int | None = None  # as the job's ImageRequest says (None: the engine's default)
    library_version: str | None = None  # as the job's ImageRequest says (None: the library as it is)

    TYPE: ClassVar[str] = "SliceRequest"
    QUEUE: ClassVar[str] = SLICE_REQUEST_QUEUE


@dataclass(frozen=True, kw_only=True)
class SliceResponseMessage(QueueMessage):
    """A rendered band is stored at ``slice_uri``.

    ``report``: the slice's log line (who rendered it, when, how long each step took), which
    the controller records with the slice's progress in the job row, in the one write it
    makes anyway: no event row of its own (``dal.jobs.store``). Absent from older processors,
    which wrote a ``slice_done`` event themselves.
    """

    slice_uri: str
    slice_sequence: int
    report: dict[str, object] | None = None

    TYPE: ClassVar[str] = "SliceResponse"
    QUEUE: ClassVar[str] = SLICE_RESPONSE_QUEUE


@dataclass(frozen=True, kw_only=True)
class ImageResponseMessage(QueueMessage):
    """The finished mosaic is stored at ``image_uri``."""

    image_uri: str
    # True: the stitcher finished the job itself: the responder has nothing to
    # write and need not read the row to learn it. Absent from older controllers.
    job_done: bool | None = None

    TYPE: ClassVar[str] = "ImageResponse"
    QUEUE: ClassVar[str] = IMAGE_RESPONSE_QUEUE


@dataclass(frozen=True, kw_only=True)
class JobCleanupMessage(QueueMessage):
    """Delete everything of a job (blobs, claim, rows, events): ``dal.operations.cleanup``. Idempotent."""

    TYPE: ClassVar[str] = "JobCleanup"
    QUEUE: ClassVar[str] = JOB_CLEANUP_QUEUE


@dataclass(frozen=True, kw_only=True)
class LibraryCleanupMessage(QueueMessage):
    """Delete the tile library ``library`` of ``client_id`` (its owner): ``dal.operations.cleanup``. Idempotent.

    It shares the ``jobcleanup`` queue (and its handler role) with job deletions: both are rare,
    short, storage-only work. ``request_id`` names this deletion request (a fresh UUID)."""

    library: str

    TYPE: ClassVar[str] = "LibraryCleanup"
    QUEUE: ClassVar[str] = JOB_CLEANUP_QUEUE


@dataclass(frozen=True, kw_only=True)
class IndexRequestMessage(QueueMessage):
    """Index these staged photos of the library at ``library_uri`` (``workers.indexer``). Idempotent
    per photo: ``request_id`` derives from the library and the photos, so asking twice is harmless."""

    library_uri: str
    photos: tuple[str, ...]  # staged names (without "staging/"); a JSON list on the wire

    TYPE: ClassVar[str] = "IndexRequest"
    QUEUE: ClassVar[str] = INDEX_REQUEST_QUEUE

    def __post_init__(self) -> None:
        if isinstance(self.photos, list):  # as parsed from JSON: kept as a tuple (frozen, hashable)
            object.__setattr__(self, "photos", tuple(self.photos))
        super().__post_init__()


MESSAGE_TYPES: dict[str, type[QueueMessage]] = {
    cls.TYPE: cls
    for cls in (
        ImageRequestMessage,
        SliceRequestMessage,
        SliceResponseMessage,
        ImageResponseMessage,
        JobCleanupMessage,
        LibraryCleanupMessage,
        IndexRequestMessage,
    )
}
