"""BlobStore against a real Azurite: content types, listing past one page, streamed writes, libraries."""

from __future__ import annotations

import math
import threading
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from azure.core.exceptions import HttpResponseError

from dal.blobs.listing import names_and_sizes
from dal.blobs.store import BlobStore
from dal.config import IMAGE_INPUT_CONTAINER, IMAGE_OUTPUT_CONTAINER, StorageClients
from dal.errors import BlobChangedError, BlobMissingError
from dal.observability.transactions import TransactionCounter


@pytest.fixture
def blobs(storage: StorageClients, unique: str) -> BlobStore:
    store = BlobStore(storage, prefix=f"t{unique}")
    store.ensure_containers()
    return store


def test_prefix_applies_to_workflow_containers_only(blobs: BlobStore, unique: str) -> None:
    assert blobs.container_name("imageinput") == f"t{unique}imageinput"
    assert blobs.container_name(blobs.container_name("imageinput")) == f"t{unique}imageinput"
    assert blobs.container_name("flowers") == "flowers"
    with pytest.raises(ValueError, match="container name"):
        blobs.container_name("Bad_Name")


def test_upload_download_keeps_content_type(blobs: BlobStore) -> None:
    url = blobs.upload(IMAGE_INPUT_CONTAINER, "req/1.png", b"\x89PNG...", content_type="image/png", metadata={"k": "v"})
    assert url == blobs.blob_url(IMAGE_INPUT_CONTAINER, "req/1.png")
    blob = blobs.fetch(IMAGE_INPUT_CONTAINER, "req/1.png")
    assert (blob.data, blob.content_type, blob.metadata) == (b"\x89PNG...", "image/png", {"k": "v"})
    assert blobs.download_url(url) == b"\x89PNG..."
    assert blobs.parse_blob_url(url) == (blobs.container_name(IMAGE_INPUT_CONTAINER), "req/1.png")
    # Overwrite is allowed: a redelivered message rewrites the same blob.
    blobs.upload(IMAGE_INPUT_CONTAINER, "req/1.png", b"again", content_type="image/jpeg")
    assert blobs.fetch(IMAGE_INPUT_CONTAINER, "req/1.png").content_type == "image/jpeg"
    assert blobs.exists(IMAGE_INPUT_CONTAINER, "req/1.png")
    assert blobs.delete(IMAGE_INPUT_CONTAINER, "req/1.png") is True
    assert blobs.delete(IMAGE_INPUT_CONTAINER, "req/1.png") is False
    assert not blobs.exists(IMAGE_INPUT_CONTAINER, "req/1.png")


def test_a_stream_is_range_reads_of_one_version(blobs: BlobStore) -> None:
    blobs.upload(IMAGE_OUTPUT_CONTAINER, "s.bin", b"abcdefghij", content_type="application/octet-stream")
    size, chunks = blobs.open_stream(IMAGE_OUTPUT_CONTAINER, "s.bin", chunk_size=3)
    assert (size, list(chunks)) == (10, [b"abc", b"def", b"ghi", b"j"])
    blobs.upload(IMAGE_OUTPUT_CONTAINER, "empty.bin", b"", content_type="application/octet-stream")
    size, chunks = blobs.open_stream(IMAGE_OUTPUT_CONTAINER, "empty.bin")
    assert (size, b"".join(chunks)) == (0, b"")
    # Replaced mid-stream: an error, never a mix of the two versions.
    size, chunks = blobs.open_stream(IMAGE_OUTPUT_CONTAINER, "s.bin", chunk_size=3)
    assert next(chunks) == b"abc"
    blobs.upload(IMAGE_OUTPUT_CONTAINER, "s.bin", b"XXXXXXXXXX", content_type="application/octet-stream")
    with pytest.raises(BlobChangedError):
        list(chunks)
    with pytest.raises(BlobMissingError):
        blobs.open_stream(IMAGE_OUTPUT_CONTAINER, "nope.bin")


def test_missing_blob_and_container_are_clear(blobs: BlobStore, unique: str) -> None:
    with pytest.raises(BlobMissingError, match="does not exist"):
        blobs.download(IMAGE_OUTPUT_CONTAINER, "nope.png")
    with pytest.raises(BlobMissingError, match="container"):
        blobs.upload(f"missing{unique}", "x", b"", content_type="text/plain")
    with pytest.raises(ValueError, match="not a blob URL of this storage account"):
        blobs.parse_blob_url("https://example.com/devstoreaccount1/imageinput/x.png")


# The Blob service hands back at most 5,000 names a page; asking for pages of 100 (the
# ``maxresults`` a client may set) makes 301 blobs take four pages, the same continuation
# markers 5,001 would need, with 301 uploads instead of 5,001.
PAGE = 100
BLOBS = 3 * PAGE + 1


