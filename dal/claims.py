"""Exclusive, crash-safe claims on a piece of work, as small blobs written conditionally.

Used for the exactly-once stitch: every controller that sees a job's last slice arrive
tries to *claim* the stitch. A claim is a blob created with ``If-None-Match: *`` — the
storage service lets exactly one creator succeed. The claim records its owner: the id of
the queue message that carries the work (stable across redeliveries) and the claimant's
name and time. It can be taken over, with ``If-Match`` on the claim's ETag so that again
only one contender wins, when

- the same message comes back (its previous holder crashed or failed before deleting it:
  the redelivery *is* the owner), or
- the claim is older than ``stale_after`` seconds (a safety net for an owner that is
  wedged rather than dead).

Any other contender sees a live claim held by someone else and backs off: the holder's
message is still on the queue and will come back if the holder dies.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError

from dal.config import StorageClients

__all__ = ["Claim", "BlobClaims"]


@dataclass(frozen=True)
class Claim:
    """Who holds a claim: the work's message id, the claimant's name, and since when (epoch s)."""

    message_id: str
    owner: str
    claimed_at: float


class BlobClaims:
    """Claims stored as blobs ``<name>`` in one container (which must exist)."""

    def __init__(self, storage: StorageClients, container: str, *, stale_after: float = 600.0) -> None:
        self._container = storage.blob_service.get_container_client(container)
        self.stale_after = stale_after

    def _blob(self, name: str) -> Any:
        return self._container.get_blob_client(name)

    def acquire(self, name: str, *, message_id: str, owner: str) -> bool:
        """True when this caller now holds the claim ``name`` (new, retaken, or taken over)."""
        body = json.dumps({"message_id": message_id, "owner": owner, "claimed_at": time.time()}).encode()
        blob = self._blob(name)
        try:
            blob.upload_blob(body, overwrite=False)
            return True
        except ResourceExistsError:
            pass
        held = self._read(name)
        if held is None:  # released between our create and our read: try once more
            try:
                blob.upload_blob(body, overwrite=False)
                return True
            except ResourceExistsError:
                return False
        claim, etag = held
        if claim.message_id != message_id and time.time() - claim.claimed_at < self.stale_after:
            return False
        try:
            blob.upload_blob(body, overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified)
        except (ResourceModifiedError, ResourceExistsError, ResourceNotFoundError):
            return False  # someone else took it over first (412), or it vanished
        return True

    def holder(self, name: str) -> Claim | None:
        """The current claim, or None when nobody holds it."""
        held = self._read(name)
        return None if held is None else held[0]

    def release(self, name: str) -> None:
        """Give the claim up (idempotent)."""
        try:
            self._blob(name).delete_blob()
        except ResourceNotFoundError:
            pass

    def _read(self, name: str) -> tuple[Claim, str] | None:
        try:
            downloader = self._blob(name).download_blob()
            data = downloader.readall()
        except ResourceNotFoundError:
            return None
        etag = downloader.properties.etag
        try:
            raw = json.loads(data)
            claim = Claim(str(raw["message_id"]), str(raw["owner"]), float(raw["claimed_at"]))
        except (ValueError, KeyError, TypeError):
            claim = Claim("", "unreadable claim", 0.0)  # stale at once: anyone may take it over
        return claim, etag
