"""The tile library of an offline render (``photomosaics render``): a folder or zip of photos
(built in memory, its index cached on disk by ``photomosaics.library_cache``), ``demo``, or, only
when ``AZURE_STORAGE_CONNECTION_STRING`` is set, the name of a library in storage. Every
problem is a usage error naming ``--library``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


def _build_from_path(path: Path, *, use_cache: bool) -> tuple[Any, list[tuple[str, str]]]:
    from mosaic.errors import NoUsableImageError, TileSourceError
    from mosaic.sources import build_library_from
    from photomosaics import library_cache

    if use_cache and (hit := library_cache.load(path)) is not None:
        click.echo(f"using the cached index of {path} ({len(hit[0].names)} tiles)", err=True)
        return hit
    try:
        library, skipped = build_library_from(path)
    except TileSourceError as exc:
        raise click.BadParameter(str(exc), param_hint="--library") from None
    except NoUsableImageError as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--library") from None
    if use_cache:
        library_cache.store(path, library, skipped)
    return library, skipped


def load_library(spec: str, *, echo: bool = True, use_cache: bool = True) -> Any:
    """A ``TileLibrary`` from a folder, a zip, ``demo`` or (with a connection string) a stored name.

    A library built from a folder or zip, or the demo library, is cached on disk
    (``photomosaics.library_cache``).
    """
    from dal.config import CONNECTION_STRING_ENV, Settings

    path = Path(spec).expanduser()
    if path.exists():
        library, skipped = _build_from_path(path, use_cache=use_cache)
    elif spec == "demo":
        library, skipped = _demo(use_cache=use_cache), []
    elif Settings.from_env().connection_string:
        return _load_stored(spec)
    else:
        raise click.BadParameter(
            f"{spec!r} is not a folder or zip of photos, nor 'demo'; a library name in storage "
            f"needs {CONNECTION_STRING_ENV} to be set",
            param_hint="--library",
        )
    if echo and skipped:
        click.echo(
            f"skipped {len(skipped)} file(s) that are not usable images, e.g. {skipped[0][0]} ({skipped[0][1]})",
            err=True,
        )
    return library


def _demo(*, use_cache: bool) -> Any:
    library, cached = demo_library(use_cache=use_cache)
    if cached:
        click.echo(f"using the cached demo library ({len(library.names)} tiles)", err=True)
    return library


def demo_library(*, use_cache: bool = True) -> tuple[Any, bool]:
    """The demo library and whether it came from the disk cache (``photomosaics.library_cache``):
    read back when its key (``workers.demo_library.demo_source_key``) matches, else built from
    ``demo_tile_images`` (~3 s of decoding and signatures) and kept, for the next render and for
    the start-up of a fresh data folder (``photomosaics run``, ``web --demo-library``)."""
    from mosaic.sources import build_library_from
    from photomosaics import library_cache
    from workers.demo_library import demo_source_key, demo_tile_images

    key = demo_source_key() if use_cache else None
    if key is not None and (hit := library_cache.load(key)) is not None:
        return hit[0], True
    library, skipped = build_library_from(demo_tile_images())
    if key is not None:
        library_cache.store(key, library, skipped)
    return library, False


def _load_stored(name: str) -> Any:
    from dal.blobs.libraries import LibraryStore
    from dal.config import Settings, StorageClients
    from dal.errors import LibraryError

    settings = Settings.from_env()
    assert settings.connection_string is not None
    store = LibraryStore(StorageClients(settings.connection_string, profile="interactive"), prefix=settings.name_prefix)
    try:
        return store.load(name)
    except (LibraryError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--library") from None


def library_for(library_spec: str, *, use_cache: bool, max_uses: int | None, cells: int) -> Any:
    """The tile library; with ``max_uses``, refused when it cannot cover ``cells`` cells."""
    library = load_library(library_spec, use_cache=use_cache)
    if max_uses is not None:
        from mosaic.errors import TileBudgetError
        from mosaic.fair import check_budget

        try:
            check_budget(cells, library.group_count, max_uses)
        except TileBudgetError as exc:
            raise click.BadParameter(str(exc), param_hint="--max-uses") from None
    return library
