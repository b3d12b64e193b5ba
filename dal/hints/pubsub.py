"""Work-detected hints across machines: Redis (or Valkey) pub/sub behind ``dal.hints.channel``' interface.

``PHOTOMOSAICS_HINTS_URL=redis://host:6379/0`` (``rediss://`` for TLS, ``unix:///path``) turns
it on; every process that sends or listens must have it. A hint for queue ``q`` is one
``PUBLISH photomosaics-hints:<account>:q w<count>`` (``dal.hints.payload``); a listener holds
one ``SUBSCRIBE`` connection per queue and turns each message into ``on_hint(count, lane)``. The
account name keeps two deployments that share one server (staging and production) from
waking each other.

Why Redis pub/sub: it is the pub/sub service people already run (or get managed: Azure Cache
for Redis, Valkey, ElastiCache), fire-and-forget like the hint itself (no store, no ack, a
subscriber that is away misses what was said meanwhile, which is fine for a hint), and it
needs one small client (``redis`` from PyPI). The work stays in Azure Storage queues.

The server is never trusted for the work, and not even for latency:

- **Publishing never waits long and never raises**: 1 s connect/read timeouts, no retries, and
  after a failure no attempt for ``PAUSE_AFTER_FAILURE`` seconds, so a dead server costs a send
  one refused connection at most every 5 s, not a stall per message.
- **A subscription knows when it is deaf**: on a lost connection it flags itself unhealthy (the
  listener then polls with its short cap, ``poll_max``, instead of the hinted 60 s) and calls
  ``on_hint(None, None)`` once, so the listener polls at once rather than sleeping out a long wait
  that no hint will now shorten. It reconnects with back-off (0.5 s doubling to 10 s), and
  on success calls ``on_hint(None, None)`` again: hints sent while it was away are covered by that poll.
  Nothing is lost either way; the messages were in the queue all along.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from dal.hints.payload import OnHint, OnTaken, hint_count, hint_lane, hint_payload, hint_taken

__all__ = ["CHANNEL_PREFIX", "PAUSE_AFTER_FAILURE", "RedisHintChannel", "RedisSubscription"]

log = logging.getLogger(__name__)

CHANNEL_PREFIX = "photomosaics-hints"
PAUSE_AFTER_FAILURE = 5.0  # seconds a publisher skips the server after it failed once
_TIMEOUT = 1.0  # connect and read timeout of every call to the server
_RECONNECT_MIN, _RECONNECT_MAX = 0.5, 10.0


def _client(url: str) -> Any:
    """A client that fails fast: short timeouts, no retries (the caller decides what next)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(
        url,
        socket_connect_timeout=_TIMEOUT,
        socket_timeout=_TIMEOUT,
        socket_keepalive=True,
        retry=Retry(NoBackoff(), 0),
        # A subscriber's connection is silent while idle: ping it now and then, so a server
        # that vanished without closing the socket is noticed within about a minute.
        health_check_interval=30,
    )


def _connection_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.ConnectionError, redis.TimeoutError, OSError)


