"""What a message handler raises to tell the listener how a message ended.

    PhotoMosaicsError                       (the whole tree: mosaic.errors)
     └── WorkerError
          ├── PermanentJobError   the job can never succeed (corrupt image, missing library):
          │                       the message goes to ``<queue>-poison`` at once with the reason
          └── RetryLater          not now (a dependency is not ready yet): the message is
                                  released with the given delay and no error is logged

Any other exception a handler raises is a *transient* failure: the message is released
with a retry delay that grows with its dequeue count and is poisoned after the queue's
threshold. ``KeyboardInterrupt``/``SystemExit`` are not ``Exception``: a handler cannot
swallow a shutdown by accident.
"""

from __future__ import annotations

from dal.errors import PhotoMosaicsError

__all__ = ["PermanentJobError", "RetryLater", "WorkerError"]


class WorkerError(PhotoMosaicsError):
    """Root of the errors a worker role raises on purpose."""


class PermanentJobError(WorkerError):
    """Retrying cannot help: fail the job and move the message to the poison queue now.

    ``reason`` is written for a person (it ends up on the job page and in the poison copy).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RetryLater(WorkerError):
    """Ask for the message again in ``delay`` seconds without counting it as an error.

    The dequeue count still rises on the next delivery, so a message that keeps asking is
    poisoned after the threshold like any other.
    """

    def __init__(self, reason: str = "retry requested", *, delay: float = 1.0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay = delay
