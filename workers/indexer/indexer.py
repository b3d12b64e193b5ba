"""The indexer: makes tiles of the photos people uploaded straight to their library.

On ``indexrequest`` (``IndexRequestMessage``: a library and up to 32 of its staged photos), for
each photo: download the staged blob (one GET, which also tells its size; one over
``MAX_FILE_BYTES`` is refused without reading the rest), and make its tile
(``mosaic.photo_index.index_photo``: reduced decode, EXIF, HEIC, faces kept, perceptual hash)
or record why not. Then, in this order:

1. each indexed photo's display tile ``tiles/<name>.jpg`` (overwritten identically on a redelivery);
2. the batch's segment ``segments/<request_id>.zip`` (the tiles, lossless: what workers render with);
3. the outcomes merged into the library's manifest (``dal.blobs.indexed``: one conditional
   write), which is the new published version, and that version in the container's metadata.

At-least-once: the message is deleted only after the manifest is written; a killed indexer
leaves its message to come back, and the redelivered batch writes the same blobs and merges
the same outcomes (idempotent per photo). A photo that is no longer staged (deleted meanwhile)
is skipped with that reason, and a photo its owner removed meanwhile stays removed (its
tombstone wins). A photo whose decoding fails in a way no refusal names (a library's bug, not
the file's) is skipped with what happened and logged as an error: the same bytes would fail the
same way on every delivery, and the batch's other photos must not wait on it. A job renders
with the version it pinned (``dal.blobs.indexed``); later batches publish new versions without
changing the segments an earlier version names.
"""

from __future__ import annotations

import io
import logging
import time

import numpy as np
from PIL import Image

from dal.blobs.indexed import SEGMENT_PREFIX, PhotoOutcome
from dal.errors import LibraryNotFoundError
from dal.jobs.model import library_name
from dal.names import unprefixed
from dal.queues.consumable import ReceivedMessage
from dal.queues.messages import IndexRequestMessage
from mosaic.library import TileLibrary
from mosaic.photo_index import PhotoRefused, index_photo
from mosaic.sources import MAX_FILE_BYTES
from workers.runtime.bindings import consumes
from workers.runtime.logfmt import kv
from workers.services import RoleServices

__all__ = ["Indexer"]

log = logging.getLogger(__name__)


def _jpeg(tile: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(tile).save(out, format="JPEG", quality=90)
    return out.getvalue()


class Indexer:
    def __init__(self, services: RoleServices) -> None:
        self.services = services

    @consumes(lambda queues: queues.index_request, what=None)  # a library's work, not a job's
    def handle_index_request(self, received: ReceivedMessage) -> None:
        message = received.message
        assert isinstance(message, IndexRequestMessage), message
        libraries = self.services.libraries
        library = unprefixed(libraries.prefix, library_name(message.library_uri.rstrip("/")))
        if not libraries.in_account(message.library_uri):  # not ours to index, but said: not a deletion
            log.warning(kv("indexer.other_account", library_uri=message.library_uri, request=message.request_id))
            return
        try:
            known = libraries.uri(library) == message.library_uri and libraries.info(library) is not None
        except ValueError:  # not a library name
            known = False
        if not known:
            log.info(kv("indexer.library_gone", library=library, request=message.request_id))
            return  # deleted meanwhile (or another account's): nothing to index, the message is done
        staging = self.services.staging
        started = time.process_time()
        outcomes: list[PhotoOutcome] = []
        tiles: list[np.ndarray] = []
        names: list[str] = []
        segment = f"{SEGMENT_PREFIX}{message.request_id}.zip"
        for name in message.photos:
            staged = staging.read_staged(library, name, max_bytes=MAX_FILE_BYTES)
            if staged is None:
                outcomes.append(PhotoOutcome(name=name, state="skipped", size=0, reason="not uploaded (or deleted)"))
                continue
            size = staged.size
            if staged.data is None:
                reason = f"larger than {MAX_FILE_BYTES // 2**20} MiB"
                outcomes.append(PhotoOutcome(name=name, state="skipped", size=size, reason=reason))
                continue
            try:
                photo = index_photo(staged.data)
            except PhotoRefused as exc:
                outcomes.append(PhotoOutcome(name=name, state="skipped", size=size, reason=str(exc)[:300]))
                continue
            except MemoryError:
                raise  # the process's state, not the photo's: the batch comes back when memory may be free
            except Exception as exc:  # one photo's unforeseen failure is that photo's, not the batch's
                # A decoder failing in a way no refusal names yet (as a damaged AVIF once did) would fail
                # the batch, come back and be poisoned: the other photos never indexed. The same bytes
                # fail the same way every time, so the photo is skipped with what happened, loudly.
                log.exception(kv("indexer.photo_failed", library=library, photo=name, request=message.request_id))
                reason = f"could not be indexed ({type(exc).__name__}: {exc})"[:300]
                outcomes.append(PhotoOutcome(name=name, state="skipped", size=size, reason=reason))
                continue
            finally:
                staged = None  # its bytes not held while the next photo is read
            staging.put_tile(library, name, _jpeg(photo.tile))
            tiles.append(photo.tile)
            names.append(name)
            outcomes.append(PhotoOutcome(name=name, state="indexed", size=size, hash=photo.hash, segment=segment))
        if tiles:
            libraries.indexed.write_segment(library, message.request_id, TileLibrary.from_tiles(np.stack(tiles), names))
        try:
            manifest = libraries.indexed.record(library, outcomes)
            libraries.publish(library, manifest)
        except LibraryNotFoundError:
            log.info(kv("indexer.library_gone", library=library, request=message.request_id))
            return
        log.info(
            kv(
                "indexer.batch",
                library=library,
                photos=len(message.photos),
                indexed=len(tiles),
                skipped=len(outcomes) - len(tiles),
                version=manifest.version,
                cpu_ms_per_photo=round((time.process_time() - started) * 1000 / max(1, len(message.photos)), 1),
            )
        )