class RedisSubscription:
    """One ``SUBSCRIBE`` connection and the thread that turns its messages into ``on_hint(count)``."""

    def __init__(self, url: str, channel: str, on_hint: OnHint, on_taken: OnTaken | None = None) -> None:
        self.channel = channel
        self.received = 0
        self.reconnects = 0
        self._url = url
        self._on_hint = on_hint
        self._on_taken = on_taken
        self._closed = threading.Event()
        self._subscribed = threading.Event()  # healthy: subscribed now
        self._tried = threading.Event()  # the first attempt to subscribe is over, either way
        self._thread = threading.Thread(target=self._loop, name=f"hints-{channel}", daemon=True)
        self._thread.start()
        self._tried.wait(_TIMEOUT * 3)  # a reachable server: start out subscribed

    @property
    def healthy(self) -> bool:
        """True while subscribed: hints from any machine reach us."""
        return self._subscribed.is_set()

    def _hint(self, count: int | None = None, lane: int | None = None) -> None:
        try:
            self._on_hint(count, lane)
        except Exception:
            log.exception("hint handler failed")

    def _taken(self, count: int, sender: str) -> None:
        if self._on_taken is None:
            return
        try:
            self._on_taken(count, sender)
        except Exception:
            log.exception("taken-notice handler failed")

    def _loop(self) -> None:
        errors = _connection_errors()
        wait = _RECONNECT_MIN
        ever_subscribed = warned = False
        while not self._closed.is_set():
            client = pubsub = None
            try:
                client = _client(self._url)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self.channel)
                while not self._closed.is_set():
                    # subscribe() sent SUBSCRIBE on an open connection: from here the server delivers.
                    message = pubsub.get_message(timeout=0.5)
                    if not self._subscribed.is_set() and pubsub.subscribed:
                        self._subscribed.set()
                        wait, warned = _RECONNECT_MIN, False
                        if ever_subscribed:  # back after an outage: poll for what we missed
                            self.reconnects += 1
                            log.info("hint server %s reachable again", self.channel)
                            self._hint()
                        ever_subscribed = True
                        self._tried.set()
                    if message is not None and message.get("type") == "message":
                        data = message.get("data")
                        if (taken := hint_taken(data)) is not None:
                            self._taken(*taken)
                            continue
                        self.received += 1
                        self._hint(hint_count(data), hint_lane(data))
            except errors as exc:
                if self._closed.is_set():
                    break
                if self._subscribed.is_set() or not warned:
                    warned = True
                    log.warning(
                        "hint server unreachable (%s: %s); polling with the short cap until it is back",
                        type(exc).__name__,
                        exc,
                    )
                self._tried.set()
                if self._subscribed.is_set():
                    self._subscribed.clear()
                    self._hint()  # deaf now: poll at once instead of sleeping out a long wait
                self._closed.wait(wait)
                wait = min(wait * 2, _RECONNECT_MAX)
            finally:
                for part in (pubsub, client):
                    if part is not None:
                        try:
                            part.close()
                        except Exception:
                            pass

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=3)
        self._subscribed.clear()


class RedisHintChannel:
    """Hints through a Redis/Valkey server, for listeners on any machine."""

    def __init__(self, url: str, *, namespace: str = "") -> None:
        self.url = url
        self.prefix = f"{CHANNEL_PREFIX}:{namespace}:" if namespace else f"{CHANNEL_PREFIX}:"
        self.published = 0
        self.delivered = 0
        self.failures = 0
        self._client: Any = None
        self._paused_until = 0.0
        self._lock = threading.Lock()
        try:
            _client(url)  # parses the URL; connects only when first used
        except ValueError as exc:
            raise ValueError(f"PHOTOMOSAICS_HINTS_URL is not a Redis URL: {exc}") from None

    def __repr__(self) -> str:
        return f"RedisHintChannel(prefix={self.prefix!r})"  # never the URL: it may hold a password

    @property
    def paused_until(self) -> float:
        """``time.monotonic()`` before which ``publish`` does not try the server (after a failure)."""
        return self._paused_until

    def channel(self, queue_name: str) -> str:
        return f"{self.prefix}{queue_name}"

    def subscribe(self, queue_name: str, on_hint: OnHint, on_taken: OnTaken | None = None) -> RedisSubscription:
        return RedisSubscription(self.url, self.channel(queue_name), on_hint, on_taken)

    def publish(
        self, queue_name: str, count: int | None = None, lane: int | None = None, *, taken_by: str | None = None
    ) -> int:
        """PUBLISH the hint; returns how many subscribers the server reached (0 when down)."""
        self.published += 1
        if time.monotonic() < self._paused_until:
            return 0
        try:
            with self._lock:
                if self._client is None:
                    self._client = _client(self.url)
                told = int(self._client.publish(self.channel(queue_name), hint_payload(count, lane, taken_by=taken_by)))
        except _connection_errors() as exc:
            self.failures += 1
            self._paused_until = time.monotonic() + PAUSE_AFTER_FAILURE
            log.warning("hint not published (%s: %s); listeners fall back to polling", type(exc).__name__, exc)
            return 0
        self.delivered += told
        return told

    def close(self) -> None:
        """Close the publishing connection (a later ``publish`` opens a new one)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
