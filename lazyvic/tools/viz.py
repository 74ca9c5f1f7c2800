"""The visualizer: traces and plans as Graphviz pictures.

:func:`draw` turns pending tensors, a :class:`~lazyvic.trace.cut.Trace`, a compiled
:class:`~lazyvic.lowering.backend.Plan` (CPU or CUDA) or a plan-cache ``PlanEntry`` into a
``graphviz.Digraph``: one node per op (op, shape, dtype, module scope), edges labelled
with shapes, each fused kernel of a plan drawn as a cluster named after the kernel.
``collapse="module"`` draws one box per module scope instead, so a whole training step
fits on a page. :func:`viz_script` runs a script and draws every plan it made;
``LAZYVIC_VIZ=DIR`` does the same at exit for any program.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path

import graphviz

FORMATS = ("svg", "png", "pdf", "dot")

# Fill colours by what a node is; kernels are clusters, library steps are marked apart.
_INPUT = "#cfe2ff"
_PARAM = "#ffe0b2"
_SCALAR = "#eeeeee"
_OUTPUT = "#c8e6c9"
_MATMUL = "#b3c7f7"
_FALLBACK = "#ffb3b3"
_MODULE = "#f3e5f5"
_OPTIM = "#fff9c4"


@dataclass
class _Vertex:
    """One entry as drawn: ``kind`` is input | param | scalar | op."""

    pos: int
    op: str
    attrs: object
    inputs: tuple
    shape: tuple
    dtype: str
    kind: str
    scope: str | None = None
    label: str = ""  # for inputs: "input 0", "param 3", "scalar 1"


def _shape(shape: tuple) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")" if len(shape) != 1 else f"({shape[0]},)"


def _vertices(entries, param_slots) -> list[_Vertex]:
    """One vertex per named entry (``lazyvic.trace.entry.Entry``) of a trace or a plan; a plan's
    entries carry the scope of the trace entry they came from (the graph passes keep it)."""
    out = []
    for i, e in enumerate(entries):
        dtype = e.dtype.name
        if e.op == "buffer":
            kind = "param" if e.slot in param_slots else "input"
            out.append(_Vertex(i, e.op, e.attrs, (), e.shape, dtype, kind, e.scope, f"{kind} {e.slot}"))
        elif e.op == "scalar":
            out.append(_Vertex(i, e.op, e.attrs, (), e.shape, dtype, "scalar", e.scope, f"scalar {e.slot}"))
        else:
            out.append(_Vertex(i, e.op, e.attrs, tuple(e.inputs), e.shape, dtype, "op", e.scope))
    return out


def _resolve(target):
    """-> (vertices, outputs, plan or None, title)."""
    from lazyvic.lowering.backend import Plan
    from lazyvic.runtime.plan_cache import PlanEntry
    from lazyvic.tensor import Tensor
    from lazyvic.trace.cut import Trace, cut

    if isinstance(target, Tensor):
        target = [target]
    if isinstance(target, (list, tuple)) and all(isinstance(t, Tensor) for t in target):
        roots = [t._node for t in target if t._node.pending]
        if not roots:
            raise ValueError(
                "lazyvic.viz.draw: none of the tensors is pending (nothing to draw); "
                "draw them before a sync, or draw a plan from lazyvic.metrics"
            )
        trace = cut(roots)[0]  # builds the trace only: the nodes stay pending
        target = trace
    trace, plan = None, None
    if isinstance(target, PlanEntry):
        trace, plan = target.trace, target.plan
        if trace is None and plan is None:
            raise ValueError("lazyvic.viz.draw: this plan-cache entry has neither a trace nor a plan")
    elif isinstance(target, Trace):
        trace = target
    elif isinstance(target, Plan):
        plan = target
    else:
        raise TypeError(
            f"lazyvic.viz.draw: expected a Tensor, a list of Tensors, a Trace, a Plan or a "
            f"PlanEntry, got {type(target).__name__}"
        )
    if plan is not None:
        params = trace.param_slots if trace is not None else frozenset()
        verts = _vertices(plan.entries, params)
        outputs = tuple(o[1] for o in plan.outputs if o[0] == "buffer")
        return verts, outputs, plan, f"{plan.name}: {len(plan.steps)} steps"
    verts = _vertices(trace.named, trace.param_slots)
    return verts, tuple(trace.outputs), None, f"trace of {len(trace.entries)} ops"


def _step_of(plan) -> dict:
    """Entry position -> the step that writes it."""
    out = {}
    for s in plan.steps:
        for w in s.writes():
            out.setdefault(w, s)
    return out


def draw(
    target,
    path: str | os.PathLike | None = None,
    format: str = "svg",  # noqa: A002
    collapse: str | None = None,
) -> graphviz.Digraph:
    """Draw a trace or a plan as a Graphviz graph.

    Args:
        target: a pending Tensor or a list of them (cut into a trace; nothing runs and
            they stay pending), a ``Trace``, a ``Plan`` or a plan-cache ``PlanEntry``
            (its plan when compiled, else its first trace).
        path: where to render; None draws nothing to disk.
        format: "svg", "png", "pdf" (rendered by Graphviz's ``dot``) or "dot" (the source).
        collapse: None (one node per op) or "module" (one box per module scope).

    Returns:
        The ``graphviz.Digraph``.

    Raises:
        ValueError: unknown ``format`` or ``collapse``, or no pending tensor to draw.
        RuntimeError: rendering needs Graphviz's ``dot`` and it is not installed.
    """
    if format not in FORMATS:
        raise ValueError(f"lazyvic.viz.draw: format must be one of {FORMATS}, got {format!r}")
    if collapse not in (None, "module"):
        raise ValueError(f"lazyvic.viz.draw: collapse must be None or 'module', got {collapse!r}")
    verts, outputs, plan, title = _resolve(target)
    g = graphviz.Digraph(
        "lazyvic",
        graph_attr={"rankdir": "TB", "newrank": "true", "label": title, "labelloc": "t", "fontname": "Helvetica"},
        node_attr={"fontname": "Helvetica", "fontsize": "10"},
        edge_attr={"fontname": "Helvetica", "fontsize": "8"},
    )
    if collapse == "module":
        _draw_modules(g, verts, outputs)
    else:
        _draw_ops(g, verts, outputs, plan)
    if path is not None:
        render(g, path, format)
    return g


def _node_label(v: _Vertex) -> str:
    head = v.label if v.kind != "op" else v.op
    lines = [head, f"{_shape(v.shape)} {v.dtype}"]
    if v.scope:
        lines.append(v.scope)
    return "\n".join(lines)


def _node_attrs(v: _Vertex, is_output: bool) -> dict:
    if v.kind == "input":
        attrs = {"shape": "invhouse", "style": "filled", "fillcolor": _INPUT}
    elif v.kind == "param":
        attrs = {"shape": "box", "style": "filled,rounded", "fillcolor": _PARAM}
    elif v.kind == "scalar":
        attrs = {"shape": "circle", "style": "filled", "fillcolor": _SCALAR, "fontsize": "8"}
    else:
        attrs = {"shape": "ellipse"}
    if is_output:
        attrs.update({"peripheries": "2", "style": "filled", "fillcolor": _OUTPUT})
    return attrs


# Graphs with more entries than this draw scalars inside the label of the ops that read them.
FOLD_SCALARS_ABOVE = 150


def _draw_ops(g: graphviz.Digraph, verts: list, outputs: tuple, plan) -> None:
    out_set = set(outputs)
    cluster_of: dict = {}
    if plan is not None:
        step_of = _step_of(plan)
        for k, grp in enumerate(plan.groups):
            step = step_of.get(grp.root)
            name = getattr(step, "name", f"group {k}")
            kind = type(step).__name__ if step is not None else "group"
            for m in grp.members or (grp.root,):
                cluster_of.setdefault(m, (k, name, kind))
            for r in (grp.root, *grp.extra_roots):
                cluster_of.setdefault(r, (k, name, kind))
    # Large graphs fold scalars into the label of the ops that read them: a scalar node and
    # its edge per use make dot's layout several times slower and the picture no clearer.
    fold = len(verts) > FOLD_SCALARS_ABOVE
    clusters: dict = {}
    for v in verts:
        if fold and v.kind == "scalar":
            continue
        attrs = _node_attrs(v, v.pos in out_set)
        label = _node_label(v)
        if fold and v.kind == "op":
            reads = [verts[i].label for i in v.inputs if verts[i].kind == "scalar"]
            if reads:
                label += "\nreads " + ", ".join(reads)
        if plan is not None and v.kind == "op":
            c = cluster_of.get(v.pos)
            if c is None:
                attrs.update({"style": "dashed"})  # a view (movement op) read by a library step
                label += "\n(view)"
            elif c[2] == "MatmulStep":
                attrs.update({"shape": "box", "style": "filled,bold", "fillcolor": _MATMUL})
                label += "\nBLAS matmul"
            elif c[2] == "ReferenceStep":
                attrs.update({"shape": "box", "style": "filled,bold", "fillcolor": _FALLBACK})
                label += "\nfallback: NumPy reference"
            elif c[2] == "ScatterAddStep":
                attrs.update({"shape": "box", "style": "filled", "fillcolor": _MATMUL})
                label += "\nlibrary scatter_add"
            if c is not None and c[2] == "KernelStep":
                clusters.setdefault(c, []).append((v, label, attrs))
                continue
        g.node(f"n{v.pos}", label, **attrs)
    for (k, name, _), members in sorted(clusters.items(), key=lambda kv: kv[0][0]):
        with g.subgraph(name=f"cluster_{k}") as sub:
            sub.attr(
                label=f"kernel {name}",
                style="rounded,filled",
                fillcolor="#fafafa",
                color="#888888",
                fontname="Helvetica",
                fontsize="10",
            )
            for v, label, attrs in members:
                sub.node(f"n{v.pos}", label, **attrs)
    for v in verts:
        for i in v.inputs:
            src = verts[i]
            if fold and src.kind == "scalar":
                continue
            g.edge(f"n{i}", f"n{v.pos}", label="" if src.kind == "scalar" else _shape(src.shape))


def _draw_modules(g: graphviz.Digraph, verts: list, outputs: tuple) -> None:
    """One box per module scope; inputs, parameters and outputs are counted in the box
    that reads (or writes) them; edges between boxes carry the shapes that cross."""
    top = "(no module)"
    box = {}  # entry position -> box name (scalars: none)
    boxes: dict = {}  # name -> counts
    for v in verts:
        if v.kind == "op":
            name = v.scope or top
            box[v.pos] = name
            b = boxes.setdefault(name, {"ops": 0, "param": 0, "input": 0, "outputs": 0, "by_op": {}})
            b["ops"] += 1
            b["by_op"][v.op] = b["by_op"].get(v.op, 0) + 1
    for v in verts:
        if v.kind == "op":
            for i in v.inputs:
                if verts[i].kind in ("param", "input") and i not in box:
                    box[i] = box[v.pos]
                    boxes[box[v.pos]][verts[i].kind] += 1
    for o in outputs:
        if o in box and verts[o].kind == "op":
            boxes[box[o]]["outputs"] += 1
    ids = {name: f"m{k}" for k, name in enumerate(boxes)}
    for name, b in boxes.items():
        common = sorted(b["by_op"].items(), key=lambda kv: -kv[1])[:4]
        counts = [f"{b['ops']} ops"] + [f"{b[k]} {k}s" for k in ("param", "input") if b[k]]
        if b["outputs"]:
            counts.append(f"{b['outputs']} outputs")
        lines = [name, ", ".join(counts), ", ".join(f"{op} x{n}" for op, n in common)]
        style = "filled,rounded" + (",dashed" if name.endswith("(backward)") else "")
        if b["outputs"]:
            style += ",bold"
        g.node(
            ids[name],
            "\n".join(lines),
            shape="box",
            style=style,
            fillcolor=_OPTIM if name.startswith("optim.") else _MODULE,
        )
    edges: dict = {}
    for v in verts:
        if v.kind != "op":
            continue
        for i in v.inputs:
            if verts[i].kind == "scalar" or box[i] == box[v.pos]:
                continue
            edges.setdefault((ids[box[i]], ids[box[v.pos]]), {})[_shape(verts[i].shape)] = None
    for (a, b), shapes in edges.items():
        names = list(shapes)
        label = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
        g.edge(a, b, label=label)


def render(g: graphviz.Digraph, path: str | os.PathLike, format: str = "svg") -> Path:  # noqa: A002
    """Write ``g`` to ``path`` atomically (a temporary file, then a rename).

    Raises:
        RuntimeError: Graphviz's ``dot`` is not installed (format other than "dot").
    """
    if format not in FORMATS:
        raise ValueError(f"lazyvic.viz: format must be one of {FORMATS}, got {format!r}")
    path = Path(path)
    if format == "dot":
        data = g.source.encode()
    else:
        try:
            data = g.pipe(format=format)
        except graphviz.ExecutableNotFound as e:
            raise RuntimeError(
                "lazyvic.viz: rendering needs Graphviz's `dot` program, which was not found; "
                "install it (apt-get install graphviz, or brew install graphviz), or use "
                "format='dot' to write the source"
            ) from e
        except graphviz.CalledProcessError as e:
            err = (e.stderr or b"").decode(errors="replace").strip().splitlines()
            raise RuntimeError(f"lazyvic.viz: dot failed to render {path.name}: {err[0] if err else e}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


# ---------------------------------------------------------------- whole programs

# Traces larger than this are drawn collapsed by module, with the full graph written as
# DOT source only: dot takes about a minute on a 1-layer TinyGPT step's 800 ops in clusters.
FULL_PICTURE_MAX_OPS = 300


def _entry_name(entry) -> str:
    if entry.plan is not None:
        return entry.plan.name
    return "trace_" + hashlib.sha1(repr(entry.key).encode()).hexdigest()[:12]


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def write_plans(out_dir: str | os.PathLike, format: str = "svg") -> Path:  # noqa: A002
    """Draw every plan in the plan cache into ``out_dir`` and write ``index.md``; returns its path.

    Compiled plans are drawn as plans (kernels as clusters), the others as their traces.
    """
    from lazyvic.runtime.plan_cache import plan_cache

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n, entry in enumerate([e for e in plan_cache.values() if e.trace is not None]):
        name = _entry_name(entry)
        pictures = []
        large = len(entry.trace.entries) > FULL_PICTURE_MAX_OPS
        try:
            if large:
                render(draw(entry), out / f"{name}.dot", "dot")
                pictures.append(f"{name}.dot")
                draw(entry, out / f"{name}.modules.{format}", format, collapse="module")
                pictures.append(f"{name}.modules.{format}")
            else:
                draw(entry, out / f"{name}.{format}", format)
                pictures.append(f"{name}.{format}")
        except RuntimeError as e:  # no `dot`, or dot failed: keep the source, say why
            render(draw(entry), out / f"{name}.dot", "dot")
            why = str(e).splitlines()[0].replace("|", "/")
            pictures = [f"{name}.dot", f"(not rendered: {why})"]
        plan = entry.plan
        kernels = str(len(plan.kernels)) if plan is not None else "not compiled"
        peak = _human_bytes(plan.memory.peak_bytes) if plan is not None and plan.memory is not None else "-"
        links = ", ".join(p if p.startswith("(") else f"[{p}]({p})" for p in pictures)
        rows.append(
            f"| {n} | `{name}` | {len(entry.trace.entries)} | {entry.hits} / {entry.seen} | {kernels} "
            f"| {peak} | {links} |"
        )
    lines = [
        "# lazyvic plans",
        "",
        f"{len(rows)} plan(s) in the plan cache. Hits / runs: plan-cache hits and total runs of the key.",
        "",
        "| # | plan | ops | hits / runs | kernels | planned peak memory | pictures |",
        "|---|------|-----|-------------|---------|---------------------|----------|",
        *rows,
        "",
    ]
    index = out / "index.md"
    tmp = index.with_name(f".index.md.{os.getpid()}.tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, index)
    return index


def viz_script(script: str, script_args: list[str], out_dir: str) -> Path:
    """Run ``script`` as ``__main__`` with ``sys.argv = [script, *script_args]``, then draw
    every plan it left in the plan cache into ``out_dir`` (see :func:`write_plans`).

    Returns the path of ``out_dir/index.md``. A ``sys.exit(0)`` in the script still draws;
    any other exit or exception propagates.
    """
    argv, path0 = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        sys.argv, sys.path[:] = argv, path0
    return write_plans(out_dir)


def _at_exit(out_dir: str) -> None:
    try:
        index = write_plans(out_dir)
        print(f"[lazyvic] LAZYVIC_VIZ: plans drawn, see {index}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - at exit, a report is all we can do
        print(f"[lazyvic] LAZYVIC_VIZ: could not draw the plans: {type(e).__name__}: {e}", file=sys.stderr)


def install_from_env() -> bool:
    """With ``LAZYVIC_VIZ=DIR`` set, draw every plan into DIR when the program exits."""
    out_dir = os.environ.get("LAZYVIC_VIZ")
    if not out_dir:
        return False
    atexit.register(_at_exit, out_dir)
    return True


install_from_env()
