"""What goes on the wire of a queue: Base64 text, claim-check references, poison envelopes.

- Encoding: Base64 of the UTF-8 text (``TextBase64EncodePolicy``), what Azure Functions'
  queue trigger expects, so a Function can consume our queues and we can consume theirs.
  ``TolerantBase64DecodePolicy`` decodes like ``TextBase64DecodePolicy`` but turns garbage
  into an ``Undecodable`` value instead of failing the whole batch, so one bad message
  cannot block a queue: it is moved to poison, raw.
- Claim check: a payload whose encoded form is over the 64 KiB service limit is stored as a
  blob and the message carries ``{"type": "ClaimCheck", "version": 1, "container", "blob",
  "length"}`` instead; the receiver swaps the blob's text back in.
- Poison envelope: ``{"reason", "dequeue_count", "queue", "moved_at", "message_id",
  "payload", "payload_encoding"}``: the original text with why it was moved aside.
  ``payload_encoding`` is ``"text"`` (the decoded payload) or ``"wire"`` (the raw text as
  stored, when it was not even Base64 of UTF-8).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from azure.storage.queue import TextBase64DecodePolicy, TextBase64EncodePolicy

__all__ = [
    "MAX_ENCODED_MESSAGE_BYTES",
    "ClaimCheck",
    "PoisonEntry",
    "TextBase64EncodePolicy",
    "TolerantBase64DecodePolicy",
    "Undecodable",
    "claim_check_reference",
    "encoded_length",
    "parse_claim_check",
    "poison_envelope",
    "stored_text",
]

# The service's limit on a message's text as stored (after Base64): 64 KiB.
MAX_ENCODED_MESSAGE_BYTES = 64 * 1024
CLAIM_CHECK_TYPE = "ClaimCheck"


def encoded_length(text: str) -> int:
    """Length of ``text`` on the wire after UTF-8 and Base64."""
    return 4 * ((len(text.encode("utf-8")) + 2) // 3)


@dataclass(frozen=True)
class Undecodable:
    """A stored message text that is not Base64 of UTF-8; ``raw`` is exactly what was stored."""

    raw: str
    reason: str


def stored_text(content: str | Undecodable | None) -> tuple[str, str]:
    """``(payload, payload_encoding)`` of a received message's text as a poison envelope keeps it:
    an undecodable one exactly as stored (``"wire"``), else its text."""
    if isinstance(content, Undecodable):
        return content.raw, "wire"
    return content or "", "text"


class TolerantBase64DecodePolicy(TextBase64DecodePolicy):
    """``TextBase64DecodePolicy`` that reports garbage per message instead of failing the batch."""

    def decode(self, content: str, response: object) -> str | Undecodable:  # type: ignore[override]  # the SDK's says str; an Undecodable per bad message is this policy's point
        # The same decoding as the parent, but strict (validate=True: the parent silently drops
        # non-alphabet characters) and without raising: the parent's DecodeError fails the whole
        # receive (and in azure-storage-queue 12.18 even fails to construct: AttributeError).
        try:
            return base64.b64decode(content, validate=True).decode("utf-8")
        except ValueError as exc:  # binascii.Error and UnicodeDecodeError are ValueErrors
            return Undecodable(raw=content, reason=f"message text is not Base64 of UTF-8 text: {exc}")


@dataclass(frozen=True)
class ClaimCheck:
    """Where the real payload of a message is stored."""

    container: str
    blob: str
    length: int


def claim_check_reference(check: ClaimCheck) -> str:
    """The message text that stands in for a payload stored as a blob."""
    return json.dumps(
        {
            "type": CLAIM_CHECK_TYPE,
            "version": 1,
            "container": check.container,
            "blob": check.blob,
            "length": check.length,
        },
        separators=(",", ":"),
    )


def parse_claim_check(text: str | Undecodable) -> ClaimCheck | None:
    """The claim check a message text carries, or None if it is an ordinary payload (or not text:
    the caller's parse says why)."""
    if not isinstance(text, str) or not text.startswith('{"type":"ClaimCheck"'):
        return None
    try:
        body = json.loads(text)
        check = ClaimCheck(container=body["container"], blob=body["blob"], length=body["length"])
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nested past the decoder
        return None
    if not all(isinstance(v, str) and v for v in (check.container, check.blob)) or type(check.length) is not int:
        return None
    return check


@dataclass(frozen=True)
class PoisonEntry:
    """One message moved aside: why, after how many deliveries, and its full original text."""

    reason: str
    dequeue_count: int
    queue: str
    moved_at: datetime
    payload: str
    payload_encoding: str = "text"
    message_id: str | None = None

    @classmethod
    def from_text(cls, text: str) -> PoisonEntry:
        body = json.loads(text)
        return cls(
            reason=body["reason"],
            dequeue_count=body["dequeue_count"],
            queue=body["queue"],
            moved_at=datetime.fromisoformat(body["moved_at"]),
            payload=body["payload"],
            payload_encoding=body.get("payload_encoding", "text"),
            message_id=body.get("message_id"),
        )


def poison_envelope(
    *,
    reason: str,
    dequeue_count: int,
    queue: str,
    payload: str,
    payload_encoding: str = "text",
    message_id: str | None = None,
    moved_at: datetime | None = None,
) -> str:
    """The text of a poison copy; ``PoisonEntry.from_text`` reads it back."""
    when = moved_at or datetime.now(UTC)
    return json.dumps(
        {
            "reason": reason,
            "dequeue_count": dequeue_count,
            "queue": queue,
            "moved_at": when.isoformat(),
            "message_id": message_id,
            "payload": payload,
            "payload_encoding": payload_encoding,
        },
        separators=(",", ":"),
    )
