"""The bytes of a work-detected hint (``dal.hints.channel``), local datagram and Redis alike.

A hint is ``w`` ("work on this queue"), ``w<count>`` when its sender knows how many messages
it just sent, and ``...@<lane>`` when they went to a priority lane (``dal.queues.lanes``) of the
queue. Subscribers are called ``on_hint(count, lane)``: None for "unknown" (a hand-back, a
reconnect, an older publisher), so an old payload still means "poll now, anywhere".

A *taken* notice, ``t<count>~<sender>``, is the other half of a hint's count: a listener that
received ``count`` messages tells its peers on the same queue, so their credit (what the hints
announced and nobody has taken yet) falls too, and a competing consumer does not receive again
only to find that a peer took the rest (the trailing empty receives of issue 8). Subscribers
that asked for them get ``on_taken(count, sender)``; the others ignore them (an older one reads
the unknown count as "poll now": one receive, as before). A notice is never a reason to poll.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["OnHint", "OnTaken", "hint_count", "hint_lane", "hint_payload", "hint_taken"]

# What a subscriber is told: how many messages the send announced, and to which lane (None: unknown).
OnHint = Callable[[int | None, int | None], None]
# A peer's taken notice: how many messages it received, and who it is (to ignore one's own).
OnTaken = Callable[[int, str], None]
_SENDER = re.compile(rb"^[A-Za-z0-9._:-]{1,48}$")


def hint_payload(count: int | None = None, lane: int | None = None, *, taken_by: str | None = None) -> bytes:
    """The bytes of one hint: ``w``, ``w<count>``, ``w@<lane>`` or ``w<count>@<lane>``; with
    ``taken_by``, the taken notice ``t<count>~<sender>`` instead."""
    if taken_by is not None:
        return f"t{max(0, int(count or 0))}~{taken_by}".encode()
    text = "w" + ("" if count is None else str(max(0, int(count)))) + ("" if lane is None else f"@{max(0, int(lane))}")
    return text.encode()


def _number(digits: bytes) -> int | None:
    return int(digits) if digits.isdigit() and len(digits) <= 6 else None


def _parts(data: bytes | str | None) -> tuple[bytes, bytes | None]:
    if isinstance(data, str):
        data = data.encode()
    count, at, lane = (data or b"")[1:].partition(b"@")
    return count, lane if at else None


def hint_count(data: bytes | str | None) -> int | None:
    """The message count a hint's payload announces; None when it says none (or is not ours)."""
    return _number(_parts(data)[0])


def hint_lane(data: bytes | str | None) -> int | None:
    """The lane a hint's payload names; None when it names none."""
    lane = _parts(data)[1]
    return None if lane is None else _number(lane)


def hint_taken(data: bytes | str | None) -> tuple[int, str] | None:
    """``(count, sender)`` of a taken notice; None when ``data`` is a hint (or not ours)."""
    if isinstance(data, str):
        data = data.encode()
    if not data or not data.startswith(b"t"):
        return None
    count, _, sender = data[1:].partition(b"~")
    number = _number(count)
    return None if number is None or not _SENDER.match(sender) else (number, sender.decode())
