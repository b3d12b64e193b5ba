"""How a ``QueueListener`` receives: batch size, concurrency, polling pace, retries, leases.

One frozen value, checked when it is made, so a listener is built from a queue, a handler, these
options and its collaborators (hints, lease journal, poison hook) instead of seventeen keywords.
The defaults are the application's (``dal.config.Settings``); a role makes its options from the
settings it runs with (``from_settings``), a test from the few it changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dal.config import Settings
from dal.queues.stored_queue import MAX_BATCH  # the service's limit per receive

__all__ = ["ListenerOptions"]

_DEFAULTS = Settings()  # written once, in dal.config


@dataclass(frozen=True)
class ListenerOptions:
    batch_size: int = _DEFAULTS.batch_size  # messages asked for per receive (1..32)
    concurrency: int = 1  # handlers running at once, at most
    min_concurrency: int | None = None  # ... at least (the elastic pool's floor); None: concurrency
    prefetch: int = 0  # messages held beyond the running handlers
    poll_min: float = _DEFAULTS.poll_min_interval  # the idle back-off's first wait, seconds
    poll_max: float = _DEFAULTS.poll_max_interval  # ... and its cap without wake-up hints
    poll_max_hinted: float | None = None  # the cap while hints cover the queue; None: the settings'
    retry_delay: float = _DEFAULTS.retry_delay  # a failed handler's first retry delay
    max_retry_delay: float = 300.0
    grace: float = 30.0  # how long a graceful stop lets running handlers finish
    visibility_timeout: int | None = None  # the lease per receive; None: the queue's own
    hinted_cap: float = field(init=False)  # poll_max_hinted resolved

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be 1..{MAX_BATCH}, got {self.batch_size}")
        if self.concurrency < 1 or self.prefetch < 0:
            raise ValueError(f"concurrency must be >= 1 and prefetch >= 0, got {self.concurrency}, {self.prefetch}")
        if not 0 < self.poll_min <= self.poll_max:
            raise ValueError(f"need 0 < poll_min <= poll_max, got {self.poll_min}, {self.poll_max}")
        if not 1 <= self.low <= self.concurrency:
            raise ValueError(f"need 1 <= min_concurrency <= concurrency, got {self.low}, {self.concurrency}")
        if self.poll_max_hinted is not None and self.poll_max_hinted < self.poll_max:
            raise ValueError(f"poll_max_hinted must be >= poll_max, got {self.poll_max_hinted} < {self.poll_max}")
        if self.visibility_timeout is not None and self.visibility_timeout < 1:
            raise ValueError(f"visibility_timeout must be >= 1 s, got {self.visibility_timeout}")
        if self.retry_delay < 0 or self.max_retry_delay < self.retry_delay or self.grace < 0:
            raise ValueError("need 0 <= retry_delay <= max_retry_delay and grace >= 0")
        hinted = self.poll_max_hinted
        cap = hinted if hinted is not None else max(self.poll_max, _DEFAULTS.poll_max_hinted_interval)
        object.__setattr__(self, "hinted_cap", cap)

    @property
    def low(self) -> int:
        """The elastic pool's floor."""
        return self.concurrency if self.min_concurrency is None else self.min_concurrency

    @classmethod
    def from_settings(cls, settings: Settings) -> ListenerOptions:
        """A role's pace: batch size, polling and retry delay from the settings it runs with
        (``dataclasses.replace`` the rest)."""
        return cls(
            batch_size=settings.batch_size,
            poll_min=settings.poll_min_interval,
            poll_max=settings.poll_max_interval,
            poll_max_hinted=max(settings.poll_max_hinted_interval, settings.poll_max_interval),
            retry_delay=settings.retry_delay,
        )
