"""Blobs: the workflow containers, streamed uploads, tile libraries and Deep Zoom pyramids.

- ``store``: ``BlobStore``, the workflow containers and claim-check payloads.
- ``names``: every blob name a job uses.
- ``writer``: a block blob written while it is being made.
- ``rendered``: the stored format of rendered slices.
- ``pyramid``: a job's Deep Zoom zip read by range.
- ``libraries``: tile libraries, one container each, with their index.
- ``staging``: photos uploaded straight to a library with a write-only SAS (the valet key).
- ``cors``: the Blob service's CORS rule for browser uploads from the app's one origin.
"""
