"""``QueueAccessor``: the work queues of the workflow, by name and by a message's ``queue_uri``,
with ``slicerequest`` split into lanes and shards and ``imagerequest`` into lanes as the settings
ask (``dal.queues.lanes``, ``dal.queues.shards``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from dal.config import (
    IMAGE_REQUEST_QUEUE,
    IMAGE_RESPONSE_QUEUE,
    INDEX_REQUEST_QUEUE,
    JOB_CLEANUP_QUEUE,
    SLICE_REQUEST_QUEUE,
    SLICE_RESPONSE_QUEUE,
    Settings,
    StorageClients,
)
from dal.errors import QueueMessageFormatException
from dal.queues.consumable import Consumable
from dal.queues.lanes import MAX_LANES, PriorityLanes
from dal.queues.messages import QueueMessage
from dal.queues.shards import MAX_SHARDS, ShardedQueue, shard_index
from dal.queues.work_queue import ImageProcessingQueue


class QueueAccessor:
    """The four work queues of the workflow, by name and by a message's ``queue_uri``."""

    def __init__(self, storage: StorageClients, *, settings: Settings | None = None, prefix: str = "") -> None:
        self.storage = storage
        self.prefix = prefix

        def make(name: str) -> ImageProcessingQueue:
            return ImageProcessingQueue(storage, name, settings=settings, prefix=prefix)

        self.image_request = make(IMAGE_REQUEST_QUEUE)
        self.slice_request = make(SLICE_REQUEST_QUEUE)
        self.slice_response = make(SLICE_RESPONSE_QUEUE)
        self.image_response = make(IMAGE_RESPONSE_QUEUE)
        self.job_cleanup = make(JOB_CLEANUP_QUEUE)
        self.index_request = make(INDEX_REQUEST_QUEUE)  # photos uploaded into a library: the indexer
        shards = (settings or Settings()).slice_shards
        if type(shards) is not int or not 1 <= shards <= MAX_SHARDS:
            raise ValueError(f"slice_shards must be 1..{MAX_SHARDS}, got {shards!r}")
        lanes = (settings or Settings()).fair_lanes
        if type(lanes) is not int or not 1 <= lanes <= MAX_LANES:
            raise ValueError(f"fair_lanes must be 1..{MAX_LANES}, got {lanes!r}")
        # slice_lanes[lane][shard]: lane 0 shard 0 is slicerequest itself (dal.queues.lanes, dal.queues.shards).
        self.slice_lanes = [
            [
                self.slice_request
                if (lane, i) == (0, 0)
                else ImageProcessingQueue(
                    storage, SLICE_REQUEST_QUEUE, settings=settings, prefix=prefix, shard=i, lane=lane
                )
                for i in range(shards)
            ]
            for lane in range(lanes)
        ]
        self.slice_request_shards = self.slice_lanes[0]
        # imagerequest has lanes too (no shards): the web app sends a client's later jobs lower, so
        # the controller slices a newcomer's job before another client's backlog.
        self.image_request_lanes = [self.image_request] + [
            ImageProcessingQueue(storage, IMAGE_REQUEST_QUEUE, settings=settings, prefix=prefix, lane=lane)
            for lane in range(1, lanes)
        ]
        self.image_requests: Consumable = PriorityLanes(self.image_request_lanes) if lanes > 1 else self.image_request
        # What processors consume: the lanes highest first, each lane's shards rotated fairly
        # (the plain queue with one lane and one shard).
        by_lane = [ShardedQueue(lane) if shards > 1 else lane[0] for lane in self.slice_lanes]
        self.slice_requests: Consumable = PriorityLanes(by_lane) if lanes > 1 else by_lane[0]

    def slice_request_shard(self, request_id: str, sequence: int, lane: int = 0) -> ImageProcessingQueue:
        """The queue a slice goes to: its lane, and in it a job's slices are dealt round-robin over the shards."""
        shards = self.slice_lanes[lane]
        return shards[shard_index(request_id, sequence, len(shards))]

    def slice_request_queues(self) -> list[ImageProcessingQueue]:
        """Every lane's every shard of slicerequest."""
        return [queue for lane in self.slice_lanes for queue in lane]

    def workflow(self) -> list[ImageProcessingQueue]:
        """The four queues of the mosaic workflow."""
        return [self.image_request, self.slice_request, self.slice_response, self.image_response]

    def monitored(self) -> list[ImageProcessingQueue]:
        """Every queue an operator watches: the workflow's four, the other lanes and shards, ``jobcleanup``,
        ``indexrequest``."""
        return [
            *self.workflow(),
            *self.slice_request_queues()[1:],
            *self.image_request_lanes[1:],
            self.job_cleanup,
            self.index_request,
        ]

    def by_name(self, name: str) -> ImageProcessingQueue:
        """A queue by its short (``imagerequest``, ``slicerequest-1``) or full (prefixed) name."""
        for queue in self.monitored():
            if name in (queue.short_name, queue.name):
                return queue
        raise KeyError(f"no work queue named {name!r}")

    def for_message(self, message: QueueMessage) -> ImageProcessingQueue:
        """The queue a message is addressed to by its ``queue_uri``; it must match the type."""
        path = urlsplit(message.queue_uri).path.rstrip("/")
        name = path.rsplit("/", 1)[-1]
        matches = [q for q in self.monitored() if q.name == name]
        if not matches:
            raise QueueMessageFormatException(
                f"queue_uri {message.queue_uri!r} names none of the queues {[q.name for q in self.workflow()]}"
            )
        queue = matches[0]
        if queue.logical_name != message.QUEUE:
            raise QueueMessageFormatException(f"a {message.TYPE} message does not belong in queue {queue.name!r}")
        return queue

    def ensure_all(self) -> None:
        for queue in self.monitored():
            queue.ensure_exists()
