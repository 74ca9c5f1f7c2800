"""The import graph of ``lazyvic/`` points one way (DESIGN.md, "Imports point one way").

The graph is built from the source with ``ast`` (every ``import``, also those inside functions
and under ``TYPE_CHECKING``), so a lazy in-function import cannot hide a back-edge. Two rules:

- no import circle among lazyvic's modules; the one exception is a module importing its own
  package's ``__init__`` (``lazyvic.ops.conv`` reading ``lazyvic.ops``), which only re-exports;
- no import goes up the layer order below; modules of one layer may import each other
  (without a circle); only the command-line entry points, the library's users, import the root
  package ``lazyvic``. A new module must be given a layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lazyvic"

# Bottom to top. A module belongs to the first prefix that matches it (most specific first).
LAYERS = [
    ("base", ["lazyvic.errors", "lazyvic.dtypes"]),
    ("modes", ["lazyvic.modes", "lazyvic.shapes", "lazyvic.settings", "lazyvic.size"]),
    ("ops", ["lazyvic.ops"]),
    ("trace", ["lazyvic.trace"]),
    ("lowering", ["lazyvic.lowering"]),
    ("runtime", ["lazyvic.runtime"]),
    (
        "front end",
        [
            "lazyvic.sync",
            "lazyvic.recording",
            "lazyvic.autograd",
            "lazyvic.transfer",
            "lazyvic.generator",
            "lazyvic.indexing",
            "lazyvic.reductions",
            "lazyvic.pointwise",
            "lazyvic.pointwise_composites",
            "lazyvic.statistics",
            "lazyvic.counting",
            "lazyvic.splitting",
            "lazyvic.products_extra",
            "lazyvic.ordering",
            "lazyvic.products",
            "lazyvic.linalg",
            "lazyvic.shaping",
            "lazyvic.selection",
            "lazyvic.tensor",
            "lazyvic.creation",
            "lazyvic.random",
            "lazyvic.functions",
            "lazyvic.legacy",
            "lazyvic.windows",
            "lazyvic.sparse",
        ],
    ),
    (
        "library",
        [
            "lazyvic.amp",
            "lazyvic.functional",
            "lazyvic.nn",
            "lazyvic.optim",
            "lazyvic.utils",
            "lazyvic.data",
            "lazyvic.capture",
            "lazyvic.models",
            "lazyvic.special",
            "lazyvic.testing",
            "lazyvic.distributions",
            "lazyvic.distributed.process_group",
            "lazyvic.distributed.collectives",
            "lazyvic.distributed.nccl",
            "lazyvic.distributed.rooted",
        ],
    ),
    (
        "tools",
        [
            "lazyvic.interop",
            "lazyvic.tools",
            "lazyvic.onnx",
            "lazyvic.cuda",
            "lazyvic.accelerator",
            "lazyvic.backends",
            "lazyvic.metrics",
            "lazyvic.viz",
            "lazyvic.distributed",  # the package (re-exports the checkpoints) and its checkpoints (format v1)
        ],
    ),
    ("command line", ["lazyvic.cli", "lazyvic.tools.onnx_cli", "lazyvic.distributed.run"]),
]
ROOT = "lazyvic"  # the public API: it re-exports everything; only the command line (its user) imports it


def module_names(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _resolve(name: str, modules) -> str | None:
    """The lazyvic module that ``name`` (a module or a module attribute) lives in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the lazyvic modules it imports (anywhere in its source)."""
    graph = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[: len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                # "from pkg import sub" imports the submodule when there is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                target = _resolve(t, modules) if t.startswith("lazyvic") else None
                if target is not None and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def layer_of(module: str) -> int | None:
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = index, len(p)
    return best


def _own_package(importer: str, target: str) -> bool:
    return importer.startswith(target + ".") and target != ROOT


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), ignoring the edges from a
    module to its own package's ``__init__``."""
    edges = {m: {t for t in ts if not _own_package(m, t)} for m, ts in graph.items()}
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points up the layer order, or into the root package, as text."""
    bad = []
    for importer, targets in sorted(graph.items()):
        if importer == ROOT:
            continue
        for target in sorted(targets):
            if target == ROOT and LAYERS[layer_of(importer)][0] != "command line":
                bad.append(f"{importer} imports the root package lazyvic (import the module that defines the name)")
                continue
            a, b = layer_of(importer), layer_of(target)
            if a is not None and b is not None and b > a:
                bad.append(f"{importer} ({LAYERS[a][0]}) imports {target} ({LAYERS[b][0]}), a higher layer")
    return bad


@pytest.fixture(scope="module")
def graph():
    return import_graph(module_names())


def test_every_module_has_a_layer(graph):
    missing = sorted(m for m in graph if m != ROOT and layer_of(m) is None)
    assert not missing, f"give these modules a layer in tests/test_layers.py LAYERS: {missing}"


def test_no_import_circle(graph):
    found = circles(graph)
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_imports_point_down(graph):
    bad = upward_imports(graph)
    assert not bad, "imports that go up the layer order:\n" + "\n".join(bad)


def test_the_checks_catch_a_back_edge(graph):
    """The op table importing the front end (what the VJPs used to do) fails both checks."""
    g = {m: set(t) for m, t in graph.items()}
    g["lazyvic.ops.conv"].add("lazyvic.tensor")
    assert any("lazyvic.ops.conv (ops) imports lazyvic.tensor (front end)" in b for b in upward_imports(g))
    assert any({"lazyvic.ops.conv", "lazyvic.tensor"} <= set(c) for c in circles(g))
    g = {m: set(t) for m, t in graph.items()}
    g["lazyvic.nn.module"].add(ROOT)
    assert any("lazyvic.nn.module imports the root package" in b for b in upward_imports(g))


def test_in_function_imports_count(tmp_path):
    pkg = tmp_path / "lazyvic"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops" / "__init__.py").write_text("")
    (pkg / "tensor.py").write_text("from lazyvic.ops import table\n")
    (pkg / "ops" / "table.py").write_text("def vjp():\n    from lazyvic.tensor import Tensor\n    return Tensor\n")
    g = import_graph(module_names(pkg))
    assert g["lazyvic.ops.table"] == {"lazyvic.tensor"}
    assert circles(g) == [["lazyvic.ops.table", "lazyvic.tensor"]]
