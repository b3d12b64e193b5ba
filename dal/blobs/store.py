"""Blob containers: the four workflow containers, claim-check payloads and tile libraries.

Every method takes a *logical* container name. ``container_name`` adds the test-isolation
prefix to the workflow and claim-check containers only; any other name (a tile library) is
used as given, so applying it twice changes nothing.

Tile libraries are containers too, but what makes one (and how it is named) is
``dal.blobs.libraries``' business: ``LibraryStore``.

Storage errors a caller must act on are translated here: a missing blob or container
becomes ``BlobMissingError``. Listing follows continuation tokens (a page holds at most
5,000 names), so callers see every blob however many there are. ``open_writer`` uploads a
blob while it is being made (``dal.blobs.writer``: a Deep Zoom zip as libvips writes it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.storage.blob import ContentSettings

from dal.blobs.writer import WRITER_BLOCK_BYTES, BlobWriter
from dal.config import CLAIM_CHECK_CONTAINER, WORKFLOW_CONTAINERS, StorageClients
from dal.errors import BlobChangedError, BlobMissingError
from dal.names import prefixed

CONTAINER_NAME_MIN, CONTAINER_NAME_MAX = 3, 63  # Azure's container-name length rule
_CONTAINER = re.compile(rf"^(?=.{{{CONTAINER_NAME_MIN},{CONTAINER_NAME_MAX}}}$)[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]$")
_PREFIXED = frozenset((*WORKFLOW_CONTAINERS, CLAIM_CHECK_CONTAINER))
_DELETE_BATCH = 256  # the most a blob batch request may carry
_DELETED_OR_ABSENT = (200, 202, 404)
STREAM_CHUNK_BYTES = 4 * 1024 * 1024  # open_stream's range reads (the SDK's own chunk size)


def validate_container_name(name: str) -> str:
    """Azure's rule: 3..63 of a-z 0-9 and single hyphens, starting and ending alphanumeric."""
    if not isinstance(name, str) or not _CONTAINER.match(name):
        raise ValueError(
            f"invalid container name {name!r}: {CONTAINER_NAME_MIN}..{CONTAINER_NAME_MAX} characters of a-z, 0-9 and single hyphens, "
            "starting and ending with a letter or digit"
        )
    return name


def _validate_blob_name(name: str) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 1024 or any(ord(c) < 0x20 for c in name):
        raise ValueError(f"invalid blob name {name!r}: 1..1024 characters, no control characters")
    return name


@dataclass(frozen=True)
class Blob:
    """A downloaded blob with what came with it."""

    data: bytes
    content_type: str | None
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ranged:
    """Part of a blob (``read_range``): the bytes, and the whole blob's size and ETag."""

    data: bytes
    size: int
    etag: str


