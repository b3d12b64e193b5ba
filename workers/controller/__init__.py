"""The JobController role: a job cut into slices, sent, watched, and stitched exactly once.

- ``controller``: ``JobController``, the handlers of ``imagerequest`` and ``sliceresponse``.
- ``job_inputs``: the job's tile library (known to exist) and photo, read before slicing (``JobInputs``).
- ``recent_rows``: the job rows last written, the first guess of the next ETag write (``RecentRows``).
- ``dispatch``: a job's bands stored (or inlined) and one ``SliceRequestMessage`` sent per band.
- ``hedging``: hedged slices, a late slice sent again (``Hedger``); ``slice_clock``: when a slice is late.
- ``assembly``: the stitch under the stitch claim (``Stitcher``): one slice, giant pieces, or many slices.
"""
