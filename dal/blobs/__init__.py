"""Blobs: the workflow containers, streamed uploads, tile libraries and Deep Zoom pyramids.

- ``store``: ``BlobStore``, the workflow containers and claim-check payloads.
- ``names``: every blob name a job uses.
- ``writer``: a block blob written while it is being made.
- ``rendered``: the stored format of rendered slices.
- ``pyramid``: a job's Deep Zoom zip read by range.
- ``libraries``: ``LibraryStore``, tile libraries, one container each, with their index.
- ``library_info``: what a library container's metadata says (``LibraryInfo``), the name rules.
- ``library_catalogue``: the libraries' records, read (cached briefly) and written.
- ``library_creation``: a library's tiles and index stored, then its mark.
- ``library_loading``: libraries loaded once per version (conditional GETs, pinned versions).
- ``library_names``: renaming, a library's name as a record pointing at its container.
- ``indexed``: libraries the indexer fills, as a manifest of segments.
- ``staging``: photos uploaded straight to a library with a write-only SAS (the valet key).
- ``cors``: the Blob service's CORS rule for browser uploads from the app's one origin.
"""