class BlobStore:
    """Blob access for every role; ``prefix`` isolates tests' workflow containers."""

    def __init__(self, storage: StorageClients, *, prefix: str = "") -> None:
        self.storage = storage
        self.prefix = prefix
        if prefix:
            validate_container_name(prefixed(prefix, max(_PREFIXED, key=len)))

    @cached_property
    def _service(self) -> Any:
        return self.storage.blob_service

    def container_name(self, logical: str) -> str:
        """The real container name: prefixed for workflow and claim-check containers."""
        name = prefixed(self.prefix, logical) if logical in _PREFIXED else logical
        return validate_container_name(name)

    def _container(self, container: str) -> Any:
        return self._service.get_container_client(self.container_name(container))

    def _blob(self, container: str, name: str) -> Any:
        return self._service.get_blob_client(self.container_name(container), _validate_blob_name(name))

    def ensure_containers(self) -> None:
        """Create the workflow and claim-check containers that are missing (private access)."""
        for logical in (*WORKFLOW_CONTAINERS, CLAIM_CHECK_CONTAINER):
            try:
                self._container(logical).create_container()
            except ResourceExistsError:
                pass

    def upload(
        self,
        container: str,
        name: str,
        data: bytes,
        *,
        content_type: str,
        metadata: dict[str, str] | None = None,
        keep_existing: bool = False,
    ) -> str:
        """Write (or overwrite: handlers are idempotent) one blob; return its URL.

        ``keep_existing``: write only if the blob does not exist yet (``If-None-Match: *``, the
        same one request), else leave it as it is. For a job's final outputs, which a late
        duplicate (a hedged slice's slow first holder) must not replace under a reader: the
        bytes would be the same, but the new ETag breaks a download in progress."""
        client = self._blob(container, name)
        try:
            client.upload_blob(
                data,
                overwrite=not keep_existing,
                content_settings=ContentSettings(content_type=content_type),
                metadata=metadata,
            )
        except ResourceNotFoundError as exc:
            raise BlobMissingError(
                f"container {self.container_name(container)!r} does not exist (ensure_containers creates it)"
            ) from exc
        except ResourceExistsError:
            if not keep_existing:
                raise
        return str(client.url)

    def fetch(self, container: str, name: str) -> Blob:
        """Download a blob with its content type and metadata."""
        try:
            downloader = self._blob(container, name).download_blob()
            data = downloader.readall()
        except ResourceNotFoundError as exc:
            raise BlobMissingError(f"blob {self.container_name(container)}/{name} does not exist") from exc
        settings = downloader.properties.content_settings
        return Blob(data=data, content_type=settings.content_type, metadata=dict(downloader.properties.metadata))

    def open_stream(
        self, container: str, name: str, *, chunk_size: int = STREAM_CHUNK_BYTES
    ) -> tuple[int, Iterator[bytes]]:
        """``(size, chunks)`` of a blob, to pass on without holding it whole in memory.

        One range read per ``chunk_size`` chunk, each conditional on the first one's ETag (a
        blob replaced mid-stream raises ``BlobChangedError`` rather than mixing versions). Not
        the SDK's ``download_blob().chunks()``: that fetches its first 32 MB
        (``max_single_get_size``) before yielding anything, 32 MB per download in progress in
        the web app (measured: 4 streams of a 100 MB blob, +123 MB)."""
        try:
            first = self.read_range(container, name, 0, chunk_size)
        except ValueError:  # a range of an empty blob is out of range
            return 0, iter(())

        def chunks() -> Iterator[bytes]:
            yield first.data
            for offset in range(len(first.data), first.size, chunk_size):
                yield self.read_range(container, name, offset, chunk_size, etag=first.etag).data

        return first.size, chunks()

    def download(self, container: str, name: str) -> bytes:
        return self.fetch(container, name).data

    def download_to_file(self, container: str, name: str, path: Path) -> int:
        """Stream a blob into the file ``path`` in the SDK's chunks; return its size.

        For blobs too big to hold (a rendered slice of a giant mosaic): memory stays at a
        few chunks whatever the size."""
        try:
            downloader = self._blob(container, name).download_blob(max_concurrency=2)
        except ResourceNotFoundError as exc:
            raise BlobMissingError(f"blob {self.container_name(container)}/{name} does not exist") from exc
        with open(path, "wb") as out:
            return int(downloader.readinto(out))

    def upload_file(self, container: str, name: str, path: Path, *, content_type: str) -> str:
        """Write a blob from a file, staged in blocks (never read whole into memory); its URL."""
        client = self._blob(container, name)
        try:
            with open(path, "rb") as data:
                client.upload_blob(
                    data,
                    length=path.stat().st_size,
                    overwrite=True,
                    content_settings=ContentSettings(content_type=content_type),
                    max_concurrency=2,
                )
        except ResourceNotFoundError as exc:
            raise BlobMissingError(
                f"container {self.container_name(container)!r} does not exist (ensure_containers creates it)"
            ) from exc
        return str(client.url)

    def open_writer(
        self,
        container: str,
        name: str,
        *,
        content_type: str,
        block_bytes: int = WRITER_BLOCK_BYTES,
        keep_existing: bool = False,
    ) -> BlobWriter:
        """A stream into one blob, uploaded while it is written (``dal.blobs.writer``): one Put
        Blob when it ends within ``block_bytes``, else blocks staged as they fill and one commit.
        Use it as a context manager (commit on a clean exit, nothing stored on an exception).
        ``keep_existing``: as for ``upload``, the store (Put Blob or commit) happens only if the
        blob does not exist yet (the writer's ``kept`` says so afterwards)."""
        return BlobWriter(
            self._blob(container, name),
            container=self.container_name(container),
            content_type=content_type,
            block_bytes=block_bytes,
            keep_existing=keep_existing,
        )

    def stage_block(self, container: str, name: str, block_id: str, data: bytes) -> None:
        """Stage one block of ``name`` (invisible until a commit names it; any process may commit
        blocks any other staged). Ids of one blob must all have the same length."""
        try:
            self._blob(container, name).stage_block(block_id, data, length=len(data), validate_content=True)
        except ResourceNotFoundError as exc:
            raise BlobMissingError(
                f"container {self.container_name(container)!r} does not exist (ensure_containers creates it)"
            ) from exc

    def commit_blocks(self, container: str, name: str, block_ids: list[str], *, content_type: str) -> str:
        """Make ``name`` the staged (or already committed) blocks ``block_ids``, in order; its URL.
        A block id that is neither is ``BlobMissingError``."""
        client = self._blob(container, name)
        try:
            client.commit_block_list(block_ids, content_settings=ContentSettings(content_type=content_type))
        except ResourceNotFoundError as exc:
            raise BlobMissingError(f"container {self.container_name(container)!r} does not exist") from exc
        except HttpResponseError as exc:
            if getattr(exc, "error_code", None) == "InvalidBlockList":
                raise BlobMissingError(f"{name}: a block to commit is missing (staged over a week ago?)") from exc
            raise
        return str(client.url)

    def read_range(self, container: str, name: str, offset: int, length: int, *, etag: str | None = None) -> Ranged:
        """``length`` bytes from ``offset`` (fewer at the end), with the blob's size and ETag.

        With ``etag``, the read succeeds only while the blob is that version: a blob
        replaced since raises ``BlobChangedError`` (the caller's cached offsets are stale)."""
        kwargs: dict[str, Any] = {}
        if etag is not None:
            kwargs.update(etag=etag, match_condition=MatchConditions.IfNotModified)
        try:
            downloader = self._blob(container, name).download_blob(offset=offset, length=length, **kwargs)
            data = downloader.readall()
        except ResourceNotFoundError as exc:
            raise BlobMissingError(f"blob {self.container_name(container)}/{name} does not exist") from exc
        except ResourceModifiedError as exc:
            raise BlobChangedError(f"blob {self.container_name(container)}/{name} was replaced") from exc
        except HttpResponseError as exc:
            if exc.status_code == 416:  # offset past the end
                raise ValueError(f"offset {offset} is past the end of {name}") from None
            raise
        # properties.size is the range's length; the blob's is after the "/" of Content-Range.
        content_range = downloader.properties.content_range
        size = int(content_range.rsplit("/", 1)[1]) if content_range else len(data)
        return Ranged(data=data, size=size, etag=str(downloader.properties.etag))

    def download_url(self, url: str) -> bytes:
        """Download by absolute URL; only blobs of this account (a SAS query is ignored)."""
        container, name = self.parse_blob_url(url)
        return self.download(container, name)

    def exists(self, container: str, name: str) -> bool:
        return bool(self._blob(container, name).exists())

    def delete(self, container: str, name: str) -> bool:
        """Delete one blob; False when it was already gone."""
        try:
            self._blob(container, name).delete_blob()
        except ResourceNotFoundError:
            return False
        return True

    def delete_prefix(self, container: str, prefix: str) -> int:
        """Delete every blob whose name starts with ``prefix``; return how many listed blobs are gone.

        A name answered 404 counts as gone: the SDK's retry policy resends a whole batch whose
        first answer was lost (a timeout under load), and the server had already deleted those
        blobs. Any other failed delete raises ``HttpResponseError`` naming the count, so the
        caller's message is redelivered instead of the blobs being silently left behind.
        """
        if not prefix:
            raise ValueError("delete_prefix needs a non-empty prefix (refusing to empty a container)")
        names = list(self.list_names(container, prefix))
        return _delete_in_batches(self._container(container), names, where=f"{container}/{prefix}")

    def list_names(self, container: str, prefix: str | None = None) -> Iterator[str]:
        """Every blob name (optionally under ``prefix``), following continuation tokens."""
        try:
            for props in self._container(container).list_blobs(name_starts_with=prefix):
                yield props.name
        except ResourceNotFoundError as exc:
            raise BlobMissingError(f"container {self.container_name(container)!r} does not exist") from exc

    def blob_url(self, container: str, name: str) -> str:
        return str(self._blob(container, name).url)

    def parse_blob_url(self, url: str) -> tuple[str, str]:
        """(container, name) of a blob URL of this account; ValueError for any other URL."""
        return split_blob_url(str(self._service.url), url)


