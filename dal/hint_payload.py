"""The bytes of a work-detected hint (``dal.hints``), local datagram and Redis alike.

A hint is ``w`` ("work on this queue"), ``w<count>`` when its sender knows how many messages
it just sent, and ``...@<lane>`` when they went to a priority lane (``dal.lanes``) of the
queue. Subscribers are called ``on_hint(count, lane)``: None for "unknown" (a hand-back, a
reconnect, an older publisher), so an old payload still means "poll now, anywhere".
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["OnHint", "hint_count", "hint_lane", "hint_payload"]

# What a subscriber is told: how many messages the send announced, and to which lane (None: unknown).
OnHint = Callable[[int | None, int | None], None]


def hint_payload(count: int | None = None, lane: int | None = None) -> bytes:
    """The bytes of one hint: ``w``, ``w<count>``, ``w@<lane>`` or ``w<count>@<lane>``."""
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
