"""Operations on stored work: job cleanup, retention, poison queues, the syphon.

They work on the assembled ``dal.stores.Stores``, so they sit above every other room.

- ``cleanup``: delete a job's blobs and rows through the ``jobcleanup`` queue.
- ``retention``: the sweep of old jobs and orphaned blobs.
- ``poison``: operator actions on poison queues (list, requeue, purge).
- ``syphon``: moves what failed over to the secondary account back to the primary.
"""
