"""Structured (logfmt, ``key=value``) log lines for the worker roles.

The listener writes every line as ``event key=value ...`` with the queue, message id,
dequeue count and ``request_id`` spelled out, so the lines are greppable under any
formatter (pytest's included). While a handler runs, ``message_context`` holds the same
fields in a context variable; ``KeyValueFormatter`` appends them to the handler's own log
lines, so ``grep request_id=<id>`` finds a job's whole story across all role processes.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType

__all__ = ["KeyValueFormatter", "configure_logging", "current_context", "kv", "message_context"]

# The default is an immutable empty mapping: contexts are replaced, never mutated.
_CONTEXT: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "photomosaics_log_context", default=MappingProxyType({})
)


def _value(value: object) -> str:
    text = f"{value:.3f}" if isinstance(value, float) else str(value)
    if text == "" or any(ch.isspace() or ch in '"=' for ch in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def kv(event: str, /, **fields: object) -> str:
    """``event k1=v1 k2="v 2"``; None values are left out."""
    parts = [event] + [f"{key}={_value(value)}" for key, value in fields.items() if value is not None]
    return " ".join(parts)


@contextlib.contextmanager
def message_context(**fields: object) -> Iterator[None]:
    """Attach ``fields`` to every log line written inside the block (this thread/context)."""
    token = _CONTEXT.set({**_CONTEXT.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current_context() -> Mapping[str, object]:
    return _CONTEXT.get()


class KeyValueFormatter(logging.Formatter):
    """``ts=... level=... role=... pid=... logger=... <message> <context fields>``."""

    def __init__(self, *, role: str) -> None:
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        context = " ".join(
            f"{key}={_value(value)}" for key, value in current_context().items() if f"{key}=" not in message
        )
        line = (
            f"ts={self.formatTime(record, '%Y-%m-%dT%H:%M:%S')}.{int(record.msecs):03d} "
            f"level={record.levelname.lower()} role={self.role} pid={record.process} "
            f"logger={record.name} {message}"
        )
        if context:
            line += " " + context
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(*, role: str, level: int | str | None = None) -> None:
    """Send logfmt lines to stderr; ``PHOTOMOSAICS_LOG_LEVEL`` overrides the default INFO."""
    chosen = level if level is not None else os.environ.get("PHOTOMOSAICS_LOG_LEVEL", "INFO").upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter(role=role))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(chosen)
    # The SDK's HTTP logging is one line per request at INFO: far too chatty for a role.
    logging.getLogger("azure").setLevel(logging.WARNING)