def split_blob_url(service_url: str, url: str) -> tuple[str, str]:
    """(container, name) of a blob URL under the Blob service at ``service_url``; ValueError for any other URL."""
    base = urlsplit(service_url)
    parts = urlsplit(url)
    root = base.path.rstrip("/") + "/"
    if (parts.scheme, parts.netloc.lower()) != (base.scheme, base.netloc.lower()) or not parts.path.startswith(root):
        raise ValueError(f"not a blob URL of this storage account ({base.netloc}{base.path}): {url!r}")
    container, _, name = parts.path[len(root) :].partition("/")
    if not container or not name:
        raise ValueError(f"blob URL has no container or blob name: {url!r}")
    return validate_container_name(unquote(container)), _validate_blob_name(unquote(name))


def _delete_in_batches(client: Any, names: list[str], *, where: str) -> int:
    """Delete ``names`` from the container ``client``, 256 to a batch request; how many are gone
    (404 counts: see ``BlobStore.delete_prefix``), or ``HttpResponseError`` naming the failures."""
    gone, failed = 0, dict[int, int]()
    for start in range(0, len(names), _DELETE_BATCH):
        for response in client.delete_blobs(*names[start : start + _DELETE_BATCH], raise_on_any_failure=False):
            if response.status_code in _DELETED_OR_ABSENT:
                gone += 1
            else:
                failed[response.status_code] = failed.get(response.status_code, 0) + 1
    if failed:
        raise HttpResponseError(
            message=f"{sum(failed.values())} of {len(names)} deletes under {where} failed "
            f"(status codes {sorted(failed.items())}); deleted {gone}"
        )
    return gone
