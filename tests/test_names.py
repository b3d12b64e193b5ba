"""One home for the deployment prefix (``dal.names``): every store applies it the same way, the
stored names are what they always were, and no module glues a prefix onto a name itself."""

from __future__ import annotations

import ast
from pathlib import Path

from dal.admission.quotas import QuotaStore
from dal.admission.render_rates import RenderRates
from dal.availability.failover import backlog_queues
from dal.blobs.libraries import LibraryStore
from dal.blobs.store import BlobStore
from dal.config import CLAIM_CHECK_CONTAINER, IMAGE_INPUT_CONTAINER, Settings, StorageClients
from dal.connection_strings import azurite_connection_string
from dal.jobs.store import JobStore
from dal.names import longest_logical, prefixed, unprefixed
from dal.queues.accessor import QueueAccessor

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dal", "workers", "webapp", "photomosaics", "mosaic")
# Modules whose ``prefix`` is something else than the deployment's: why each may glue its own.
OTHER_PREFIXES = {
    "dal/hints/pubsub.py": "a Redis channel prefix (photomosaics:<namespace>:) before an already stored queue name",
}


def test_the_prefix_is_prepended_and_read_back() -> None:
    assert prefixed("t1", "jobs") == "t1jobs" and prefixed("", "jobs") == "jobs"
    assert unprefixed("t1", "t1jobs") == "jobs"
    assert unprefixed("t1", "jobs") == "jobs" and unprefixed("", "t1jobs") == "t1jobs"
    assert longest_logical("t1", 63) == 61 and longest_logical("", 63) == 63


def test_stored_names_are_unchanged() -> None:
    """The names in an account of an existing deployment (no client is created: names only)."""
    storage = StorageClients(azurite_connection_string("127.0.0.1", 1, 2, 3), profile="probe")
    queues = QueueAccessor(storage, settings=Settings(slice_shards=2), prefix="t1")
    assert (queues.image_request.name, queues.image_request.poison.name) == ("t1imagerequest", "t1imagerequest-poison")
    assert [q.name for q in queues.slice_request_shards] == ["t1slicerequest", "t1slicerequest-1"]
    assert queues.slice_request_shards[1].poison.name == "t1slicerequest-1-poison"
    assert queues.image_request.hint_name == "t1imagerequest"
    jobs = JobStore(storage, prefix="t1")
    assert (jobs.jobs_table, jobs.events_table) == ("t1jobs", "t1jobevents")
    quotas = QuotaStore(storage, max_unfinished=1, per_minute=1, prefix="t1")
    assert (quotas.table_name, quotas.jobs_table) == ("t1clientquotas", "t1jobs")
    assert RenderRates(storage, prefix="t1").table_name == "t1renderrates"
    blobs = BlobStore(storage, prefix="t1")
    assert blobs.container_name(IMAGE_INPUT_CONTAINER) == "t1imageinput"
    assert blobs.container_name(CLAIM_CHECK_CONTAINER) == "t1queuepayloads"
    assert blobs.container_name("holiday") == "holiday"  # a library's container is named by LibraryStore
    assert LibraryStore(storage, prefix="t1").container_name("holiday") == "t1holiday"
    assert [q.name for q in backlog_queues(storage, "t1", 2)] == ["t1backlog-0", "t1backlog-1"]
    unprefixed_jobs = JobStore(storage)
    assert (unprefixed_jobs.jobs_table, QueueAccessor(storage).image_request.name) == ("jobs", "imagerequest")


def _names_prefix(node: ast.AST) -> bool:
    """``prefix``, ``self.prefix``, ``settings.name_prefix``...: an expression naming a prefix."""
    if isinstance(node, ast.Name):
        return node.id.endswith("prefix")
    if isinstance(node, ast.Attribute):
        return node.attr.endswith("prefix")
    return False


def prefix_gluing(paths: list[Path], *, root: Path = ROOT) -> list[str]:
    """``file:line`` of every hand-made prefixed name: ``f"{prefix}..."``, ``prefix + ...``,
    ``name[len(prefix):]`` or ``name.removeprefix(prefix)``."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            glued = (
                (
                    isinstance(node, ast.JoinedStr)
                    and len(node.values) > 1
                    and isinstance(node.values[0], ast.FormattedValue)
                    and _names_prefix(node.values[0].value)
                )
                or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _names_prefix(node.left))
                or (
                    isinstance(node, ast.Slice)
                    and isinstance(node.lower, ast.Call)
                    and isinstance(node.lower.func, ast.Name)
                    and node.lower.func.id == "len"
                    and node.lower.args
                    and _names_prefix(node.lower.args[0])
                )
                or (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "removeprefix"
                    and node.args
                    and _names_prefix(node.args[0])
                )
            )
            if glued:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_module_but_dal_names_applies_the_prefix_itself() -> None:
    skip = {ROOT / "dal" / "names.py", *(ROOT / path for path in OTHER_PREFIXES)}
    paths = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py")) if p not in skip]
    assert prefix_gluing(paths) == []


def test_the_checker_sees_each_way_of_gluing(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        'a = f"{prefix}jobs"\nb = self.prefix + "x"\nc = name[len(self.prefix):]\nd = n.removeprefix(svc.prefix)\n'
        'e = f"{name}-{prefix}"\nf = prefixed(prefix, "jobs")\n'
    )
    assert sorted(line.rsplit(":", 1)[1] for line in prefix_gluing([sample], root=tmp_path)) == ["1", "2", "3", "4"]
