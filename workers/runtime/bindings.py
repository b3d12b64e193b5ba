"""Which queue a handler consumes, declared on the handler (as dramatiq's ``@actor(queue_name=...)``).

A role's handler method says what it consumes where it is defined::

    class ImageProcessor:
        @consumes(lambda queues: queues.slice_requests, what="rendering a slice")
        def handle_slice_request(self, received: ReceivedMessage) -> None: ...

``queue`` picks the queue, or the group of shards or lanes, from the deployment's
``QueueAccessor`` (a function, so the choice is code a type checker reads, not a name looked up);
``what`` is what the handler does, for the reason a failed job gives (``workers.failures``),
or None when the message is not a job's work (there is no job to fail).

``bindings_of(handlers)`` lists an object's bound handlers in definition order, and ``declared()``
every declaration made so far (in the modules imported), by module: the command that starts a
role reads the first, the contracts test the second.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from dal.queues.accessor import QueueAccessor
    from dal.queues.consumable import Consumable, ReceivedMessage

__all__ = ["Binding", "BoundHandler", "bindings_of", "consumes", "declared"]

QueueChoice = Callable[["QueueAccessor"], "Consumable"]
F = TypeVar("F", bound=Callable[..., None])


@dataclass(frozen=True)
class Binding:
    """What a handler consumes: the queue it picks from a ``QueueAccessor``, and what it does."""

    queue: QueueChoice
    what: str | None
    handler: str  # the method's qualified name, for messages and the contracts test


@dataclass(frozen=True)
class BoundHandler:
    """A binding with its handler bound to the object that runs it."""

    binding: Binding
    handler: Callable[[ReceivedMessage], None]

    def queue(self, queues: QueueAccessor) -> Consumable:
        return self.binding.queue(queues)

    @property
    def what(self) -> str | None:
        return self.binding.what


_DECLARED: dict[str, list[Binding]] = {}  # module -> its declared bindings, in definition order


def consumes(queue: QueueChoice, *, what: str | None) -> Callable[[F], F]:
    """Mark a handler method as the consumer of ``queue``; ``what`` names its work for failures."""

    def mark(handler: F) -> F:
        binding = Binding(queue, what, handler.__qualname__)
        handler.__dict__["binding"] = binding
        _DECLARED.setdefault(handler.__module__, []).append(binding)
        return handler

    return mark


def bindings_of(handlers: object) -> list[BoundHandler]:
    """The handler methods of ``handlers``' class marked with ``consumes``, bound to it."""
    found = []
    for klass in reversed(type(handlers).__mro__):
        for member in vars(klass).values():
            binding = member.__dict__.get("binding") if isinstance(member, types.FunctionType) else None
            if isinstance(binding, Binding):
                found.append(BoundHandler(binding, types.MethodType(member, handlers)))
    if not found:
        raise ValueError(f"{type(handlers).__name__} declares no handler (workers.runtime.bindings.consumes)")
    return found


def declared() -> dict[str, list[Binding]]:
    """Every ``consumes`` declaration of the modules imported so far, by module, in definition order."""
    return {module: list(bindings) for module, bindings in _DECLARED.items()}
