"""Wake-up hints: "queue X just got work", sent beside a message, never instead of it.

- ``channel``: ``HintChannel`` on one machine (local datagrams) and ``channel_from_env``.
- ``pubsub``: the same across machines, through Redis or Valkey pub/sub.
- ``payload``: a hint's bytes (how many messages, which lane) and taken notices.
"""
