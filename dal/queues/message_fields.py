"""The rules a queue message's fields obey, declared on the fields themselves.

Every field of every message (``dal.queues.messages``) is declared with its rule:
``required(check)`` or ``optional(check)`` (``dataclasses.field`` metadata, read back with
``rule_of``). A rule says how the value is checked, whether it may be null or absent on the
wire, whether it is written when None, and whether a JSON list is kept as a tuple. A message
checks its fields when it is made, so the same rules guard sending and parsing. Every failure
is a ``QueueMessageFormatException`` that says which field and why. The id rules live here
too, one home each: client and request ids are table keys (``dal.jobs.model``).
"""

from __future__ import annotations

import dataclasses
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from dal.errors import QueueMessageFormatException
from mosaic.cells import check_cell_sizes

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


def uri(name: str, value: object) -> None:
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


# A field's check: (its name, its value) -> None, or a ``fail`` saying what is wrong.
FieldCheck = Callable[[str, object], None]
RULE = "photomosaics.rule"  # the dataclasses metadata key of a field's Rule


@dataclass(frozen=True)
class Rule:
    """How one message field is checked and written.

    ``optional``: may be null or absent on the wire (the field's default is None, not checked).
    ``omitted_when_none``: written only when set, so a message without it is byte for byte what
    it was before the field existed. ``as_tuple``: a JSON list on the wire, kept as a tuple in
    the (frozen, hashable) message."""

    check: FieldCheck
    optional: bool = False
    omitted_when_none: bool = False
    as_tuple: bool = False


def required(check: FieldCheck, *, as_tuple: bool = False) -> Any:  # type: ignore[explicit-any]  # as dataclasses.field() without a default: the field's own annotation is its type
    """A field every message of its type carries."""
    return dataclasses.field(metadata={RULE: Rule(check, as_tuple=as_tuple)})


def optional(check: FieldCheck, *, written_when_none: bool = False, as_tuple: bool = False) -> Any:  # type: ignore[explicit-any]  # as dataclasses.field(): the field's own annotation is its type
    """A field that may be left out (None, its default); by default a None is not written either."""
    rule = Rule(check, optional=True, omitted_when_none=not written_when_none, as_tuple=as_tuple)
    return dataclasses.field(default=None, metadata={RULE: rule})


def rule_of(field: dataclasses.Field[object]) -> Rule:
    """The rule ``field`` was declared with; KeyError for a field declared without one."""
    rule = field.metadata[RULE]
    assert isinstance(rule, Rule), field.name
    return rule


def integer(low: int, high: int | None = None) -> FieldCheck:
    """An int (never a bool) within ``low``..``high``."""
    return lambda name, value: _check_int(name, value, low=low, high=high)


def client_id(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise _not_text(name, value)
    check_client_id(value)


def request_id(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise _not_text(name, value)
    check_request_id(value)


def _not_text(name: str, value: object) -> QueueMessageFormatException:
    return fail(f"{name} must be a string, got {type(value).__name__}")


def cell_sizes(_name: str, value: object) -> None:
    """Several cell sizes (``mosaic.cells``); one size is the field left out, not ``[1]``."""
    try:
        check_cell_sizes(value)
    except ValueError as exc:
        raise fail(f"cell_sizes: {exc}") from None
    if isinstance(value, tuple) and len(value) < 2:
        raise fail("cell_sizes: one size is the default; leave the field out")


def photo_names(_name: str, value: object) -> None:
    if not isinstance(value, tuple) or not 1 <= len(value) <= MAX_PHOTOS_PER_INDEX_REQUEST:
        raise fail(f"photos must be a list of 1..{MAX_PHOTOS_PER_INDEX_REQUEST} staged photo names")
    for name in value:
        if not isinstance(name, str) or not _PHOTO_NAME.fullmatch(name) or ".." in name:
            raise fail(f"photos: {str(name)[:80]!r} is not a staged photo name ([A-Za-z0-9._-], 1..160)")
    if len(set(value)) != len(value):
        raise fail("photos names a photo twice")


def library_version(_name: str, value: object) -> None:
    if not isinstance(value, str) or not _LIBRARY_VERSION.fullmatch(value):
        raise fail(f"library_version must be 1..64 lower-case hex digits, got {str(value)[:80]!r}")


def library_name(_name: str, value: object) -> None:
    if not isinstance(value, str):
        raise fail(f"library must be a string, got {type(value).__name__}")
    if not _LIBRARY_NAME.fullmatch(value):
        raise fail(f"library must be a library name (3-63 of a-z, 0-9 and single hyphens), got {value[:80]!r}")


def flag(name: str, value: object) -> None:
    """True, or the field left out: one spelling of "on" on the wire."""
    if value is not True:  # a flag that is either there (true) or absent: one spelling on the wire
        raise fail(f"{name} must be true or absent, got {str(value)[:40]!r}")


def _number(value: object) -> bool:
    # type(), not isinstance: a bool is an int subclass but never a number of seconds
    return isinstance(value, int | float) and type(value) in (int, float) and math.isfinite(value) and value >= 0


def report(_name: str, value: object) -> None:
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


def band(_name: str, value: object) -> None:
    if not isinstance(value, str):
        raise fail(f"band must be a Base64 string, got {type(value).__name__}")
    if not value or len(value) > MAX_INLINE_BAND_CHARS or len(value) % 4 or not _BASE64.fullmatch(value):
        raise fail(f"band must be 1..{MAX_INLINE_BAND_CHARS} characters of padded Base64, got {len(value)} characters")


def traceparent(_name: str, value: object) -> None:
    check_traceparent(value)


def check_traceparent(value: object) -> None:
    if not isinstance(value, str) or not _TRACEPARENT.fullmatch(value):
        raise fail(f"traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>), got {str(value)[:80]!r}")


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
