"""A block blob written as a stream: ``BlobStore.open_writer``'s ``BlobWriter``.

For an output made front to back by something that will not wait (libvips writing a Deep
Zoom zip: ``mosaic.deepzoom.write_dzi_zip``), so that its upload overlaps its making and no
temporary file of it is needed.

Contract:

- ``write(data)`` only appends to a buffer: it never waits for the network, except when the
  uploader is ``queued_blocks`` blocks behind (then it waits for a slot: memory is bounded at
  about ``(queued_blocks + 2) x block_bytes`` whatever the size of the stream, ~16 MiB by
  default for a 1 GB pyramid).
- **Cost as a whole upload.** A stream that ends within its first block is one Put Blob at
  ``close()``, as ``BlobStore.upload`` would make it (small jobs' pyramids are tens of KB).
  Past the first block, each full block is staged (Put Block) by one background thread as it
  fills, and ``close()`` stages the rest and commits the list (Put Block List): ``n / block``
  + 1 transactions, the same as the SDK's own chunked upload.
- **Nothing half-written is visible.** Staged blocks are invisible until the commit; a failed
  stage or commit leaves the blob as it was (the old version, or none), and Azure discards
  uncommitted blocks after a week (or at the blob's next commit). Block ids are random, the
  SDK's format, so two writers of one name (a redelivered message) never commit each other's
  blocks.
- **Write once, if asked** (``keep_existing``): the Put Blob or the commit carries
  ``If-None-Match: *``, so a blob that exists is left as it is (``kept``) and no reader of it
  sees a new version; the staged blocks of such a writer go the way of any uncommitted block.
- **Failures surface at once.** A failed stage is raised by the next ``write`` (the caller's
  producer then stops: libvips ends the build) or by ``close()``; the upload thread has
  ended by the time either returns or raises, and ``abort()`` ends it without committing. As a
  context manager: commit on a clean exit, abort on an exception.
- Each block carries its MD5 (``validate_content``): the service refuses a block damaged in
  transit instead of committing it. It also spares Azurite its CRC64 of every staged block,
  computed in JavaScript when no MD5 comes with it: a 4 MiB Put Block took 62 ms without, 21 ms
  with (a Put Blob of it 14 ms), and that CPU is taken from the libvips build beside it.
- Transient faults are the SDK retry policy's business (the client's, ``dal.config``): a stage
  or commit raises only after it gave up. A missing container is ``BlobMissingError``, as for
  ``BlobStore.upload``.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from types import TracebackType
from typing import Any
from uuid import uuid4

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import ContentSettings

from dal.errors import BlobMissingError

__all__ = ["WRITER_BLOCK_BYTES", "WRITER_QUEUED_BLOCKS", "BlobWriter"]

# The SDK's own block size (max_block_size): 50,000 blocks make 195 GiB. A bigger block costs
# fewer transactions and a longer tail after the last write (the last block goes up then).
WRITER_BLOCK_BYTES = 4 * 1024 * 1024
WRITER_QUEUED_BLOCKS = 2  # full blocks waiting for the upload thread, besides the one it sends
_END = None  # the queue's last item


class BlobWriter:
    """A write-only stream into one block blob (see the module docstring)."""

    def __init__(
        self,
        client: Any,
        *,
        container: str,
        content_type: str,
        block_bytes: int = WRITER_BLOCK_BYTES,
        queued_blocks: int = WRITER_QUEUED_BLOCKS,
        keep_existing: bool = False,
    ) -> None:
        if block_bytes < 1 or queued_blocks < 1:
            raise ValueError(f"block_bytes and queued_blocks must be positive, got {block_bytes}, {queued_blocks}")
        self._client = client
        self._container = container
        self._settings = ContentSettings(content_type=content_type)
        self._block_bytes = block_bytes
        self._buffer = bytearray()
        self._blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=queued_blocks)
        self._ids: list[str] = []  # staged, in order; written by the upload thread only
        self._error: BaseException | None = None
        self._aborted = False
        self._done = False
        self._thread: threading.Thread | None = None
        self._context = contextvars.copy_context()  # the uploads stay in the caller's trace
        self._keep_existing = keep_existing
        self.kept = False  # keep_existing, and the blob existed: nothing was stored
        self.url = str(client.url)

    @property
    def staged_blocks(self) -> int:
        """Blocks staged so far (0 for a stream that stayed within its first block)."""
        return len(self._ids)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data``; raise the upload's error when it has failed."""
        self._check_open()
        self._raise_failure()
        self._buffer += data
        while len(self._buffer) > self._block_bytes:  # strictly more: a stream of one block is one Put Blob
            block = bytes(self._buffer[: self._block_bytes])
            del self._buffer[: self._block_bytes]
            self._send(block)
        self._raise_failure()
        return len(data)

    def close(self) -> None:
        """Store the blob: one Put Blob, or the last block and the commit; raise if it failed."""
        self._check_open()
        self._done = True
        keep = self._keep_existing
        try:
            if self._thread is None:
                self._client.upload_blob(bytes(self._buffer), overwrite=not keep, content_settings=self._settings)
            else:
                if self._buffer:
                    self._send(bytes(self._buffer))
                self._finish_thread()
                self._raise_failure()
                only_new = {"match_condition": MatchConditions.IfMissing} if keep else {}
                self._client.commit_block_list(self._ids, content_settings=self._settings, **only_new)
        except ResourceNotFoundError as exc:
            raise self._missing() from exc
        except ResourceExistsError:
            if not keep:
                raise
            self.kept = True  # the staged blocks are discarded by the blob's next commit, or after a week
        finally:
            self._buffer = bytearray()
            self._finish_thread()

    def abort(self) -> None:
        """Give the stream up: nothing is committed; the upload thread ends. Idempotent."""
        if self._done:
            return
        self._done = self._aborted = True
        self._buffer = bytearray()
        self._finish_thread()

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._done:
            return
        if kind is None:
            self.close()
        else:
            self.abort()

    def _check_open(self) -> None:
        if self._done:
            raise ValueError("the blob writer is closed")

    def _send(self, block: bytes) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._context.run, args=(self._upload_blocks,), name="blob-writer", daemon=True
            )
            self._thread.start()
        self._blocks.put(block)  # waits while the uploader is queued_blocks behind: bounded memory

    def _upload_blocks(self) -> None:
        """The upload thread: stage each block in order; after a failure (or an abort) only
        drain the queue, so a producer waiting for a slot is released at once."""
        while (block := self._blocks.get()) is not _END:
            if self._error is not None or self._aborted:
                continue
            block_id = f"{uuid4().int:048d}"  # the SDK's own format (it base64-encodes it)
            try:
                self._client.stage_block(block_id, block, length=len(block), validate_content=True)
            except BaseException as exc:
                self._error = exc
            else:
                self._ids.append(block_id)

    def _finish_thread(self) -> None:
        if self._thread is not None:
            self._blocks.put(_END)
            self._thread.join()
            self._thread = None

    def _raise_failure(self) -> None:
        error = self._error
        if error is None:
            return
        if isinstance(error, ResourceNotFoundError):
            raise self._missing() from error
        raise error

    def _missing(self) -> BlobMissingError:
        return BlobMissingError(f"container {self._container!r} does not exist (ensure_containers creates it)")
