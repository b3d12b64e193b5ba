"""Foreign and malformed messages, as an operator (or a stranger) might put on a work queue.

Seven kinds, each moved to poison at receive for a different reason: text that is not Base64,
Base64 of text that is not JSON, JSON of an unknown type, a SliceRequest of an unknown
version, two JSON values that are no message at all (``[]``, ``null``), and what starts as a
claim check but nests deeper than Python's JSON decoder recurses (8 KB on the wire). ``put_junk``
sends them straight to the storage queue, past every check of ``ImageProcessingQueue.submit``
and without a work-detected hint, as a foreign sender would.
"""

from __future__ import annotations

import base64
import json
from typing import Any

__all__ = ["JUNK", "put_junk"]

_SLICE_REQUEST_V99 = json.dumps(
    {
        "type": "SliceRequest",
        "version": 99,
        "queue_uri": "http://127.0.0.1:10001/devstoreaccount1/slicerequest",
        "client_id": "stranger",
        "request_id": "00000000-0000-0000-0000-000000000099",
        "image_library_uri": "http://127.0.0.1/lib",
        "slice_uri": "http://127.0.0.1/x/0.png",
        "slice_sequence": 0,
        "tile_size": 8,
    }
)

# (what it is, the text as it goes on the wire: Base64 already where it should be)
JUNK: list[tuple[str, str]] = [
    ("not Base64", "this is not base64 {"),
    ("Base64 of 'hello'", base64.b64encode(b"hello").decode()),
    ("an unknown type", base64.b64encode(b'{"type": "Nope"}').decode()),
    ("a SliceRequest of version 99", base64.b64encode(_SLICE_REQUEST_V99.encode()).decode()),
    ("an empty list", base64.b64encode(b"[]").decode()),
    ("null", base64.b64encode(b"null").decode()),
    (
        "a claim check nested past the decoder",
        base64.b64encode(('{"type":"ClaimCheck","x":' + "[" * 3000 + "]" * 3000 + "}").encode()).decode(),
    ),
]


def put_junk(queue: Any, rounds: int = 1) -> int:
    """Send ``rounds`` x the seven kinds of junk to ``queue`` (an ``ImageProcessingQueue``); how many."""
    raw = queue.storage.queue_service.get_queue_client(queue.name)  # no encode policy: the text as it is
    for _ in range(rounds):
        for _what, text in JUNK:
            raw.send_message(text)
    return rounds * len(JUNK)
