"""An indexer killed mid-batch loses nothing and indexes nothing twice (issue 41, "faults").

A real ``photomosaics indexer`` process on the session Azurite, with the pipeline tests' short
visibility timeout (6 s): batch A is indexed and published; batch B's photos are being made
into tiles when the process gets SIGKILL (no clean-up: its message stays on the queue, its
segment and manifest merge never happen). A new indexer gets B's message back after the
timeout and handles it whole: every photo of A and B is indexed once in the manifest, each in
its own batch's segment, the library holds each photo once, there is one segment per batch
(B's written under the same name it would have had), and the new process decodes only B.
"""

from __future__ import annotations

import io
import re
import uuid
from typing import Any

import numpy as np
from PIL import Image

from dal.blobs.indexed import SEGMENT_PREFIX
from dal.blobs.library_info import TILE_PREFIX
from dal.blobs.staging import STAGING_PREFIX
from dal.queues.messages import IndexRequestMessage
from tests.support.waiting import wait_for

A_PHOTOS = 3
B_PHOTOS = 32  # the most in one request; enough work that a kill lands in the middle


def _jpeg(seed: int, size: tuple[int, int] = (800, 600)) -> bytes:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, size=(9, 12, 3)).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(small).resize(size, Image.Resampling.BICUBIC).save(out, "JPEG", quality=90)
    return out.getvalue()


def _batch_lines(role: Any) -> list[dict[str, str]]:
    text = role.log_path.read_text(errors="replace")
    return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in text.splitlines() if "indexer.batch" in line]


def test_an_indexer_killed_mid_batch_loses_nothing_and_indexes_nothing_twice(pipe: Any) -> None:
    services = pipe.services
    library = f"kill-{uuid.uuid4().hex[:8]}"
    services.libraries.open_for_uploads(library, "killed indexer", owner="tests")
    container = services.libraries.container_client(library)
    names = [f"p{i:02d}.jpg" for i in range(A_PHOTOS + B_PHOTOS)]
    for i, name in enumerate(names):
        container.upload_blob(STAGING_PREFIX + name, _jpeg(i))
    queue = services.queues.index_request
    uri = services.libraries.uri(library)

    def send(photos: list[str]) -> IndexRequestMessage:
        message = IndexRequestMessage(
            queue_uri=queue.url, client_id="tests", request_id=str(uuid.uuid4()), library_uri=uri, photos=tuple(photos)
        )
        queue.submit(message)
        return message

    def indexed() -> set[str]:
        manifest, _ = services.libraries.indexed.read(library)
        return {n for n, p in manifest.photos.items() if p.state == "indexed"}

    first = pipe.start("indexer")
    a, b = names[:A_PHOTOS], names[A_PHOTOS:]
    send(a)
    wait_for(lambda: set(a) <= indexed(), seconds=90, step=0.05, what="batch A published", details=pipe.logs)

    batch_b = send(b)
    first_tile = container.get_blob_client(f"{TILE_PREFIX}{b[0]}.jpg")
    wait_for(first_tile.exists, seconds=90, step=0.01, what="B's first tile", details=pipe.logs)
    first.kill()
    assert not set(b) & indexed(), "the kill came after B was published: not mid-batch"
    assert not container.get_blob_client(f"{SEGMENT_PREFIX}{batch_b.request_id}.zip").exists()

    second = pipe.start("indexer")
    wait_for(
        lambda: set(b) <= indexed(),
        seconds=120,
        step=0.05,
        what="batch B published after the restart",
        details=pipe.logs,
    )

    manifest, _ = services.libraries.indexed.read(library)
    assert sorted(manifest.photos) == names and manifest.indexed() == names
    segments = sorted(blob.name for blob in container.list_blobs(name_starts_with=SEGMENT_PREFIX))
    assert len(segments) == 2 and f"{SEGMENT_PREFIX}{batch_b.request_id}.zip" in segments
    assert {manifest.photos[n].segment for n in b} == {f"{SEGMENT_PREFIX}{batch_b.request_id}.zip"}
    tiles = services.libraries.load(library)
    assert sorted(tiles.names) == names and len(set(tiles.names)) == len(names)
    assert tiles.version == manifest.version
    handled = _batch_lines(second)
    assert [(h["photos"], h["indexed"]) for h in handled] == [(str(B_PHOTOS), str(B_PHOTOS))], handled