def _small_pages(request: Any) -> None:
    if "comp=list" in request.http_request.url and "maxresults=" not in request.http_request.url:
        request.http_request.url += f"&maxresults={PAGE}"


def test_listing_follows_continuation_markers(storage: StorageClients, unique: str) -> None:
    list_calls: list[Any] = []

    def hook(response: Any) -> None:
        if "comp=list" in response.http_request.url:
            list_calls.append(response)

    counted = StorageClients(storage.connection_string, profile="probe", response_hook=hook, request_hook=_small_pages)
    blobs = BlobStore(counted, prefix=f"t{unique}")
    blobs.ensure_containers()
    names = {f"many/{i:05d}": b"x" * (i % 7) for i in range(BLOBS)}
    try:
        upload_many(blobs, IMAGE_OUTPUT_CONTAINER, names, content_type="application/octet-stream", workers=16)
        blobs.upload(IMAGE_OUTPUT_CONTAINER, "other/x", b"", content_type="text/plain")
        list_calls.clear()
        listed = list(blobs.list_names(IMAGE_OUTPUT_CONTAINER, "many/"))
        assert len(listed) == BLOBS and set(listed) == set(names)
        assert len(list_calls) == 4  # each full page ended in a continuation marker, and it was followed
        # The cheap listing of names and sizes (dal.blobs.listing) follows it too.
        container = counted.blob_service.get_container_client(blobs.container_name(IMAGE_OUTPUT_CONTAINER))
        list_calls.clear()
        assert dict(names_and_sizes(container, "many/")) == {n: len(d) for n, d in names.items()}
        assert len(list_calls) == 4
        # An SDK whose name pages no longer keep their answer: the public, slower listing, the same result.
        bare = _NamesOnly(container)
        assert dict(names_and_sizes(bare, "other/")) == {"other/x": 0}
        for prefix in ("many/001", "many/003"):  # 100 blobs and 1: the fallback need not list them all slowly
            expected = {n: len(d) for n, d in names.items() if n.startswith(prefix)}
            assert dict(names_and_sizes(bare, prefix)) == expected and expected
        assert bare.pages == 3  # each listing's first page showed no answer to read sizes from
    finally:  # one call, where deleting every blob would take many
        counted.blob_service.delete_container(blobs.container_name(IMAGE_OUTPUT_CONTAINER))


class _NamesOnly:
    """A container client whose ``list_blob_names`` pages keep no answer (as a later SDK might)."""

    def __init__(self, container: Any) -> None:
        self.container, self.pages = container, 0

    def list_blob_names(self, **kwargs: Any) -> Any:
        outer = self

        class Pages:
            def by_page(self) -> Iterator[list[str]]:
                for page in outer.container.list_blob_names(**kwargs).by_page():
                    outer.pages += 1
                    yield list(page)

        return Pages()

    def list_blobs(self, **kwargs: Any) -> Any:
        return self.container.list_blobs(**kwargs)


