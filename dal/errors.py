"""The errors of the storage layer (the whole tree is drawn in ``mosaic.errors``).

    StorageConfigurationError   wrong key, unknown account, unreachable endpoint: fail at start-up
    QueueMessageFormatException a payload that is not a valid message: poison at once
    ClaimCheckMissingError      a message refers to a payload blob that is gone: poison at once
      ClaimCheckRefusedError    ... or to one outside the claim-check container: poison, never read
    BlobMissingError            a blob (or its container) that should exist does not
      BlobChangedError          ... in the version asked for (ETag): it was replaced
    RenderedFormatError         a rendered-slice blob in no format we write
    TileMapFormatError          a tile-map blob in no format we write
    LibraryError                a tile library refused: bad name, not found, nothing usable,
                                a new one's name taken (LibraryExistsError)
    JobNotFoundError, JobExistsError, JobUpdateConflictError   job rows (the last: ETag races lost)
    QuotaExceeded, ServiceBusy  admission refused: a client's quota, or too much queued work

Every exception class of the storage layer lives in this one module.

Errors from ``azure.core.exceptions`` are translated into these at the ``dal/`` boundary
where the caller must decide something (configuration versus transient); transient
errors (timeouts, 500, 503) are retried by the SDK's retry policy before they surface.

    StorageUnavailable          an alias, not a class of ours: ``azure.core.exceptions.AzureError``

What is left after the retries (the service down or failing) is not translated call by call:
it surfaces as Azure's own ``AzureError`` (or a subclass), and ``StorageUnavailable`` is that
very class under a name that lets code outside ``dal/`` catch it without importing Azure's
types (``tests/test_layers.py`` forbids that import). It is deliberately *not* rooted in
``PhotoMosaicsError``: ``except PhotoMosaicsError`` means "we refused this on purpose", and a
storage outage is not that. The web app answers it with 503 (``webapp.errors``); a worker
lets its message be retried.
"""

from __future__ import annotations

from azure.core.exceptions import AzureError

from mosaic.errors import PhotoMosaicsError  # the root lives in the bottom layer, the engine

# An alias, documented above: Azure's base error under the name the rest of the project uses.
StorageUnavailable = AzureError


class StorageConfigurationError(PhotoMosaicsError):
    """The storage account cannot be used as configured; retrying will not help."""


class QueueMessageFormatException(PhotoMosaicsError):
    """A queue payload that does not parse into a valid message.

    ``raw`` keeps the offending text (or bytes) so that the poison copy can carry it.
    """

    def __init__(self, reason: str, raw: str | bytes | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw


class ClaimCheckMissingError(PhotoMosaicsError):
    """A message's claim-check blob is missing, so its payload cannot be recovered."""


class ClaimCheckRefusedError(ClaimCheckMissingError):
    """A message's claim check names a blob outside the project's claim-check container: never
    read nor deleted (a forged reference could point at any blob the account holds); poison."""


class BlobMissingError(PhotoMosaicsError, LookupError):
    """A blob that should exist does not (or its container does not)."""


class BlobChangedError(BlobMissingError):
    """The version of a blob asked for (by ETag) is gone: the blob was replaced since."""


class JobNotFoundError(PhotoMosaicsError, LookupError):
    """The job does not exist (never created, or deleted)."""


class JobExistsError(PhotoMosaicsError):
    """A job with this client id and request id already exists."""


class JobUpdateConflictError(PhotoMosaicsError):
    """An update lost the ETag race more times than is reasonable; the table is too contended."""


class LibraryError(PhotoMosaicsError):
    """Root of the tile-library errors."""


class InvalidLibraryNameError(LibraryError, ValueError):
    """A library name that cannot be a container name (or is reserved by the workflow)."""


class LibraryNotFoundError(LibraryError, LookupError):
    """No such library, or a container without an index (not created by this application)."""


class EmptyLibraryError(LibraryError, ValueError):
    """The source held no usable image, so there is nothing to make a library of."""


class LibraryExistsError(LibraryError):
    """A new library's name is taken: by a library, or by a creation under way (its claim)."""


class RenderedFormatError(PhotoMosaicsError, ValueError):
    """A rendered-slice blob that is neither a ``.npy`` array of RGB pixels nor a PNG."""


class ServiceBusy(PhotoMosaicsError):
    """The queues hold more work than the processors finish in the allowed wait."""

    def __init__(self, detail: str, *, retry_after: int, wait_seconds: float) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after
        self.wait_seconds = wait_seconds


class QuotaExceeded(PhotoMosaicsError):
    """The client is over one of its quotas; nothing was recorded."""

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = max(1, int(retry_after))


class TileMapFormatError(PhotoMosaicsError, ValueError):
    """A tile-map blob that is not one this release wrote."""
