"""What a supervised embedded Azurite is doing, for /healthz.

The supervisor of ``photomosaics run`` records the emulator's state in a small JSON file
(named by ``PHOTOMOSAICS_STORAGE_STATUS_FILE``); the web app reads it to say *why* storage
is unavailable (restarting, failed) instead of pointing at a connection string the user
never set.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

STATUS_FILE_ENV = "PHOTOMOSAICS_STORAGE_STATUS_FILE"


def write_status(path: str | Path, *, state: str, message: str, restarts: int) -> None:
    """Record the embedded Azurite's state (``running``/``restarting``/``failed``), atomically."""
    target = Path(path)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps({"state": state, "message": message, "restarts": restarts, "at": time.time()}))
    os.replace(tmp, target)


def read_status(environ: dict[str, str] | None = None) -> dict[str, object] | None:
    """The status a supervisor recorded (``PHOTOMOSAICS_STORAGE_STATUS_FILE``), or None."""
    env = os.environ if environ is None else environ
    path = env.get(STATUS_FILE_ENV)
    if not path:
        return None
    try:
        status = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None