def upload_many(
    store: BlobStore, container: str, items: dict[str, bytes], *, content_type: str, workers: int = 8
) -> None:
    """Upload many small blobs concurrently (per-request latency dominates): set-up for listing tests."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda kv: store.upload(container, kv[0], kv[1], content_type=content_type), items.items()))


def test_delete_prefix_spans_batches(blobs: BlobStore) -> None:
    upload_many(blobs, IMAGE_OUTPUT_CONTAINER, {f"req/{i:03d}.png": b"" for i in range(300)}, content_type="image/png")
    blobs.upload(IMAGE_OUTPUT_CONTAINER, "req-other.png", b"", content_type="image/png")
    assert blobs.delete_prefix(IMAGE_OUTPUT_CONTAINER, "req/") == 300
    assert list(blobs.list_names(IMAGE_OUTPUT_CONTAINER)) == ["req-other.png"]
    assert blobs.delete_prefix(IMAGE_OUTPUT_CONTAINER, "req/") == 0
    with pytest.raises(ValueError, match="non-empty prefix"):
        blobs.delete_prefix(IMAGE_OUTPUT_CONTAINER, "")


def test_delete_prefix_counts_a_blob_already_gone_and_raises_for_one_it_could_not_delete(
    blobs: BlobStore, storage: StorageClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Gone between the listing and the batch (another cleanup, or the SDK resending a batch
    # whose first answer was lost): the blob is gone, as asked, and nothing is raised.
    for name in ("req/a.png", "req/b.png", "req/c.png"):
        blobs.upload(IMAGE_OUTPUT_CONTAINER, name, b"", content_type="image/png")
    container = storage.blob_service.get_container_client(blobs.container_name(IMAGE_OUTPUT_CONTAINER))
    listed = BlobStore.list_names

    def list_then_delete_one(self: BlobStore, *args: Any, **kwargs: Any) -> Any:
        names = list(listed(self, *args, **kwargs))
        container.delete_blob("req/b.png")
        return iter(names)

    monkeypatch.setattr(BlobStore, "list_names", list_then_delete_one)
    assert blobs.delete_prefix(IMAGE_OUTPUT_CONTAINER, "req/") == 3
    monkeypatch.undo()
    assert list(blobs.list_names(IMAGE_OUTPUT_CONTAINER, "req/")) == []

    # A delete the server refuses (a leased blob) is not silently left behind: the caller hears it.
    for name in ("req/a.png", "req/b.png", "req/c.png"):
        blobs.upload(IMAGE_OUTPUT_CONTAINER, name, b"", content_type="image/png")
    lease = container.get_blob_client("req/b.png").acquire_lease(lease_duration=-1)
    with pytest.raises(HttpResponseError, match=r"1 of 3 deletes .* failed .* deleted 2"):
        blobs.delete_prefix(IMAGE_OUTPUT_CONTAINER, "req/")
    assert list(blobs.list_names(IMAGE_OUTPUT_CONTAINER, "req/")) == ["req/b.png"]
    lease.release()
    assert blobs.delete_prefix(IMAGE_OUTPUT_CONTAINER, "req/") == 1


# --- open_writer: a blob uploaded while it is being made (dal.blobs.writer) ---------------------


def _counted_store(storage: StorageClients, unique: str) -> tuple[BlobStore, TransactionCounter]:
    counter = TransactionCounter()
    store = BlobStore(
        StorageClients(storage.connection_string, profile="probe", response_hook=counter), prefix=f"t{unique}"
    )
    store.ensure_containers()
    counter.reset()
    return store, counter


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "blob-writer"]


def _pieces(data: bytes, seed: int) -> list[bytes]:
    """``data`` in the uneven pieces a producer writes (1..700 bytes)."""
    sizes = np.random.default_rng(seed).integers(1, 700, len(data))
    cuts = np.cumsum(sizes)
    cuts = [0, *cuts[cuts < len(data)].tolist(), len(data)]
    return [data[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]


def test_a_stream_past_its_first_block_is_staged_block_by_block_and_committed_once(
    storage: StorageClients, unique: str
) -> None:
    blobs, counter = _counted_store(storage, unique)
    data = np.random.default_rng(7).bytes(5_500)
    with blobs.open_writer(
        IMAGE_OUTPUT_CONTAINER, "big.zip", content_type="application/zip", block_bytes=1_000
    ) as writer:
        for piece in _pieces(data, seed=1):
            assert writer.write(piece) == len(piece)
    assert writer.staged_blocks == 6  # five full blocks and the last 500 bytes
    assert counter.counts() == {"blob PutBlock": 6, "blob PutBlockList": 1}
    stored = blobs.fetch(IMAGE_OUTPUT_CONTAINER, "big.zip")
    assert (stored.data, stored.content_type) == (data, "application/zip")
    assert writer.url == blobs.blob_url(IMAGE_OUTPUT_CONTAINER, "big.zip")
    assert _writer_threads() == []


def test_a_stream_holds_a_few_blocks_never_the_whole_blob(blobs: BlobStore) -> None:
    # The producer writes as fast as it can: the upload falls behind, and write() waits for a slot.
    block, total = 256 * 1024, 12 * 1024 * 1024
    piece = np.random.default_rng(3).bytes(10_000)
    tracemalloc.start()
    try:
        with blobs.open_writer(
            IMAGE_OUTPUT_CONTAINER, "long.zip", content_type="application/zip", block_bytes=block
        ) as writer:
            for _ in range(total // len(piece)):
                writer.write(piece)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert writer.staged_blocks == math.ceil(total // len(piece) * len(piece) / block)
    assert peak < total / 3, f"peak {peak / 2**20:.1f} MiB of Python memory for a {total / 2**20:.0f} MiB stream"
    assert blobs.delete(IMAGE_OUTPUT_CONTAINER, "long.zip")


@pytest.mark.parametrize("size", [0, 999, 1_000])
def test_a_stream_within_its_first_block_is_one_put_blob(storage: StorageClients, unique: str, size: int) -> None:
    blobs, counter = _counted_store(storage, unique)
    data = np.random.default_rng(size).bytes(size)
    with blobs.open_writer(
        IMAGE_OUTPUT_CONTAINER, "small.zip", content_type="application/zip", block_bytes=1_000
    ) as writer:
        for piece in _pieces(data, seed=2):
            writer.write(piece)
    assert counter.counts() == {"blob PutBlob": 1}  # as BlobStore.upload: what a small job's pyramid costs
    assert blobs.download(IMAGE_OUTPUT_CONTAINER, "small.zip") == data
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"x")


def test_a_failed_stage_is_raised_by_the_next_write_and_leaves_the_old_blob(
    blobs: BlobStore, storage: StorageClients
) -> None:
    # A real fault: someone else holds a lease on the blob, so Azure refuses Put Block (412).
    blobs.upload(IMAGE_OUTPUT_CONTAINER, "leased.zip", b"old", content_type="text/plain")
    container = storage.blob_service.get_container_client(blobs.container_name(IMAGE_OUTPUT_CONTAINER))
    lease = container.get_blob_client("leased.zip").acquire_lease(lease_duration=-1)
    written = 0
    try:
        with (
            pytest.raises(HttpResponseError) as raised,
            blobs.open_writer(
                IMAGE_OUTPUT_CONTAINER, "leased.zip", content_type="application/zip", block_bytes=1_000
            ) as writer,
        ):
            for _ in range(10_000):  # 3 MB, were the failure never noticed
                writer.write(b"x" * 300)
                written += 300
                time.sleep(0.001)  # a producer's pace: the stage's answer arrives meanwhile
        assert raised.value.status_code == 412
        assert written < 1_000_000, f"{written} bytes written after the first block had failed"
        assert writer.staged_blocks == 0
        assert _writer_threads() == []
        # The small path (one Put Blob at close) fails the same way.
        with (
            pytest.raises(HttpResponseError),
            blobs.open_writer(IMAGE_OUTPUT_CONTAINER, "leased.zip", content_type="application/zip") as writer,
        ):
            writer.write(b"new")
    finally:
        lease.release()
    assert blobs.fetch(IMAGE_OUTPUT_CONTAINER, "leased.zip").data == b"old"  # nothing half-written under the name


def test_a_stream_whose_container_is_deleted_midway_raises_blob_missing_and_stores_nothing(
    storage: StorageClients, unique: str
) -> None:
    blobs = BlobStore(storage)
    container = f"w{unique}"
    storage.blob_service.create_container(container)
    with (
        pytest.raises(BlobMissingError, match="does not exist"),
        blobs.open_writer(container, "gone.zip", content_type="application/zip", block_bytes=1_000) as writer,
    ):
        writer.write(b"x" * 2_500)  # two blocks staged (or on their way)
        storage.blob_service.delete_container(container)
        for _ in range(1_000):
            writer.write(b"x" * 300)
            time.sleep(0.001)
    assert _writer_threads() == []
    storage.blob_service.create_container(container)
    try:
        assert not blobs.exists(container, "gone.zip")
    finally:
        storage.blob_service.delete_container(container)


@pytest.mark.parametrize("size", [500, 2_500])  # one Put Blob; blocks and a commit
def test_a_final_output_is_written_once_and_a_late_duplicate_leaves_it_alone(
    storage: StorageClients, unique: str, size: int
) -> None:
    """``keep_existing``: the first write stores the blob; a later one (a hedged slice's slow first
    holder) stores nothing, in the same one request, and a reader's stream of it goes on."""
    blobs, counter = _counted_store(storage, unique)
    first, late = np.random.default_rng(1).bytes(size), np.random.default_rng(2).bytes(size)
    with blobs.open_writer(
        IMAGE_OUTPUT_CONTAINER, "out.zip", content_type="application/zip", block_bytes=1_000, keep_existing=True
    ) as writer:
        writer.write(first)
    assert not writer.kept
    _, chunks = blobs.open_stream(IMAGE_OUTPUT_CONTAINER, "out.zip", chunk_size=100)
    assert next(chunks) == first[:100]  # a download in progress
    counter.reset()
    with blobs.open_writer(
        IMAGE_OUTPUT_CONTAINER, "out.zip", content_type="application/zip", block_bytes=1_000, keep_existing=True
    ) as writer:
        writer.write(late)
    assert writer.kept
    stores = counter.counts().get("blob PutBlob", 0) + counter.counts().get("blob PutBlockList", 0)
    assert stores == 1  # the one conditional store, refused
    url = blobs.upload(IMAGE_OUTPUT_CONTAINER, "out.zip", late, content_type="application/zip", keep_existing=True)
    assert url == blobs.blob_url(IMAGE_OUTPUT_CONTAINER, "out.zip")
    assert first[:100] + b"".join(chunks) == first  # never replaced under the reader
    assert blobs.download(IMAGE_OUTPUT_CONTAINER, "out.zip") == first
    assert blobs.upload(IMAGE_OUTPUT_CONTAINER, "new.jpg", late, content_type="image/jpeg", keep_existing=True)
    assert blobs.download(IMAGE_OUTPUT_CONTAINER, "new.jpg") == late  # absent: written as usual
