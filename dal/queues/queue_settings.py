"""A work queue's tunable settings, read from the queue's own metadata.

``poison_threshold`` and ``timeout`` come from the queue's metadata (``poisonthreshold``,
``defaulttimeout``) so an operator can tune a queue without a redeploy; without metadata, or
with a value out of range (logged), the defaults of ``dal.config.Settings`` apply (5
deliveries, like the WebJobs runtime; 300 s). The metadata is read once and kept until
``refresh``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from azure.core.exceptions import ResourceNotFoundError

from dal.config import Settings
from dal.queues.stored_queue import MAX_VISIBILITY, check_visibility

if TYPE_CHECKING:
    from azure.storage.queue import QueueClient

log = logging.getLogger(__name__)

POISON_THRESHOLD_KEY = "poisonthreshold"
TIMEOUT_KEY = "defaulttimeout"


class QueueSettings:
    """The settings of the queue ``name``, whose client ``client`` gives at each request."""

    def __init__(self, client: Callable[[], QueueClient], name: str, defaults: Settings) -> None:
        self._client = client
        self._name = name
        self.defaults = defaults
        self._metadata: dict[str, str] | None = None

    def refresh(self) -> None:
        """Forget the cached metadata; the next access reads it again."""
        self._metadata = None

    def _meta(self) -> dict[str, str]:
        if self._metadata is None:
            try:
                self._metadata = dict(self._client().get_queue_properties().metadata or {})
            except ResourceNotFoundError:
                return {}
        return self._metadata

    def _meta_int(self, key: str, default: int, *, low: int, high: int) -> int:
        raw = self._meta().get(key)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            log.warning("queue %s: metadata %s=%r is not %d..%d; using %d", self._name, key, raw, low, high, default)
            return default
        return value

    @property
    def poison_threshold(self) -> int:
        """Deliveries allowed before a message is moved to poison (metadata ``poisonthreshold``)."""
        return self._meta_int(POISON_THRESHOLD_KEY, self.defaults.poison_threshold, low=1, high=10_000)

    @property
    def timeout(self) -> int:
        """Default invisibility in seconds (metadata ``defaulttimeout``)."""
        return self._meta_int(TIMEOUT_KEY, self.defaults.visibility_timeout, low=1, high=MAX_VISIBILITY)

    def configure(self, *, poison_threshold: int | None = None, timeout: int | None = None) -> None:
        """Store settings in the queue's metadata, where every process reads them."""
        client = self._client()
        metadata = dict(client.get_queue_properties().metadata or {})
        if poison_threshold is not None:
            if type(poison_threshold) is not int or poison_threshold < 1:
                raise ValueError(f"poison_threshold must be >= 1, got {poison_threshold!r}")
            metadata[POISON_THRESHOLD_KEY] = str(poison_threshold)
        if timeout is not None:
            check_visibility("timeout", timeout, low=1)
            metadata[TIMEOUT_KEY] = str(timeout)
        client.set_queue_metadata(metadata=metadata)
        self._metadata = metadata
