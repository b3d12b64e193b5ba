"""Shared fixtures: one real Azurite per test session, storage clients, unique names.

Tests never mock storage. When something a test needs is missing (Azurite's
``node_modules``, Chromium), the test fails with a clear message under ``CI=true`` and
skips with the same message on a person's machine.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dal.config import CONNECTION_STRING_ENV, StorageClients
from dal.queues.accessor import QueueAccessor
from dal.queues.work_queue import ImageProcessingQueue
from photomosaics.local.azurite import Azurite, AzuriteError, find_azurite_script
from tests.support.prereqs import require
from tests.support.queues import drop_queue


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a ``slow`` test first, each file's tests kept in order.

    ``make test`` hands whole files to its workers in collection order (``--dist loadfile
    --no-loadscope-reorder``). xdist's default order, most tests first, handed the files of a
    few minutes-long tests (the clean clone, the API fuzz, the giant job) out last, and one
    worker ran them alone while the others sat idle: longest first keeps them busy to the end.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the rest keeps its order


@pytest.fixture(scope="session")
def azurite_connection_string(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Azurite on free loopback ports, on disk, for the whole session.

    On disk, not in memory: the whole suite writes gigabytes of blobs (photos, bands, slices,
    pyramids) into this one Azurite; in memory they all live on its Node heap, and in two CI
    runs its requests began to time out (10 s) late in the suite.
    """
    configured = os.environ.get(CONNECTION_STRING_ENV)
    if configured:
        yield configured
        return
    try:
        find_azurite_script()
    except AzuriteError as exc:
        require(False, str(exc))
    azurite = Azurite(location=tmp_path_factory.mktemp("azurite"))
    azurite.start()
    try:
        yield azurite.connection_string
    finally:
        azurite.stop()


@pytest.fixture(scope="session")
def storage(azurite_connection_string: str) -> StorageClients:
    """Storage clients with the short ``probe`` retry policy: a dead endpoint fails fast."""
    return StorageClients(azurite_connection_string, profile="probe")


@pytest.fixture
def pipe(azurite_connection_string: str, tmp_path: Path) -> Iterator[Any]:
    """A ``tests.support.pipelines.Pipeline`` with a synthetic library ``tiles``; its roles stop after."""
    from tests.support.pipelines import Pipeline, synthetic_library

    pipeline = Pipeline(azurite_connection_string, tmp_path)
    pipeline.library_uri = pipeline.create_library("tiles", synthetic_library())
    yield pipeline
    pipeline.stop_all()


@pytest.fixture(scope="session", autouse=True)
def run_library_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where the commands keep built tile libraries (``photomosaics.library_cache``): one folder
    for the run, shared by its xdist workers, never the user's. The demo library (``photomosaics
    run``, the browser tests) is built once per run then, as once per machine for a person."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "library-cache"
    before = os.environ.get("PHOTOMOSAICS_CACHE_DIR")
    os.environ["PHOTOMOSAICS_CACHE_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("PHOTOMOSAICS_CACHE_DIR", None)
    else:
        os.environ["PHOTOMOSAICS_CACHE_DIR"] = before


@pytest.fixture(autouse=True)
def client_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the commands keep this machine's client id (``photomosaics.client_file``): the
    test's own folder, never the user's, so no test is another's client."""
    path = tmp_path / "clients.json"
    monkeypatch.setenv("PHOTOMOSAICS_CLIENT_FILE", str(path))
    return path


@pytest.fixture
def unique() -> str:
    """A short name fragment unique to this test, valid in queue, container and table names."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def prefix(unique: str) -> str:
    """The name prefix of this test's queues (a role started with ``--prefix`` shares them)."""
    return f"t{unique}"


@pytest.fixture
def queue_options() -> dict[str, Any]:
    """Which work queue ``queue`` is and its settings; a module overrides this to change them."""
    return {"name": "sliceresponse", "poison_threshold": 2, "timeout": 2}


@pytest.fixture
def queue(storage: StorageClients, prefix: str, queue_options: dict[str, Any]) -> Iterator[ImageProcessingQueue]:
    """A fresh work queue of ``queue_options`` (2 deliveries, 2 s invisibility by default), deleted after."""
    options = dict(queue_options)
    made = QueueAccessor(storage, prefix=prefix).by_name(options.pop("name"))
    made.ensure_exists(**options)
    yield made
    drop_queue(made)
