"""``docs/CONTRACTS.md`` says what the code does: its declarations and queue table are checked.

Every ```` ```python ```` block of the document is a list of declarations, read the way the
document's introduction describes: the module comes from the section heading (or a
``# path/to/module.py`` line), ``class`` lines name classes, ``@dataclass`` classes list their own
fields and class constants in order, ``def`` lines are compared with ``inspect.signature``
(parameter names, kinds, defaults, and annotations where the document gives them), and
upper-case constants with their values. A line of any other form fails the test, so the
document cannot drift into prose the check skips. The queue table is compared with the queue
name constants of ``dal.config``, the messages' ``QUEUE`` and the queues each role's handlers
declare they consume (``workers.runtime.bindings.consumes``); the role example with the processor's.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "CONTRACTS.md"

_MODULE_PATH = re.compile(r"\b((?:[a-z_]+/)+[a-z_]+\.py)\b")
_MODULE_SWITCH = re.compile(r"^#\s*((?:[a-z_]+/)+[a-z_]+\.py)\b")
_FENCE = re.compile(r"^```(\w*)(.*)$")


@dataclass
class Block:
    """One python block: its first line number in the document, its module, its lines."""

    line: int
    module: str | None
    lines: list[str]
    info: str = ""


@dataclass
class Declaration:
    """One checkable statement of the document, with where it came from."""

    line: int
    module: str
    owner: str | None  # class name, or None at module level
    source: str  # the statement with comments removed (one logical line)
    decorators: list[str] = field(default_factory=list)


def _strip_comment(line: str) -> str:
    """The line without its ``#`` comment (a ``#`` inside quotes is kept)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[:i].rstrip()
    return line.rstrip()


def _depth(text: str) -> int:
    return sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")


def _module_of(path: str) -> str:
    return path[: -len(".py")].replace("/", ".").removesuffix(".__init__")


def read_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    module: str | None = None
    current: Block | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        fence = _FENCE.match(line)
        if current is None:
            if line.startswith("## "):
                found = _MODULE_PATH.search(line)
                module = _module_of(found.group(1)) if found else None
            elif fence and fence.group(1):
                current = Block(number + 1, module, [], info=(fence.group(1) + fence.group(2)).strip())
        elif line.startswith("```"):
            blocks.append(current)
            current = None
        else:
            current.lines.append(line)
    assert current is None, "an unclosed code block in docs/CONTRACTS.md"
    return blocks


def declarations(block: Block) -> list[Declaration]:
    """The block's statements: comments dropped, bracketed continuations joined."""
    found: list[Declaration] = []
    module, owner = block.module, None
    decorators: list[str] = []
    pending: tuple[int, int, str] | None = None  # (line, indent, text so far)
    for offset, raw in enumerate(block.lines):
        number = block.line + offset
        if pending is not None:
            text = pending[2] + " " + _strip_comment(raw).strip()
            pending = (pending[0], pending[1], text)
            if _depth(text) > 0:
                continue
            number, indent, code = pending
            pending = None
        else:
            switch = _MODULE_SWITCH.match(raw.strip())
            if switch and raw.startswith("#"):
                module, owner = _module_of(switch.group(1)), None
                continue
            code = _strip_comment(raw)
            if not code.strip():
                continue
            indent = len(code) - len(code.lstrip())
            code = code.strip()
            if _depth(code) > 0:
                pending = (number, indent, code)
                continue
        assert module, f"docs/CONTRACTS.md:{number}: no module for {code!r} (heading or '# path.py' line)"
        if code.startswith("@"):
            decorators.append(code)
            continue
        if indent == 0:
            owner = None
        if code.startswith("class "):
            name = re.match(r"class (\w+)", code)
            assert name, f"docs/CONTRACTS.md:{number}: unreadable class line {code!r}"
            found.append(Declaration(number, module, None, code, decorators))
            owner = name.group(1)
        else:
            found.append(Declaration(number, module, owner if indent else None, code, decorators))
        decorators = []
    assert pending is None, f"docs/CONTRACTS.md:{pending[0]}: unbalanced brackets"
    return found


