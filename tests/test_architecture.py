"""The layering rules of docs/architecture.md, checked on the source itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SANS_IO_FORBIDDEN = {"asyncio", "socket", "threading", "time", "random", "selectors", "subprocess"}
# the file store's job is file I/O; it may take a lock so fsync can run in a worker thread
ALLOWED = {("engine/filestore.py", "threading")}
LAYER_ORDER = ["protocol", "engine", "cluster", "mirror"]


def _module_imports(path: Path) -> set[str]:
    """Every module ``path`` imports, dotted in full (``from cluster import ops`` names
    ``cluster.ops`` too: it may be a submodule)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _imports(path: Path) -> set[str]:
    """The top-level packages ``path`` imports."""
    return {name.split(".")[0] for name in _module_imports(path)}


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", ["protocol", "engine"])
def test_sans_io_packages_import_no_io_or_clocks(package: str) -> None:
    offenders = []
    for path in _files(package):
        rel = str(path.relative_to(ROOT))
        for name in _imports(path) & SANS_IO_FORBIDDEN:
            if (rel, name) not in ALLOWED:
                offenders.append(f"{rel} imports {name}")
    assert offenders == []


@pytest.mark.parametrize("index", range(len(LAYER_ORDER)))
def test_nothing_imports_upward(index: int) -> None:
    package = LAYER_ORDER[index]
    upper = set(LAYER_ORDER[index + 1 :]) | {"jepsen_like", "spark", "bench", "tests"}
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _files(package)
        for name in _imports(path) & upper
    ]
    assert offenders == []


def test_only_the_raft_adapter_knows_pysyncobj() -> None:
    # one module to check when the pinned pysyncobj changes: cluster/raft/adapter.py imports it
    # and is the only one to name its name-mangled internals. Tests are not scanned: they compare
    # jetraft's copies of pysyncobj's constants and interfaces with pysyncobj itself.
    adapter = ROOT / "cluster" / "raft" / "adapter.py"
    offenders = [
        str(path.relative_to(ROOT))
        for package in [*LAYER_ORDER, "jepsen_like", "spark", "bench"]
        for path in _files(package)
        if path != adapter and ("pysyncobj" in _imports(path) or "_SyncObj__" in path.read_text())
    ]
    assert offenders == []
    assert "pysyncobj" in _imports(adapter)


# spark/ replays logs through the sans-I/O layers; it reads run directories, never talks to a
# cluster or the chaos harness, and needs no sockets or event loop of its own (Spark has them)
SPARK_MAY_IMPORT = {"protocol", "engine", "spark"}
# ...with one module of the harness: the run-directory contract, data that imports nothing, so
# the names the harness writes and spark/ reads are defined once (spark/session.py ships it to
# the executors). Any other jepsen_like module (asyncio clients, nemeses, the checker) is out.
SPARK_MAY_IMPORT_MODULES = {"jepsen_like.contract"}
PROJECT_PACKAGES = {*LAYER_ORDER, "jepsen_like", "spark", "bench", "tests"}
SPARK_FORBIDDEN = {"asyncio", "socket", "selectors", "uvloop", "nats"}
# import statements the rule must let through, and ones it must catch (so it can fail)
SPARK_IMPORTS_ALLOWED = (
    "from jepsen_like.contract import OK",
    "from jepsen_like import contract",
    "import jepsen_like.contract",
    "import engine.stream",
)
SPARK_IMPORTS_REFUSED = (
    "import jepsen_like",
    "from jepsen_like import checker",
    "from jepsen_like import contract, history",
    "from jepsen_like import *",
    "from jepsen_like.checker import check_run",
    "import jepsen_like.contract, jepsen_like.db",
    "import jepsen_like.contract.x",
    "from cluster import ops",
    "import asyncio",
)


def test_spark_imports_only_the_sans_io_layers() -> None:
    forbidden = (PROJECT_PACKAGES - SPARK_MAY_IMPORT) | SPARK_FORBIDDEN

    def offenders(tree: ast.AST) -> list[str]:
        # each imported module dotted in full (`from jepsen_like import contract` loads
        # jepsen_like.contract), so an allowed module passes though its package is forbidden
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module in SPARK_MAY_IMPORT_MODULES:
                    modules = [node.module]
                else:
                    modules = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            found += [
                name
                for name in modules
                if name not in SPARK_MAY_IMPORT_MODULES and name.split(".")[0] in forbidden
            ]
        return found

    for source in SPARK_IMPORTS_ALLOWED:
        assert offenders(ast.parse(source)) == [], source
    for source in SPARK_IMPORTS_REFUSED:
        assert offenders(ast.parse(source)) != [], source
    bad = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _files("spark")
        for name in offenders(ast.parse(path.read_text(), filename=str(path)))
    ]
    assert bad == []


def test_the_chaos_harness_does_not_import_spark() -> None:
    # the layers below are covered by test_nothing_imports_upward; `jetraft analyze` registers
    # through an entry point, and pyspark is an optional dependency the harness must not need
    offenders = [str(p.relative_to(ROOT)) for p in _files("jepsen_like") if "spark" in _imports(p)]
    assert offenders == []


def _is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_benchmarks_do_not_import_the_tests() -> None:
    # bench/ is shipped; the process helpers it shares with the tests live in cluster.ops
    offenders = [str(p.relative_to(ROOT)) for p in _files("bench") if "tests" in _imports(p)]
    assert offenders == []


OPS_DIR = ROOT / "cluster" / "ops"
OPS_DISPATCHER = ROOT / "cluster" / "cli.py"


def test_only_the_cli_reaches_the_operator_side() -> None:
    # cluster.ops drives nodes from outside, as a user would; the node must not depend on it
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _files("cluster")
        if OPS_DIR not in path.parents and path != OPS_DISPATCHER
        for name in sorted(_module_imports(path))
        if _is_within(name, "cluster.ops")
    ]
    assert offenders == []


def test_the_operator_side_does_not_import_the_node() -> None:
    # nodes are separate processes: cluster.ops reaches them by process, wire and HTTP only
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _files("cluster/ops")
        for name in sorted(_module_imports(path))
        if (_is_within(name, "cluster") and not _is_within(name, "cluster.ops"))
        or name.split(".")[0] in {"protocol", "engine", "mirror", "tests"}
    ]
    assert offenders == []


# --- the module graph: no circles, no private names across modules ------------------------------
GRAPH_PACKAGES = ["protocol", "engine", "cluster", "mirror", "jepsen_like", "spark", "bench"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _project_modules() -> dict[str, Path]:
    return {_module_name(p): p for package in GRAPH_PACKAGES for p in _files(package)}


def _from_imports(path: Path) -> list[ast.ImportFrom]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0]


def _module_graph() -> dict[str, set[str]]:
    """Which project modules each one imports (``TYPE_CHECKING`` imports included: a circle
    drawn only for the type checker is still a circle in the design)."""
    modules = _project_modules()
    return {
        name: {t for t in _module_imports(path) if t in modules and t != name}
        for name, path in modules.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_circle_finder_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles() -> None:
    assert _circles(_module_graph()) == []


def test_no_private_names_imported_across_modules() -> None:
    modules = _project_modules()
    offenders = [
        f"{name} imports {node.module}.{alias.name}"
        for name, path in modules.items()
        for node in _from_imports(path)
        if node.module in modules
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert offenders == []
