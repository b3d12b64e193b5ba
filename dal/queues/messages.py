"""Typed, immutable queue messages and their versioned text payload.

A payload is compact JSON: ``{"type": "SliceRequest", "version": 1, ...fields}``. The type
tag lets one parser read any queue and lets a message that landed in the wrong queue be
recognised; the version lets a later release change a message without a flag day.
``parse(m.payload()) == m`` exactly, and every way a payload can be wrong (not UTF-8, not
JSON, a missing or extra field, a wrong type, a value out of range, an unknown type or
version, a message for another queue) raises ``QueueMessageFormatException`` and nothing
else, so a listener can move it to the poison queue instead of crashing.

Delivery metadata (message id, pop receipt, dequeue count, times) is not part of a message:
``dal.queues.consumable.ReceivedMessage`` wraps it. Each field is declared with the rule it obeys
(``required(check)`` or ``optional(check)``, ``dal.queues.message_fields``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar, NoReturn, TypeVar

from dal.config import (
    IMAGE_REQUEST_QUEUE,
    IMAGE_RESPONSE_QUEUE,
    INDEX_REQUEST_QUEUE,
    JOB_CLEANUP_QUEUE,
    SLICE_REQUEST_QUEUE,
    SLICE_RESPONSE_QUEUE,
)
from dal.errors import QueueMessageFormatException
from dal.queues import message_fields as rules
from dal.queues.message_fields import check_traceparent, fail, integer, optional, required, rule_of
from mosaic.limits import MAX_TILE_SIZE

__all__ = [
    "MESSAGE_TYPES",
    "PAYLOAD_VERSION",
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
M = TypeVar("M", bound="QueueMessage")


@dataclass(frozen=True, kw_only=True)
class QueueMessage:
    """The fields every message carries; never sent itself.

    Constructing a message validates it, so an invalid message can neither be sent nor be
    parsed: the same checks guard both directions.
    """

    queue_uri: str = required(rules.uri)
    client_id: str = required(rules.client_id)
    request_id: str = required(rules.request_id)
    # The trace this message belongs to (version 2 payloads only); not part of its meaning.
    traceparent: str | None = optional(rules.traceparent)

    TYPE: ClassVar[str] = ""
    QUEUE: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if not self.TYPE:
            raise TypeError("QueueMessage is abstract: use one of its four subclasses")
        for f in dataclasses.fields(self):
            rule, value = rule_of(f), getattr(self, f.name)
            if rule.as_tuple and isinstance(value, list):  # as parsed from JSON
                value = tuple(value)
                object.__setattr__(self, f.name, value)
            if value is not None or not rule.optional:
                rule.check(f.name, value)
        self._check_together()

    def _check_together(self) -> None:
        """What no single field's rule can say (a message type's own combinations)."""

    def payload(self) -> str:
        """The wire text: type tag and version first, then the fields in declaration order.

        ASCII only (``ensure_ascii``), so any Unicode in a URI survives every encoding.
        """
        traced = self.traceparent is not None
        body: dict[str, object] = {"type": self.TYPE, "version": TRACED_PAYLOAD_VERSION if traced else PAYLOAD_VERSION}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "traceparent" and not (value is None and rule_of(f).omitted_when_none):
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
                raise fail(f"payload is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
        if not isinstance(text, str):
            raise fail(f"payload must be text or bytes, got {type(text).__name__}")
        body = _load_json(text)
        kind = body.get("type")
        if "type" not in body:
            raise fail("missing field 'type' (the message type tag)")
        message_cls = MESSAGE_TYPES.get(kind) if isinstance(kind, str) else None
        if message_cls is None:
            known = ", ".join(sorted(MESSAGE_TYPES))
            raise fail(f"unknown message type {str(kind)[:80]!r} (known: {known})")
        if "version" not in body:
            raise fail("missing field 'version'")
        version = body["version"]
        if type(version) is not int or version not in (PAYLOAD_VERSION, TRACED_PAYLOAD_VERSION):
            raise fail(
                f"unknown payload version {version!r} (this release reads versions "
                f"{PAYLOAD_VERSION} and {TRACED_PAYLOAD_VERSION})"
            )
        if ("traceparent" in body) != (version == TRACED_PAYLOAD_VERSION):
            raise fail(f"a version {TRACED_PAYLOAD_VERSION} payload, and only that, carries a traceparent")
        if version == TRACED_PAYLOAD_VERSION:  # null would not round-trip: no traceparent is version 1
            check_traceparent(body["traceparent"])
        if cls is not QueueMessage and message_cls is not cls:
            raise fail(f"expected a {cls.TYPE} message, got {kind}")
        if queue_name is not None and not queue_name.endswith(message_cls.QUEUE):
            raise fail(f"a {kind} message belongs in queue {message_cls.QUEUE!r}, not {queue_name!r}")
        return message_cls._from_fields(body)  # type: ignore[return-value]  # message_cls is cls unless cls is QueueMessage (checked above)

    @classmethod
    def _from_fields(cls: type[M], body: dict[str, object]) -> M:
        names = [f.name for f in dataclasses.fields(cls)]
        given = set(body) - {"type", "version"}
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in given and not rule_of(f).optional]
        if missing:
            raise fail(f"{cls.TYPE} message is missing field(s): {', '.join(missing)}")
        extra = sorted(given - set(names))
        if extra:
            shown = ", ".join(repr(e[:40]) for e in extra[:5])
            raise fail(f"{cls.TYPE} message has unexpected field(s): {shown}")
        return cls(**{n: body[n] for n in names if n in given})  # type: ignore[arg-type]  # JSON values; __post_init__ checks each field's type


def _reject_constant(name: str) -> NoReturn:
    raise fail(f"payload contains {name}, which is not valid JSON")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise fail(f"field {key[:40]!r} appears twice")
        result[key] = value
    return result


def _load_json(text: str) -> dict[str, object]:
    try:
        body = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
    except QueueMessageFormatException:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, huge ints, deep nesting
        raise fail(f"payload is not JSON: {str(exc)[:200]}") from None
    if not isinstance(body, dict):
        raise fail(f"payload must be a JSON object, got {type(body).__name__}")
    return body


def _check_cells(message: ImageRequestMessage | SliceRequestMessage) -> None:
    """``split`` means something only beside several sizes, and a job of several sizes is chosen
    part by part (``mosaic.options.RenderOptions``): neither fair use nor every photo."""
    if message.split is not None and message.cell_sizes is None:
        raise fail("split is how cells of several sizes split: it needs cell_sizes")
    fair = isinstance(message, ImageRequestMessage) and (message.max_uses is not None or message.use_every_photo)
    if message.cell_sizes is not None and fair:
        raise fail("cell_sizes cannot be combined with max_uses or use_every_photo")


@dataclass(frozen=True, kw_only=True)
class ImageRequestMessage(QueueMessage):
    """A job: make a mosaic of ``image_uri`` from the tiles of ``image_library_uri``."""

    image_uri: str = required(rules.uri)
    image_library_uri: str = required(rules.uri)
    tile_size: int = required(integer(1, MAX_TILE_SIZE))
    slices: int = required(integer(1))
    tiles_across: int | None = optional(integer(1), written_when_none=True)  # null: the planner's default
    # Fair use: no tile more than this many times in the whole mosaic (None: the variety rule).
    # The controller assigns every cell once for the whole job and ships each band its rows.
    max_uses: int | None = optional(integer(1))
    # How far each tile's colour moves toward its cell's, 0..100 % (None: the engine's default,
    # ``mosaic.options.RenderOptions.correction``): the person's choice between tiles and photo.
    correction: int | None = optional(integer(0, 100))
    # Every library photo (every group of near-duplicates) at least once: true or absent. The
    # controller chooses the whole grid once (``mosaic.tile_choice.choose_whole``), as for max_uses.
    use_every_photo: bool | None = optional(rules.flag)
    # The version of a library the indexer fills that the job renders with, pinned when it was
    # admitted (``dal.blobs.indexed``): photos added or removed later do not change it. None:
    # the library as it is (one with an ``index.zip``).
    library_version: str | None = optional(rules.library_version)
    # Cells of several sizes (``mosaic.cells``), e.g. (1, 2, 4), a JSON list on the wire, and how
    # eagerly the grid splits into small cells (0..100). None: one size, the engine's split.
    cell_sizes: tuple[int, ...] | None = optional(rules.cell_sizes, as_tuple=True)
    split: int | None = optional(integer(0, 100))

    TYPE: ClassVar[str] = "ImageRequest"
    QUEUE: ClassVar[str] = IMAGE_REQUEST_QUEUE

    def _check_together(self) -> None:
        _check_cells(self)


@dataclass(frozen=True, kw_only=True)
class SliceRequestMessage(QueueMessage):
    """One band of a job for an ImageProcessor; ``slice_sequence`` is 0-based.

    ``band``: the band's PNG itself (Base64), when it is small enough to travel in the message;
    then no blob was written at ``slice_uri`` and the processor reads nothing (two storage
    transactions less per slice). Absent (None), the band is the blob at ``slice_uri``.
    """

    image_library_uri: str = required(rules.uri)
    slice_uri: str = required(rules.uri)
    slice_sequence: int = required(integer(0))
    tile_size: int = required(integer(1, MAX_TILE_SIZE))
    band: str | None = optional(rules.band)
    # The job's options, as its ImageRequest says them (None: the engine's default; the library as it is).
    correction: int | None = optional(integer(0, 100))
    library_version: str | None = optional(rules.library_version)
    cell_sizes: tuple[int, ...] | None = optional(rules.cell_sizes, as_tuple=True)
    split: int | None = optional(integer(0, 100))

    TYPE: ClassVar[str] = "SliceRequest"
    QUEUE: ClassVar[str] = SLICE_REQUEST_QUEUE

    def _check_together(self) -> None:
        _check_cells(self)


@dataclass(frozen=True, kw_only=True)
class SliceResponseMessage(QueueMessage):
    """A rendered band is stored at ``slice_uri``.

    ``report``: the slice's log line (who rendered it, when, how long each step took), which
    the controller records with the slice's progress in the job row, in the one write it
    makes anyway: no event row of its own (``dal.jobs.store``). Absent from older processors,
    which wrote a ``slice_done`` event themselves.
    """

    slice_uri: str = required(rules.uri)
    slice_sequence: int = required(integer(0))
    report: dict[str, object] | None = optional(rules.report)

    TYPE: ClassVar[str] = "SliceResponse"
    QUEUE: ClassVar[str] = SLICE_RESPONSE_QUEUE


@dataclass(frozen=True, kw_only=True)
class ImageResponseMessage(QueueMessage):
    """The finished mosaic is stored at ``image_uri``."""

    image_uri: str = required(rules.uri)
    # True: the stitcher finished the job itself: the responder has nothing to
    # write and need not read the row to learn it. Absent from older controllers.
    job_done: bool | None = optional(rules.flag)

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

    library: str = required(rules.library_name)

    TYPE: ClassVar[str] = "LibraryCleanup"
    QUEUE: ClassVar[str] = JOB_CLEANUP_QUEUE


@dataclass(frozen=True, kw_only=True)
class IndexRequestMessage(QueueMessage):
    """Index these staged photos of the library at ``library_uri`` (``workers.indexer``). Idempotent
    per photo: ``request_id`` derives from the library and the photos, so asking twice is harmless."""

    library_uri: str = required(rules.uri)
    # Staged names (without "staging/"), a JSON list on the wire.
    photos: tuple[str, ...] = required(rules.photo_names, as_tuple=True)

    TYPE: ClassVar[str] = "IndexRequest"
    QUEUE: ClassVar[str] = INDEX_REQUEST_QUEUE


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
