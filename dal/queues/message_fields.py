"""The rules a queue message's fields obey, one check per field name.

Every field of every message (``dal.queues.messages``) has its check in ``FIELD_CHECKS``; a
message checks its fields when it is made, so the same rules guard sending and parsing. Every
failure is a ``QueueMessageFormatException`` that says which field and why. The id rules live
here too, one home each: client and request ids are table keys (``dal.jobs.model``).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable
from datetime import datetime
from urllib.parse import urlsplit

from dal.errors import QueueMessageFormatException
from mosaic.cells import check_cell_sizes
from mosaic.limits import MAX_TILE_SIZE

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
# Optional fields may be null or absent.
OPTIONAL_FIELDS = {
    "tiles_across",
    "traceparent",
    "max_uses",
    "correction",
    "band",
    "report",
    "job_done",
    "use_every_photo",
    "library_version",
    "cell_sizes",
    "split",
}
# Optional fields written only when set, so messages without them stay byte for byte as before.
OMITTED_WHEN_NONE = {
    "max_uses",
    "correction",
    "band",
    "report",
    "job_done",
    "use_every_photo",
    "library_version",
    "cell_sizes",
    "split",
}
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


def fail(reason: str, raw: str | bytes | None = None) -> QueueMessageFormatException:
    return QueueMessageFormatException(reason, raw)


def _check_uri(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise fail(f"{name} must be a string, got {type(value).__name__}")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise fail(f"{name} must be an absolute http(s) URI without spaces or control characters")
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise fail(f"{name} is not a valid URI: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise fail(f"{name} must be an absolute http(s) URI, got {value[:200]!r}")


def _check_int(name: str, value: object, *, low: int, high: int | None = None) -> None:
    if type(value) is not int:  # bool is an int subclass but never a count
        raise fail(f"{name} must be an integer, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise fail(f"{name} must be {bounds}, got {value}")


FieldCheck = Callable[[object], None]


def _optional(check: FieldCheck) -> FieldCheck:
    """``check`` for a field that may also be absent (None)."""

    def checked(value: object) -> None:
        if value is not None:
            check(value)

    return checked


# How each field is validated; every message field but client_id and request_id (checked first) is here.
FIELD_CHECKS: dict[str, FieldCheck] = {
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
    "traceparent": _optional(lambda v: check_traceparent(v)),
    "band": _optional(lambda v: _check_band(v)),
    "report": _optional(lambda v: _check_report(v)),
    "job_done": _optional(lambda v: _check_true("job_done", v)),
    "use_every_photo": _optional(lambda v: _check_true("use_every_photo", v)),
    "library": lambda v: _check_library(v),
    "library_uri": lambda v: _check_uri("library_uri", v),
    "photos": lambda v: _check_photos(v),
    "library_version": _optional(lambda v: _check_library_version(v)),
    "cell_sizes": _optional(lambda v: _check_cell_sizes(v)),
    "split": _optional(lambda v: _check_int("split", v, low=0, high=100)),
}


def _check_cell_sizes(value: object) -> None:
    """Several cell sizes (``mosaic.cells``); one size is the field left out, not ``[1]``."""
    try:
        check_cell_sizes(value)
    except ValueError as exc:
        raise fail(f"cell_sizes: {exc}") from None
    if isinstance(value, tuple) and len(value) < 2:
        raise fail("cell_sizes: one size is the default; leave the field out")


def _check_photos(value: object) -> None:
    if not isinstance(value, tuple) or not 1 <= len(value) <= MAX_PHOTOS_PER_INDEX_REQUEST:
        raise fail(f"photos must be a list of 1..{MAX_PHOTOS_PER_INDEX_REQUEST} staged photo names")
    for name in value:
        if not isinstance(name, str) or not _PHOTO_NAME.fullmatch(name) or ".." in name:
            raise fail(f"photos: {str(name)[:80]!r} is not a staged photo name ([A-Za-z0-9._-], 1..160)")
    if len(set(value)) != len(value):
        raise fail("photos names a photo twice")


def _check_library_version(value: object) -> None:
    if not isinstance(value, str) or not _LIBRARY_VERSION.fullmatch(value):
        raise fail(f"library_version must be 1..64 lower-case hex digits, got {str(value)[:80]!r}")


def _check_library(value: object) -> None:
    if not isinstance(value, str):
        raise fail(f"library must be a string, got {type(value).__name__}")
    if not _LIBRARY_NAME.fullmatch(value):
        raise fail(f"library must be a library name (3-63 of a-z, 0-9 and single hyphens), got {value[:80]!r}")


def _check_true(name: str, value: object) -> None:
    if value is not True:  # a flag that is either there (true) or absent: one spelling on the wire
        raise fail(f"{name} must be true or absent, got {str(value)[:40]!r}")


def _number(value: object) -> bool:
    # type(), not isinstance: a bool is an int subclass but never a number of seconds
    return isinstance(value, int | float) and type(value) in (int, float) and math.isfinite(value) and value >= 0


def _check_report(value: object) -> None:
    """A slice's log line: ``actor``, ``message``, ``at`` (ISO 8601) and optional ``seconds`` and
    ``stages`` (step name -> seconds), each bounded, so a report never grows a message much."""
    if not isinstance(value, dict):
        raise fail(f"report must be an object, got {type(value).__name__}")
    extra = sorted(set(value) - set(REPORT_FIELDS) - {"seconds", "stages"})
    if extra:
        raise fail(f"report has unexpected field(s): {', '.join(repr(str(e)[:40]) for e in extra[:5])}")
    for name, longest in REPORT_FIELDS.items():
        text = value.get(name)
        if not isinstance(text, str) or not 0 < len(text) <= longest:
            raise fail(f"report.{name} must be text of 1..{longest} characters")
    try:
        datetime.fromisoformat(value["at"])
    except ValueError:
        raise fail(f"report.at must be an ISO 8601 time, got {value['at'][:40]!r}") from None
    if "seconds" in value and not _number(value["seconds"]):
        raise fail("report.seconds must be a number >= 0")
    stages = value.get("stages")
    if stages is not None and not (
        isinstance(stages, dict)
        and len(stages) <= MAX_REPORT_STAGES
        and all(isinstance(k, str) and 0 < len(k) <= 40 and _number(v) for k, v in stages.items())
    ):
        raise fail(f"report.stages must map at most {MAX_REPORT_STAGES} step names to seconds >= 0")


def _check_band(value: object) -> None:
    if not isinstance(value, str):
        raise fail(f"band must be a Base64 string, got {type(value).__name__}")
    if not value or len(value) > MAX_INLINE_BAND_CHARS or len(value) % 4 or not _BASE64.fullmatch(value):
        raise fail(f"band must be 1..{MAX_INLINE_BAND_CHARS} characters of padded Base64, got {len(value)} characters")


def check_traceparent(value: object) -> None:
    if not isinstance(value, str) or not _TRACEPARENT.fullmatch(value):
        raise fail(f"traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>), got {str(value)[:80]!r}")


STRING_FIELDS = {
    "queue_uri",
    "client_id",
    "request_id",
    "image_uri",
    "image_library_uri",
    "slice_uri",
    "library",
    "library_uri",
}


def check_client_id(value: str) -> None:
    if not _CLIENT_ID.fullmatch(value):
        raise fail(f"client_id must be 1..{MAX_ID_LENGTH} characters of [A-Za-z0-9_-], got {value[:80]!r}")


def check_request_id(value: str) -> None:
    try:
        canonical = str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise fail(f"request_id must be a UUID, got {value[:80]!r}") from None
    if canonical != value:
        raise fail(f"request_id must be a canonical lower-case UUID ({canonical}), got {value!r}")
