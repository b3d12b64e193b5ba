"""The import graph: one-way layers and no cycles, checked on the source (every import, even
inside a function or under ``TYPE_CHECKING``).

    photomosaics ──> webapp, workers ──> dal ──> mosaic
    (the command)    (the roles)         (storage) (the engine: NumPy and Pillow only)

Each package may import only the packages to its right (``photomosaics`` may use any of
them, ``webapp`` and ``workers`` do not know each other), no module imports itself through
other modules, and no module outside ``dal/`` imports ``azure.core.exceptions``: storage
errors are translated into the project's own at the ``dal/`` boundary.

Inside ``dal/`` the rooms point one way too (``ROOMS``): the foundation modules (settings,
names, errors, the retry policy, the HTTP environment) at the bottom, ``stores`` assembling the rooms, and
``operations`` on top. Inside ``workers/`` (``WORKER_ROOMS``): the queue ``runtime`` knows no
role, the shared ``imaging`` room knows no role, and no role room imports another role's.

Run ``python tests/test_layers.py`` to print the package-level graph, the rooms' graph (how many import
statements go from each package to each other) and any cycle or violation.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("photomosaics", "webapp", "workers", "dal", "mosaic")
ALLOWED = {
    "mosaic": set(),
    "dal": {"mosaic"},
    "workers": {"dal", "mosaic"},
    "webapp": {"dal", "mosaic"},
    "photomosaics": {"webapp", "workers", "dal", "mosaic"},
}
AZURE_ERRORS = "azure.core.exceptions"

# dal's rooms and what each may import besides the foundation (``FOUNDATION``).
FOUNDATION = {"config", "connection_strings", "http_environment", "retry", "names", "errors"}
ROOMS = {
    "hints": set(),
    "queues": {"hints"},
    "blobs": set(),
    "jobs": {"queues"},
    "admission": {"jobs", "queues"},
    "observability": {"jobs", "queues"},
    "availability": {"blobs", "jobs", "queues"},
    "stores": {"admission", "availability", "blobs", "jobs", "queues"},
    "operations": {"stores", "admission", "availability", "blobs", "jobs", "queues"},
}

# workers' rooms and what each may import besides its top-level modules (``WORKER_FOUNDATION``:
# what the roles share), which import no room. The runtime imports nothing else of workers.
WORKER_FOUNDATION = {"services", "failures", "stages", "job_options", "demo_library"}
WORKER_ROOMS = {
    "runtime": set(),
    "imaging": set(),
    "controller": {"runtime", "imaging"},
    "processor": {"runtime", "imaging"},
    "responder": {"runtime"},
    "indexer": {"runtime", "imaging"},
}
STRICT_ROOMS = {"runtime"}  # may not use the foundation either


def _modules() -> dict[str, Path]:
    """Every first-party module by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports(modules: dict[str, Path] | None = None) -> dict[str, list[tuple[str, int]]]:
    """``module -> [(imported module, line)]`` for every import statement, first-party or not.

    ``from a.b import c`` counts as an import of ``a.b.c`` when that is a module, else of
    ``a.b``; relative imports are resolved against the importing module's package.
    """
    modules = _modules() if modules is None else modules
    graph: dict[str, list[tuple[str, int]]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges += [(alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    edges.append((full if full in modules else base, node.lineno))
        graph[name] = edges
    return graph


def _package(module: str) -> str:
    return module.split(".")[0]


def violations() -> list[str]:
    """Imports that point the wrong way, or Azure's errors caught outside ``dal/``."""
    found = []
    for module, edges in imports().items():
        mine = _package(module)
        for target, line in edges:
            other = _package(target)
            if other in PACKAGES and other != mine and other not in ALLOWED[mine]:
                found.append(f"{module}:{line} imports {target} ({mine} may use only {sorted(ALLOWED[mine])})")
            if target.startswith(AZURE_ERRORS) and mine != "dal":
                found.append(f"{module}:{line} imports {target} (Azure errors are translated in dal/)")
    return found


def _room(module: str) -> str | None:
    """The room of a ``dal`` module (``dal.queues.lanes`` -> ``queues``), None outside ``dal``."""
    parts = module.split(".")
    return parts[1] if parts[0] == "dal" and len(parts) > 1 else None


def _worker_room(module: str) -> str | None:
    """The room of a ``workers`` module (``workers.runtime.listener`` -> ``runtime``), None outside."""
    parts = module.split(".")
    return parts[1] if parts[0] == "workers" and len(parts) > 1 else None


def room_graph() -> Counter[tuple[str, str]]:
    """``(from room, to room) -> number of import statements`` inside ``dal``."""
    counts: Counter[tuple[str, str]] = Counter()
    for module, edges in imports_cache().items():
        mine = _room(module)
        for target, _ in edges:
            other = _room(target)
            if mine and other and other != mine:
                counts[mine, other] += 1
    return counts


def room_violations() -> list[str]:
    """Imports between dal's rooms that the room table does not allow."""
    found = []
    for module, edges in imports_cache().items():
        mine = _room(module)
        for target, line in edges:
            other = _room(target)
            if not mine or not other or other == mine or other in FOUNDATION:
                continue
            if mine == "config" and other == "retry":
                continue
            allowed = ROOMS.get(mine, set())
            if mine in FOUNDATION or other not in allowed:
                found.append(
                    f"{module}:{line} imports {target} ({mine} may use only {sorted(allowed) or 'the foundation'})"
                )
    return found


def test_every_dal_module_is_in_a_known_room():
    rooms = {_room(m) for m in imports_cache()} - {None}
    assert rooms <= FOUNDATION | set(ROOMS), sorted(rooms - FOUNDATION - set(ROOMS))


def test_dal_rooms_point_one_way():
    assert room_violations() == []


def worker_room_violations() -> list[str]:
    """Imports between workers' rooms that ``WORKER_ROOMS`` does not allow."""
    found = []
    for module, edges in imports_cache().items():
        mine = _worker_room(module)
        for target, line in edges:
            other = _worker_room(target)
            if not mine or not other or other == mine:
                continue
            if other in WORKER_FOUNDATION and mine not in STRICT_ROOMS and mine not in WORKER_FOUNDATION:
                continue
            allowed = set() if mine in WORKER_FOUNDATION else WORKER_ROOMS.get(mine, set())
            if other not in allowed:
                found.append(f"{module}:{line} imports {target} ({mine} may use only {sorted(allowed) or 'nothing'})")
    return found


def test_every_workers_module_is_in_a_known_room():
    rooms = {_worker_room(m) for m in imports_cache()} - {None}
    assert rooms <= WORKER_FOUNDATION | set(WORKER_ROOMS), sorted(rooms - WORKER_FOUNDATION - set(WORKER_ROOMS))


def test_workers_rooms_point_one_way():
    assert worker_room_violations() == []


def test_the_worker_room_checker_sees_the_runtime_import_a_role(tmp_path):
    (tmp_path / "l.py").write_text("from workers.controller.controller import JobController\nimport workers.stages\n")
    modules = {"workers.runtime.l": tmp_path / "l.py", "workers.controller.controller": tmp_path / "c.py"}
    (tmp_path / "c.py").write_text("")
    _CACHE.clear()
    _CACHE.update(imports(modules))
    try:
        assert len(worker_room_violations()) == 2
    finally:
        _CACHE.clear()


def test_dal_top_level_stays_small():
    # The eight rooms, the six foundation modules (FOUNDATION), stores, __init__ and py.typed.
    entries = [p for p in (ROOT / "dal").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 17, sorted(p.name for p in entries)


def cycles() -> list[list[str]]:
    """Groups of first-party modules that import each other (strongly connected, size > 1)."""
    graph = {m: sorted({t for t, _ in edges if t in imports_cache()}) for m, edges in imports_cache().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph[v]:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


_CACHE: dict[str, list[tuple[str, int]]] = {}


def imports_cache() -> dict[str, list[tuple[str, int]]]:
    if not _CACHE:
        _CACHE.update(imports())
    return _CACHE


def package_graph() -> Counter[tuple[str, str]]:
    """``(from package, to package) -> number of import statements`` between first-party packages."""
    counts: Counter[tuple[str, str]] = Counter()
    for module, edges in imports_cache().items():
        for target, _ in edges:
            if _package(target) in PACKAGES and _package(target) != _package(module):
                counts[_package(module), _package(target)] += 1
    return counts


def private_reaches(modules: dict[str, Path] | None = None) -> list[str]:
    """``module:line name`` of every use of another object's private member (``x._y`` with ``x``
    not ``self``/``cls``, ``_y`` not defined in the same module, ``os._exit`` aside): a class's
    helpers stay its own; what others need is a public method (``StoredQueue.put_text``)."""
    modules = _modules() if modules is None else modules
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        own |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            owner = ast.unparse(node.value)
            if owner in ("self", "cls", "os") or node.attr in own:
                continue
            found.append(f"{name}:{node.lineno} {owner}.{node.attr}")
    return found


def test_no_module_reaches_into_another_objects_private_members():
    assert private_reaches() == []


def test_the_private_checker_sees_a_reach(tmp_path):
    (tmp_path / "a.py").write_text("class A:\n    def _mine(self):\n        return self._x, A._mine, other._put('t')\n")
    assert private_reaches({"dal.a": tmp_path / "a.py"}) == ["dal.a:3 other._put"]


# Where a first-party import may wait inside a function (a module, or ``package.*`` for its
# modules), and why; everywhere else an import
# is at the top, where a reader (and this checker's graph) sees it.
LAZY_IMPORTS_ALLOWED = {
    "photomosaics.commands.*": "each sub-command imports what it needs when it runs, so `photomosaics --help` and "
    "every command start without loading the whole application (NumPy, the Azure SDK)",
    "photomosaics.render_library": "the render command's library: the Azure SDK only for a library in storage",
    "photomosaics.render_outputs": "the render command's outputs: each encoder (libvips, Deep Zoom) when it is asked for",
    "photomosaics.library_upload": "`library add`'s client: the Azure SDK and dal only once it uploads, as its command",
    "webapp": "the app factory imports its blueprints (flask's flaskr pattern): they import this package",
    "dal.config": "StorageClients imports its retry policy (dal.retry, a subclass of the Azure SDK's) when it is "
    "made, so a process that only reads Settings (`photomosaics render`) imports no Azure SDK",
}


def hidden_imports(modules: dict[str, Path] | None = None) -> list[str]:
    """``module:line target`` of every first-party import inside a function, outside the allowed places."""
    modules = _modules() if modules is None else modules
    found = []
    for name, path in modules.items():
        if name in LAZY_IMPORTS_ALLOWED or f"{name.rpartition('.')[0]}.*" in LAZY_IMPORTS_ALLOWED:
            continue
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and (node.level or _package(node.module or "") in PACKAGES):
                    found.append(f"{name}:{node.lineno} {'.' * node.level}{node.module or ''}")
                elif isinstance(node, ast.Import):
                    found += [f"{name}:{node.lineno} {a.name}" for a in node.names if _package(a.name) in PACKAGES]
    return found


def test_first_party_imports_are_at_the_top():
    assert hidden_imports() == []


def test_the_hidden_import_checker_sees_one(tmp_path):
    (tmp_path / "a.py").write_text(
        "import json\n\ndef f():\n    import dal.jobs.store\n    from . import b\n    import os\n"
    )
    assert hidden_imports({"dal.a": tmp_path / "a.py"}) == ["dal.a:4 dal.jobs.store", "dal.a:5 ."]
    assert hidden_imports({"photomosaics.commands.a": tmp_path / "a.py"}) == []


def test_every_import_points_down_the_layers():
    assert violations() == []


def test_no_module_imports_itself_through_others():
    assert cycles() == []


def test_the_checker_sees_imports_inside_functions_and_relative_ones(tmp_path):
    (tmp_path / "dal").mkdir()
    (tmp_path / "dal" / "__init__.py").write_text("")
    (tmp_path / "dal" / "a.py").write_text("def f():\n    from workers import b\n    from . import c\n")
    (tmp_path / "dal" / "c.py").write_text("from .a import f\n")
    modules = {
        "dal": tmp_path / "dal" / "__init__.py",
        "dal.a": tmp_path / "dal" / "a.py",
        "dal.c": tmp_path / "dal" / "c.py",
    }
    assert imports(modules)["dal.a"] == [("workers", 2), ("dal.c", 3)]
    assert imports(modules)["dal.c"] == [("dal.a", 1)]


def main() -> int:
    graph = package_graph()
    print("package-level import graph (import statements, incl. inside functions):")
    for package in PACKAGES:
        targets = [f"{t} ({graph[package, t]})" for t in PACKAGES if graph[package, t]]
        print(f"  {package:13} -> {', '.join(targets) or '(nothing of the project)'}")
    found_cycles = cycles()
    print("module cycles:", "none" if not found_cycles else "")
    for group in found_cycles:
        print("  " + " <-> ".join(group))
    rooms = room_graph()
    print("dal rooms (import statements):")
    for room in sorted(ROOMS):
        targets = [f"{t} ({n})" for (r, t), n in sorted(rooms.items()) if r == room]
        print(f"  {room:13} -> {', '.join(targets) or '(the foundation only)'}")
    worker_rooms: Counter[tuple[str, str]] = Counter()
    for module, edges in imports_cache().items():
        for target, _ in edges:
            mine, other = _worker_room(module), _worker_room(target)
            if mine and other and other != mine:
                worker_rooms[mine, other] += 1
    print("workers rooms (import statements):")
    for room in sorted(set(WORKER_ROOMS) | WORKER_FOUNDATION):
        targets = [f"{t} ({n})" for (r, t), n in sorted(worker_rooms.items()) if r == room]
        print(f"  {room:13} -> {', '.join(targets) or '(nothing of workers)'}")
    found = violations() + room_violations() + worker_room_violations()
    print("layer violations:", "none" if not found else "")
    for line in found:
        print("  " + line)
    return 1 if found or found_cycles else 0


if __name__ == "__main__":
    sys.exit(main())
