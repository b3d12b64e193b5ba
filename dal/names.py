"""The deployment prefix: the one place a logical name becomes the name stored in the account.

``PHOTOMOSAICS_NAME_PREFIX`` (``Settings.name_prefix``, empty by default) is prepended to
every queue, poison queue, container and table this deployment owns, tile libraries
included: two deployments (or two tests) share one storage account without seeing each
other's work. The rule is plain concatenation, ``<prefix><logical>``, so the stored names of
an unprefixed deployment are the logical names of ``dal.config``; every store applies it
through ``prefixed`` and reads it back through ``unprefixed``, and ``tests/test_names.py``
checks that no other module glues a prefix onto a name itself.
"""

from __future__ import annotations

__all__ = ["longest_logical", "prefixed", "unprefixed"]


def prefixed(prefix: str, logical: str) -> str:
    """The stored name of ``logical`` (a queue, container or table name) in this deployment."""
    return f"{prefix}{logical}"


def unprefixed(prefix: str, stored: str) -> str:
    """The logical name of a stored one (unchanged when it does not carry the prefix)."""
    return stored[len(prefix) :] if prefix and stored.startswith(prefix) else stored


def longest_logical(prefix: str, limit: int) -> int:
    """How long a logical name may be when its stored name may hold ``limit`` characters."""
    return limit - len(prefix)
