"""A warm standby: a role's process that has done its imports and waits for the word to start.

Starting a role costs its Python imports (the Azure SDKs, NumPy, pyvips: about 0.7 s on a
quiet machine, 1.5 s on a busy one) before it takes a message. For a role with no peer (one
controller, one responder) that is how long every job waits after it dies. The supervisor
(``photomosaics.local.supervisor``) keeps one standby per such role, started with
``PHOTOMOSAICS_STANDBY=1`` and a pipe on its stdin: the role's command imports what it needs,
calls ``wait_if_standby`` before it touches storage, and blocks there. When the role's process
dies the supervisor writes ``go`` to the standby, which then starts as the role (storage
check, listeners), and starts the next standby. End of file instead (the supervisor stopping,
or gone) ends the standby quietly.
"""

from __future__ import annotations

import os
import sys

__all__ = ["GO", "STANDBY_ENV", "wait_if_standby"]

STANDBY_ENV = "PHOTOMOSAICS_STANDBY"
GO = b"go\n"


def wait_if_standby() -> None:
    """In a standby: block until the supervisor says ``go``; exit 0 on anything else (EOF)."""
    if os.environ.pop(STANDBY_ENV, "") != "1":  # popped: the role's own children are no standbys
        return
    if sys.stdin is None or sys.stdin.buffer.readline() != GO:
        raise SystemExit(0)
