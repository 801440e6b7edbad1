"""The package's shape, read from its source: imports go one way (no cycle, also through
imports inside functions or under TYPE_CHECKING) and down ARCHITECTURE.md's layer table,
which lists every module, nothing but the server imports the app,
the benchmarking code stays out of the gateway's import graph, and a module longer than
MAX_LINES says at its top why."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "edgegw"
MAX_LINES = 450


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str], typing: bool = True) -> set[str]:
    """Every edgegw module `name` imports, wherever the import statement stands (under
    `if TYPE_CHECKING:` too, unless not `typing`)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skipped: set[int] = set()
    if not typing:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            # `from edgegw.local import serve` imports the module edgegw.local.serve.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("edgegw"):
                found.add(target)
    return found


def _graph(typing: bool = True) -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {
        name: _imports(name, path, known, typing) - {"edgegw"} for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_only_the_server_imports_the_app() -> None:
    importers = {m for m, deps in _graph().items() if "edgegw.app" in deps}
    assert importers <= {"edgegw.server"}


def test_bench_code_is_outside_the_gateway() -> None:
    """Only the CLI (lazily, for `edgegw bench` and `edgegw demo`) reaches edgegw.bench."""
    graph = _graph()
    for module, deps in graph.items():
        if module.startswith("edgegw.bench") or module == "edgegw.__main__":
            continue
        assert not any(d.startswith("edgegw.bench") for d in deps), module
    # ... and `edgegw serve` does not import it at all.
    main = ast.parse((PACKAGE / "__main__.py").read_text())
    top_level = [n for n in main.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any(
        isinstance(n, ast.ImportFrom) and (n.module or "").startswith("edgegw.bench")
        for n in top_level
    )


def test_routes_get_the_gateway_context_not_the_app() -> None:
    for module, deps in _graph().items():
        if module.startswith("edgegw.routes"):
            assert "edgegw.server" not in deps and "edgegw.app" not in deps, module


def test_long_modules_say_why() -> None:
    """A module over MAX_LINES says at its top why it is one piece ("Longer than ...")."""
    unexplained = []
    for path in _modules().values():
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_LINES and "Longer than" not in (ast.get_docstring(ast.parse(text)) or ""):
            unexplained.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
    assert unexplained == []


# -- the layer table of ARCHITECTURE.md, enforced ---------------------------------------------

ARCHITECTURE = PACKAGE.parent / "ARCHITECTURE.md"


def _layer_table() -> list[tuple[str, list[str]]]:
    """(layer, module prefixes) in ARCHITECTURE.md's order: each backticked `x.py`, `dir/`
    or `edgegw.name` in a row's modules column."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Layers") :]
    section = section[: section.index("\n## ", 1)]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "---") or set(cells[0]) <= {"-"}:
            continue
        prefixes = []
        for token in re.findall(r"`([^`]+)`", cells[1]):
            if token.startswith("edgegw."):
                prefixes.append(token)
            elif token.endswith(".py"):
                prefixes.append("edgegw." + token[:-3].replace("/", "."))
            elif token.endswith("/"):
                prefixes.append("edgegw." + token[:-1].replace("/", ".") + ".")
        rows.append((cells[0], prefixes))
    return rows


def _layer_of(module: str, table: list[tuple[str, list[str]]]) -> int | None:
    """The index of the layer that lists `module`, the most specific entry winning (a
    file listed apart from its folder); a package counts as its folder."""
    best: tuple[int, int] | None = None  # (specificity, layer)
    for i, (_, prefixes) in enumerate(table):
        for prefix in prefixes:
            exact = module == prefix or module + "." == prefix
            if exact or (prefix.endswith(".") and module.startswith(prefix)):
                rank = len(prefix) + (1000 if exact and not prefix.endswith(".") else 0)
                if best is None or rank > best[0]:
                    best = (rank, i)
    return None if best is None else best[1]


def test_every_module_is_in_the_layer_table() -> None:
    table = _layer_table()
    assert [name for name, _ in table][:3] == ["core", "errors", "http"]
    missing = [m for m in _graph() if m != "edgegw" and _layer_of(m, table) is None]
    assert missing == []


def test_imports_go_up_the_layer_table() -> None:
    """A module imports only from its own layer and the layers above it in ARCHITECTURE.md.
    Imports under `if TYPE_CHECKING:` are names for annotations, not dependencies at run
    time: they count for cycles (above), not here."""
    table = _layer_table()
    wrong = []
    for module, deps in _graph(typing=False).items():
        here = _layer_of(module, table)
        if here is None:
            continue
        for dep in deps:
            there = _layer_of(dep, table)
            if there is not None and there > here:
                wrong.append(f"{module} ({table[here][0]}) imports {dep} ({table[there][0]})")
    assert sorted(wrong) == []


def test_the_layer_checker_reads_the_table() -> None:
    table = [("a", ["edgegw.x."]), ("b", ["edgegw.x.y", "edgegw.z"])]
    assert _layer_of("edgegw.x.w", table) == 0
    assert _layer_of("edgegw.x.y", table) == 1
    assert _layer_of("edgegw.x", table) == 0
    assert _layer_of("edgegw.q", table) is None


FEATURES = ("local", "models", "telemetry", "auth", "mcp", "routing", "guardrails")
# What a feature may use of another: telemetry's recorder, which every feature reports to.
SHARED = {"edgegw.telemetry.recording"}


def test_no_feature_imports_another_features_code() -> None:
    """Features are joined by the routes (edgegw.routes), never by each other."""
    crossing = []
    for module, deps in _graph(typing=False).items():
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in FEATURES:
            continue
        for dep in deps - SHARED:
            theirs = dep.split(".")
            if len(theirs) > 1 and theirs[1] in FEATURES and theirs[1] != parts[1]:
                crossing.append(f"{module} imports {dep}")
    assert crossing == []
