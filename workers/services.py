"""What every handler of the pipeline needs, built once per role process.

One ``RoleServices`` holds the storage-backed stores (``dal.stores.Stores``: blobs, jobs,
queues, libraries), the settings and the worker's name (the *actor* of the job event log).
Handlers take it in their constructor, so a test builds one against Azurite and calls the
handler directly.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from dal.stores import Stores

__all__ = ["RoleServices", "worker_name"]


def worker_name(role: str) -> str:
    """``controller@host:pid``: unique among running workers, readable in the event log."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}"


@dataclass
class RoleServices(Stores):
    """The stores of a role process, with the name it signs the event log with."""

    name: str