# --- comparing with the code ------------------------------------------------------------


def _norm(annotation: str) -> str:
    return ast.unparse(ast.parse(annotation, mode="eval"))


def _raw_member(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    raise AttributeError(name)


def _function_of(member: Any) -> Any:
    if isinstance(member, (classmethod, staticmethod)):
        return member.__func__
    if isinstance(member, property):
        return member.fget
    return member


def _doc_value(source: str, module: ModuleType) -> Any:
    return eval(compile(ast.parse(source, mode="eval"), "<CONTRACTS.md>", "eval"), vars(module))


def _same_default(doc: ast.expr | None, actual: Any, module: ModuleType) -> bool:
    if doc is None:
        return actual is inspect.Parameter.empty
    if actual is inspect.Parameter.empty:
        return False
    if isinstance(doc, ast.Constant) and doc.value is Ellipsis:
        return True  # "has a default", value not stated
    expected = _doc_value(ast.unparse(doc), module)
    return type(expected) is type(actual) and expected == actual


def _annotation_text(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def check_def(decl: Declaration, target: Any, module: ModuleType) -> list[str]:
    where = f"docs/CONTRACTS.md:{decl.line} {decl.source[:70]!r}"
    tree = ast.parse(decl.source.rstrip(":") + ": ...").body[0]
    assert isinstance(tree, ast.FunctionDef)
    sig = inspect.signature(target)
    args = tree.args
    doc_params: list[tuple[str, inspect._ParameterKind, ast.expr | None, ast.expr | None]] = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for i, a in enumerate(positional):
        kind = (
            inspect.Parameter.POSITIONAL_ONLY if i < len(args.posonlyargs) else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        doc_params.append((a.arg, kind, a.annotation, defaults[i]))
    if args.vararg:
        doc_params.append((args.vararg.arg, inspect.Parameter.VAR_POSITIONAL, args.vararg.annotation, None))
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        doc_params.append((a.arg, inspect.Parameter.KEYWORD_ONLY, a.annotation, d))
    if args.kwarg:
        doc_params.append((args.kwarg.arg, inspect.Parameter.VAR_KEYWORD, args.kwarg.annotation, None))
    actual = list(sig.parameters.values())
    problems = []
    doc_names = [p[0] for p in doc_params]
    code_names = [p.name for p in actual]
    if doc_names != code_names:
        return [f"{where}: parameters {doc_names}, the code has {code_names}"]
    for (name, kind, annotation, default), param in zip(doc_params, actual, strict=True):
        if kind != param.kind:
            problems.append(f"{where}: {name} is {kind.description} here, {param.kind.description} in the code")
        documented = annotation is not None and param.annotation is not inspect.Parameter.empty
        if documented and _norm(ast.unparse(annotation)) != _norm(_annotation_text(param.annotation)):
            problems.append(f"{where}: {name}: {ast.unparse(annotation)}, the code says {param.annotation}")
        if not _same_default(default, param.default, module):
            shown = "none" if default is None else ast.unparse(default)
            problems.append(f"{where}: {name} default {shown}, the code has {param.default!r}")
    returns = tree.returns is not None and sig.return_annotation is not inspect.Signature.empty
    if returns and _norm(ast.unparse(tree.returns)) != _norm(_annotation_text(sig.return_annotation)):
        problems.append(f"{where}: returns {ast.unparse(tree.returns)}, the code says {sig.return_annotation}")
    return problems


def _own_annotations(cls: type) -> dict[str, str]:
    """What a class declares itself (fields and class constants), private names left out."""
    return {k: v for k, v in inspect.get_annotations(cls).items() if not k.startswith("_")}


def _instance_attribute(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        if klass is object:
            continue
        if name in klass.__dict__ or name in inspect.get_annotations(klass):
            return True
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if re.search(rf"\bself\.{re.escape(name)}\s*(?::[^=]+)?=", source):
            return True
    return False


class Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.fields_seen: dict[tuple[str, str], list[str]] = {}
        self.dataclasses: dict[tuple[str, str], Declaration] = {}
        self.checked = 0

    def module(self, name: str) -> ModuleType:
        return importlib.import_module(name)

    def run(self, decl: Declaration) -> None:
        where = f"docs/CONTRACTS.md:{decl.line} {decl.source[:70]!r}"
        module = self.module(decl.module)
        self.checked += 1
        if decl.source.startswith("class "):
            self.check_class(decl, module, where)
        elif decl.owner is None:
            self.check_module_member(decl, module, where)
        else:
            self.check_class_member(decl, module, where)

    def check_class(self, decl: Declaration, module: ModuleType, where: str) -> None:
        tree = ast.parse(decl.source.rstrip(":") + ": ...").body[0]
        assert isinstance(tree, ast.ClassDef)
        cls = getattr(module, tree.name, None)
        if not inspect.isclass(cls):
            self.problems.append(f"{where}: {decl.module} has no class {tree.name}")
            return
        mro = {k.__name__ for k in cls.__mro__}
        for base in tree.bases:
            if ast.unparse(base).split("[")[0].split(".")[-1] not in mro:
                self.problems.append(f"{where}: {tree.name} does not derive from {ast.unparse(base)}")
        for decorator in decl.decorators:
            if decorator.startswith("@dataclass"):
                if not dataclasses.is_dataclass(cls):
                    self.problems.append(f"{where}: {tree.name} is not a dataclass")
                    continue
                if "frozen=True" in decorator and not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
                    self.problems.append(f"{where}: {tree.name} is not frozen")
                self.dataclasses[(decl.module, tree.name)] = decl
                self.fields_seen[(decl.module, tree.name)] = []

    def check_module_member(self, decl: Declaration, module: ModuleType, where: str) -> None:
        if decl.source.startswith("def "):
            name = re.match(r"def (\w+)", decl.source).group(1)  # type: ignore[union-attr]
            target = getattr(module, name, None)
            if target is None or not callable(target):
                self.problems.append(f"{where}: {decl.module} has no function {name}")
                return
            self.problems += check_def(decl, target, module)
            return
        assignment = re.match(r"([A-Za-z_]\w*)\s*=\s*(.+)$", decl.source)
        if not assignment:
            self.problems.append(f"{where}: not a declaration this check reads (class, def, NAME = value)")
            return
        name, value = assignment.groups()
        if not hasattr(module, name):
            self.problems.append(f"{where}: {decl.module} has no {name}")
        elif name.isupper() and _doc_value(value, module) != getattr(module, name):
            self.problems.append(f"{where}: {name} = {getattr(module, name)!r} in the code")

    def check_class_member(self, decl: Declaration, module: ModuleType, where: str) -> None:
        cls = getattr(module, decl.owner or "", None)
        if cls is None:
            return  # reported with the class line
        if decl.source.startswith("def "):
            name = re.match(r"def (\w+)", decl.source).group(1)  # type: ignore[union-attr]
            try:
                member = _raw_member(cls, name)
            except AttributeError:
                self.problems.append(f"{where}: {decl.owner} has no method {name}")
                return
            if "@property" in decl.decorators and not isinstance(member, property):
                self.problems.append(f"{where}: {decl.owner}.{name} is not a property")
            self.problems += check_def(decl, _function_of(member), module)
            return
        constant = re.match(r"([A-Z_][A-Z0-9_]*)\s*=\s*(.+)$", decl.source)
        if constant:
            name, value = constant.groups()
            if getattr(cls, name, None) != _doc_value(value, module):
                self.problems.append(f"{where}: {decl.owner}.{name} is {getattr(cls, name, None)!r} in the code")
            return
        for part in _split_top_level(decl.source, ";"):
            self.check_attribute(decl, cls, part.strip(), module, where)

    def check_attribute(self, decl: Declaration, cls: type, text: str, module: ModuleType, where: str) -> None:
        match = re.match(r"(\w+)\s*:\s*([^=]+?)\s*(?:=\s*(.+))?$", text)
        if not match:
            self.problems.append(f"{where}: not an attribute line (name: type [= default])")
            return
        name, annotation, default = match.groups()
        key = (decl.module, decl.owner or "")
        if key not in self.dataclasses:
            if not _instance_attribute(cls, name):
                self.problems.append(f"{where}: {decl.owner} has no attribute {name}")
            return
        self.fields_seen[key].append(name)
        own = _own_annotations(cls)
        if name not in own:
            self.problems.append(f"{where}: {decl.owner} declares no {name} of its own")
            return
        if _norm(annotation) != _norm(_annotation_text(own[name])):
            self.problems.append(f"{where}: {name}: {annotation}, the code says {own[name]}")
        if "ClassVar" in own[name]:
            if default is not None and _doc_value(default, module) != getattr(cls, name):
                self.problems.append(f"{where}: {name} = {getattr(cls, name)!r} in the code")
            return
        fields = {f.name: f for f in dataclasses.fields(cls)}
        actual = fields[name].default
        if fields[name].default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            actual = "factory"
        if default is None and actual is not dataclasses.MISSING:
            self.problems.append(f"{where}: {name} has a default in the code")
        elif default is not None and actual is dataclasses.MISSING:
            self.problems.append(f"{where}: {name} has no default in the code")
        elif default not in (None, "...") and actual != "factory" and _doc_value(default, module) != actual:
            self.problems.append(f"{where}: {name} defaults to {actual!r} in the code")

    def finish(self) -> None:
        for (module_name, name), decl in self.dataclasses.items():
            cls = getattr(self.module(module_name), name)
            own = list(_own_annotations(cls))
            if self.fields_seen[(module_name, name)] != own:
                self.problems.append(
                    f"docs/CONTRACTS.md:{decl.line}: {name} lists {self.fields_seen[(module_name, name)]}, "
                    f"the code declares {own}"
                )


def _split_top_level(text: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


# --- the tests ------------------------------------------------------------------------


def _document() -> str:
    return DOC.read_text(encoding="utf-8")


def test_every_declaration_matches_the_code() -> None:
    checker = Checker()
    for block in read_blocks(_document()):
        if block.info != "python":
            continue
        for decl in declarations(block):
            checker.run(decl)
    checker.finish()
    assert checker.checked > 100, f"only {checker.checked} declarations read: is the document parsed?"
    assert not checker.problems, "docs/CONTRACTS.md has drifted from the code:\n" + "\n".join(checker.problems)


def test_every_message_type_is_documented() -> None:
    from dal.queues.messages import MESSAGE_TYPES

    documented = set()
    for block in read_blocks(_document()):
        for decl in declarations(block) if block.info == "python" else []:
            if decl.module == "dal.queues.messages" and decl.source.startswith("class "):
                documented.add(re.match(r"class (\w+)", decl.source).group(1))  # type: ignore[union-attr]
    missing = {cls.__name__ for cls in MESSAGE_TYPES.values()} - documented
    assert not missing, f"docs/CONTRACTS.md does not declare {sorted(missing)}"


def _queue_table() -> list[dict[str, str]]:
    """The rows of the table under '## Queues' (header cells lower-cased, backticks dropped)."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    inside = False
    for line in _document().splitlines():
        if line.startswith("## "):
            inside = line.strip() == "## Queues"
            continue
        if not inside or not line.startswith("|"):
            continue
        cells = [c.strip().replace("`", "") for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
        elif not set("".join(cells)) <= set("-: "):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


@functools.cache
def _role_bindings() -> dict[str, set[str]]:
    """Which QueueAccessor attributes each role consumes, from its handlers' declarations.

    Every module of ``workers`` is imported, so every ``@consumes`` has run; a handler's role is
    its room (``workers.responder.cleaner`` -> ``responder``), and the attribute is the one of a
    real ``QueueAccessor`` (built offline) that holds the very queue the declaration picks.
    """
    import workers
    from dal.config import StorageClients
    from dal.queues.accessor import QueueAccessor
    from workers.runtime.bindings import declared

    for module in pkgutil.walk_packages(workers.__path__, "workers."):
        importlib.import_module(module.name)
    accessor = QueueAccessor(StorageClients("UseDevelopmentStorage=true"))
    bindings: dict[str, set[str]] = {}
    for module, bindings_of_module in declared().items():
        for binding in bindings_of_module:
            chosen = binding.queue(accessor)
            attrs = [name for name, value in vars(accessor).items() if value is chosen]
            assert len(attrs) == 1, f"{binding.handler} consumes {chosen!r}: not one QueueAccessor attribute"
            bindings.setdefault(module.split(".")[1], set()).update(attrs)
    return bindings


def test_the_queue_table_matches_the_code() -> None:
    from dal import config
    from dal.queues.accessor import QueueAccessor
    from dal.queues.messages import MESSAGE_TYPES

    rows = _queue_table()
    assert rows, "docs/CONTRACTS.md has no table under '## Queues'"
    queues = {row["queue"] for row in rows}
    constants = {getattr(config, name) for name in dir(config) if name.endswith("_QUEUE")}
    assert queues == constants == set(config.WORK_QUEUES) | {config.JOB_CLEANUP_QUEUE, config.INDEX_REQUEST_QUEUE}
    by_type = {cls.__name__: cls for cls in MESSAGE_TYPES.values()}
    assert {row["message"] for row in rows} == set(by_type)
    bindings = _role_bindings()
    for row in rows:
        assert row["queue"] == by_type[row["message"]].QUEUE, row
        attr = row["queueaccessor attribute"]
        assert _instance_attribute(QueueAccessor, attr), f"QueueAccessor has no {attr}"
        assert attr in bindings.get(row["consumed by"], set()), (
            f"{row['consumed by']} does not consume {attr}: it binds {bindings.get(row['consumed by'])}"
        )


def test_the_role_example_consumes_what_the_processor_consumes() -> None:
    examples = [b for b in read_blocks(_document()) if b.info == "python example"]
    assert examples, "docs/CONTRACTS.md has no role example"
    consumed = set()
    for block in examples:
        tree = ast.parse("\n".join(block.lines))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "queues"
            ):
                consumed.add(node.attr)
    assert consumed, "the role example names no queue"
    assert consumed <= _role_bindings()["processor"], consumed


@pytest.mark.parametrize("word", ["(additions)", "issue ", "seed 0"])
def test_no_history_in_the_document(word: str) -> None:
    assert word not in _document().lower()


def test_the_checker_finds_drift() -> None:
    """The check itself: a wrong parameter, a missing field and an unknown name are reported."""
    text = (
        "## dal/queues/messages.py — x\n\n```python\n"
        "@dataclass(frozen=True, kw_only=True)\nclass ImageRequestMessage(QueueMessage):\n"
        "    image_uri: str\n    image_library_uri: str\n"
        "```\n\n## dal/queues/work_queue.py — y\n\n```python\n"
        "class ImageProcessingQueue:\n    def delete(self, message: ReceivedMessage) -> bool\n"
        "    def vanish(self) -> None\n"
        "```\n"
    )
    checker = Checker()
    for block in read_blocks(text):
        for decl in declarations(block):
            checker.run(decl)
    checker.finish()
    joined = "\n".join(checker.problems)
    assert "the code declares" in joined  # fields missing from the list
    assert "parameters ['self', 'message']" in joined
    assert "has no method vanish" in joined
