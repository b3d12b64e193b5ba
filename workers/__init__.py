"""The worker roles and the queue runtime they run on, one room per concern.

- ``runtime``: the queue runtime every role runs on (listener, leases, elastic pool, backoff,
  settling, hint credit, handler errors, logging, metrics, the role process). It knows no role.
- ``controller``: the JobController (``controller``), its slice dispatch (``dispatch``), hedged
  slices (``hedging``, ``slice_clock``) and the stitch (``assembly``).
- ``processor``: the ImageProcessor (``processor``).
- ``responder``: the responder (``responder``) and the ``jobcleanup`` handler (``cleaner``).
- ``indexer``: the indexer role (tile libraries at a person's scale).
- ``imaging``: the pixels the roles hand each other: band PNGs (``slicing``), the final JPEG and
  pyramid (``stitching``), JPEG band segments (``jpeg_segments``), a giant band's pieces
  (``band_pieces``).
- ``services``, ``failures``, ``stages``, ``job_options``, ``demo_library``: what the roles share:
  ``RoleServices``, the one place a job fails (``poison_hook``), ``Stopwatch``, a job's engine
  options, and the demo tile library.

A role's handler says which queue it consumes where it is defined
(``@consumes(lambda queues: queues.slice_requests, what="rendering a slice")``,
``workers.runtime.bindings``); ``photomosaics/commands/roles.py`` starts one listener per bound
handler (``bindings_of(handler_object)``). A new role (the indexer) is a room with its handler
class, its ``@consumes`` methods and a command in ``roles.py``; it may import ``runtime``,
``imaging`` and the shared modules above, never another role's room. The rooms' allowed import
directions are declared in ``tests/test_layers.py`` (``WORKER_ROOMS``).
"""
