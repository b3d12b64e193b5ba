"""Renaming a library: its name is a record that points at a container that never moves.

A container's name cannot change in Azure Storage. Copying every blob into a container of the
new name would cost a server-side copy per blob (thousands for a person's library), leave a
window in which the library is in neither or both, and break every job made with it: their
messages and tile maps carry the container's URL. So the container stays the library's
identity, its **key**, and the name a person sees and uses is a record:

- the key container's metadata ``displayname`` holds the current name (absent: the key itself);
- any other name is held by an **alias** container of that name: empty, not marked as a
  library, metadata ``aliasof=<key>``. Creating it is the claim of the name (exactly one caller
  wins, as for a new library: ``LibraryStore.claim``), so library names stay one namespace;
- the key stays the library's too: links, tile URLs and jobs made with it keep working, and no
  other library can take it. Renaming back to the key drops the alias.

``LibraryStore.info`` follows an alias (one more metadata read) only when the library it points
at still carries that name, so an alias left behind by an interrupted or superseded rename
resolves to nothing; ``rename`` run again converges (its own alias is taken up again), and the
previous alias is deleted once the new name is in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from azure.core.exceptions import ResourceNotFoundError

from dal.errors import LibraryExistsError, LibraryNotFoundError

__all__ = ["ALIAS_KEY", "DISPLAY_KEY", "alias_target", "rename_library"]

ALIAS_KEY = "aliasof"
DISPLAY_KEY = "displayname"


def _value(metadata: Mapping[str, str | None] | None, key: str) -> str:
    for name, value in (metadata or {}).items():
        if name.lower() == key:
            return value or ""
    return ""


def alias_target(metadata: Mapping[str, str | None] | None) -> str:
    """The key an alias container points at ("" when the container is no alias)."""
    return _value(metadata, ALIAS_KEY)


def display_name(metadata: Mapping[str, str | None] | None) -> str:
    """The name a library container carries ("" when it was never renamed)."""
    return _value(metadata, DISPLAY_KEY)


class LibraryNames(Protocol):
    """What renaming needs of ``dal.blobs.libraries.LibraryStore`` (which imports this module)."""

    def container_name(self, name: str) -> str: ...
    def container_client(self, name: str) -> Any: ...
    def claim(self, name: str) -> None: ...
    def forget(self, name: str) -> None: ...


class Named(Protocol):
    """A library's current name and key (``dal.blobs.library_info.LibraryInfo``)."""

    @property
    def name(self) -> str: ...
    @property
    def key(self) -> str: ...


def _metadata(container: Any) -> dict[str, str]:
    try:
        return {k: v or "" for k, v in container.get_container_properties().metadata.items()}
    except ResourceNotFoundError:
        raise LibraryNotFoundError(f"tile library {container.container_name!r} is gone") from None


def rename_library(store: LibraryNames, info: Named, new: str) -> None:
    """Give the library ``info`` the name ``new`` (see the module docstring); ``LibraryExistsError``
    when another library, or a container, holds that name."""
    store.container_name(new)  # the rule, said in the user's terms
    old, key = info.name, info.key
    if new == old:
        return
    if new != key:
        try:
            store.claim(new)
        except LibraryExistsError:
            if alias_target(_metadata(store.container_client(new))) != store.container_name(key):
                raise  # someone else's name (or a library's own key): taken
        store.container_client(new).set_container_metadata({ALIAS_KEY: store.container_name(key)})
    library = store.container_client(key)
    metadata = {k: v for k, v in _metadata(library).items() if k.lower() != DISPLAY_KEY}
    if new != key:
        metadata[DISPLAY_KEY] = new
    library.set_container_metadata(metadata)
    if old != key:  # the previous alias: nothing points there now
        alias = store.container_client(old)
        try:
            if alias_target(_metadata(alias)) == store.container_name(key):
                alias.delete_container()
        except (LibraryNotFoundError, ResourceNotFoundError):
            pass
    for name in {old, new, key}:
        store.forget(name)


def drop_alias(store: LibraryNames, name: str) -> None:
    """Before the library ``name`` (its key) is deleted: delete the alias that holds its current
    name, if any, so that the name is free again."""
    key = store.container_client(name)
    try:
        shown = display_name(key.get_container_properties().metadata)
    except ResourceNotFoundError:
        return
    if shown and shown != name:
        alias = store.container_client(shown)
        try:
            if alias_target(alias.get_container_properties().metadata) == key.container_name:
                alias.delete_container()
        except ResourceNotFoundError:
            pass
