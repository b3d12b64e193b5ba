"""The bytes of a work-detected hint (``dal.hints``), local datagram and Redis alike.

A hint is ``w`` ("work on this queue"), or ``w<count>`` when its sender knows how many
messages it just sent. Subscribers are called ``on_hint(count)``: None for "unknown" (a
hand-back, a reconnect, an older publisher), so an old payload still means "poll now".
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["OnHint", "hint_count", "hint_payload"]

# What a subscriber is told: how many messages the send announced (None: unknown).
OnHint = Callable[[int | None], None]


def hint_payload(count: int | None = None) -> bytes:
    """The bytes of one hint: ``w``, or ``w<count>`` when the sender knows how many it sent."""
    return b"w" if count is None else b"w%d" % max(0, int(count))


def hint_count(data: bytes | str | None) -> int | None:
    """The message count a hint's payload announces; None when it says none (or is not ours)."""
    if isinstance(data, str):
        data = data.encode()
    digits = (data or b"")[1:]
    return int(digits) if digits.isdigit() and len(digits) <= 6 else None
