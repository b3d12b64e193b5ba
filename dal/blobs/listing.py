"""Names and sizes of many blobs, read the cheap way.

The SDK's ``list_blobs`` builds a full model of every blob from the XML answer: about 0.5 ms
of CPU per blob on this project's machines, so a library's progress poll at 1,000 photos cost
the web process 0.5 s (and 2.7 s at 5,000). ``list_blob_names`` reads the same answer with
ElementTree (about 0.05 ms a blob) but keeps only the names; its page iterator keeps the
answer, so ``names_and_sizes`` reads each blob's ``Content-Length`` beside its name from there.
An SDK that stops keeping the answer (``_response`` is not public) gets ``list_blobs`` instead:
slower, never wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["names_and_sizes"]


def names_and_sizes(container: Any, prefix: str) -> Iterator[tuple[str, int]]:
    """``(name, size)`` of every blob under ``prefix`` of ``container`` (a ``ContainerClient``),
    by name, following continuation markers."""
    pages = container.list_blob_names(name_starts_with=prefix).by_page()
    for page in pages:
        names = list(page)
        answer = getattr(pages, "_response", None)
        blobs = answer.find("Blobs") if answer is not None and hasattr(answer, "find") else None
        found = [] if blobs is None else blobs.findall("Blob")
        if len(found) != len(names):  # not the answer this page was read from: the slow, public way
            yield from ((p.name, int(p.size or 0)) for p in container.list_blobs(name_starts_with=prefix))
            return
        for blob, name in zip(found, names, strict=True):
            yield name, int(blob.findtext("Properties/Content-Length") or 0)
