"""The storage layer: typed queue messages, queues, blobs, tables and the embedded Azurite."""
