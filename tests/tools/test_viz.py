"""lazyvic.viz: module scopes on nodes, DOT structure of traces and plans, rendering, whole scripts."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import graphviz
import numpy as np
import pytest

import lazyvic
from lazyvic import nn
from lazyvic.models.tiny_gpt import TinyGPT
from lazyvic.runtime import metrics
from lazyvic.runtime.config import config
from lazyvic.runtime.plan_cache import plan_cache
from lazyvic.tools import viz
from lazyvic.trace.cut import cut

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


@pytest.fixture
def own_plan_cache():
    """An empty plan cache for the test (whole-cache tools draw every entry), restored after."""
    saved, last = dict(plan_cache), plan_cache.last
    plan_cache.clear_plans()
    yield plan_cache
    plan_cache.clear_plans()
    plan_cache.update(saved)
    plan_cache.last = last


@pytest.fixture
def compile_always():
    prev = config.compile
    config.compile = "always"
    yield
    config.compile = prev


def _tiny_gpt_step():
    """One pending TinyGPT training step (forward, backward, AdamW); returns the updated parameters."""
    lazyvic.manual_seed(0)
    model = TinyGPT(11, d_model=8, n_layer=1, n_head=2, block_size=4)
    opt = lazyvic.optim.AdamW(model.parameters(), lr=1e-2)
    lazyvic.sync()  # the initial values: the step's trace starts from realized parameters
    idx = lazyvic.tensor(np.array([[1, 2, 3, 4], [5, 6, 7, 8]]))
    _, loss = model(idx, idx)
    loss.backward()
    opt.step()
    return list(model.parameters())


def test_scopes_name_modules_backward_and_optimizer():
    params = _tiny_gpt_step()
    trace = cut([p._node for p in params])[0]
    scopes = set(trace.scopes)
    assert len(trace.scopes) == len(trace.entries)
    for s in (
        "transformer.h.0.attn",
        "transformer.h.0.attn.c_attn",
        "transformer.h.0.mlp.c_fc",
        "lm_head",
        "transformer.h.0.attn (backward)",
        "transformer.h.0.mlp.gelu (backward)",
        "optim.AdamW",
    ):
        assert s in scopes, s
    # Inputs and scalars have no scope; every op does.
    for (op, *_), s in zip(trace.entries, trace.scopes):
        assert (s is None) == (op in ("buffer", "scalar")), (op, s)
    assert trace.scopes.count("optim.AdamW") > 0
    assert lazyvic.trace.scope.current is None  # nothing left entered


def test_module_called_alone_is_named_by_class():
    lin = nn.Linear(3, 2)
    y = lin(lazyvic.ones(4, 3))
    assert y._node.scope == "Linear"
    assert (y + 1)._node.scope is None


def test_scope_of_late_submodules_and_of_strangers():
    stranger = nn.ReLU()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            x = self.fc(x)
            if hasattr(self, "extra"):
                x = self.extra(x)
            return stranger(x) * 2

    net = Net()
    y = net(lazyvic.ones(2, 3))
    assert y._node.scope == "Net" and y._node.inputs[0].scope == "Net.ReLU"
    net.extra = nn.Linear(3, 3)  # added after the names were cached
    z = net(lazyvic.ones(2, 3))
    assert z._node.inputs[0].inputs[0].scope == "extra"


def test_scope_is_not_in_the_key(own_plan_cache):
    class Affine(nn.Module):
        def forward(self, x):
            return x * 2 + 1

    x = lazyvic.tensor(np.arange(3, dtype=np.float32))
    inside, outside = Affine()(x), x * 2 + 1
    t_in, t_out = cut([inside._node])[0], cut([outside._node])[0]
    assert t_in.key == t_out.key
    assert t_in.scopes != t_out.scopes and "Affine" in t_in.scopes
    inside.numpy(), outside.numpy()
    assert len(own_plan_cache) == 1  # one plan, seen twice: no recompile for a new scope


def test_draw_pending_runs_nothing():
    x = lazyvic.tensor(np.ones((2, 3), dtype=np.float32))
    y = (x * 3).exp().sum(1)
    before = metrics.snapshot()["traces"]
    g = viz.draw(y)
    assert isinstance(g, graphviz.Digraph)
    assert metrics.snapshot()["traces"] == before
    assert y._node.pending
    src = g.source
    assert "exp" in src and "(2, 3) float32" in src and "(2,) float32" in src
    assert "input 0" in src and "scalar 0" in src
    assert re.search(r'label="\(2, 3\)"', src)  # an edge labelled with its shape
    np.testing.assert_allclose(y.numpy(), np.full(2, 3 * np.exp(3.0)), rtol=1e-6)


def test_draw_rejects_what_it_cannot_draw():
    with pytest.raises(TypeError, match="expected a Tensor"):
        viz.draw(42)
    with pytest.raises(ValueError, match="none of the tensors is pending"):
        viz.draw(lazyvic.tensor(np.ones(2)))
    with pytest.raises(ValueError, match="format"):
        viz.draw(lazyvic.ones(2) + 1, format="gif")
    with pytest.raises(ValueError, match="collapse"):
        viz.draw(lazyvic.ones(2) + 1, collapse="kernel")


def test_trace_of_tinygpt_step_shows_scopes_params_and_module_boxes():
    params = _tiny_gpt_step()
    src = viz.draw(params).source
    assert "transformer.h.0.attn.c_proj" in src and "optim.AdamW" in src
    assert "param 0" in src and 'fillcolor="#ffe0b2"' in src  # parameters styled apart
    assert "peripheries=2" in src  # outputs
    boxes = viz.draw(params, collapse="module").source
    names = re.findall(r'^\s*m\d+ \[label="([^"\\\n]*)', boxes, re.M)
    assert "transformer.h.0.attn" in names and "transformer.h.0.attn (backward)" in names
    assert "optim.AdamW" in names and len(names) == len(set(names))
    assert re.search(r"m\d+ -> m\d+ \[label=\"\(2, 4, 8\)", boxes)  # module edges carry shapes


def test_plan_draws_kernels_as_clusters(compile_always, own_plan_cache):
    x = lazyvic.tensor(np.ones((2, 3), dtype=np.float32))
    w = nn.Parameter(lazyvic.tensor(np.full((3, 4), 0.5, dtype=np.float32)))
    y = ((x @ w).relu() * 2).sum(1)
    np.testing.assert_allclose(y.numpy(), [12.0, 12.0])
    entry = own_plan_cache.last
    assert entry.plan is not None
    src = viz.draw(entry).source
    clusters = re.findall(r"subgraph cluster_\d+ \{", src)
    assert len(clusters) == len(entry.plan.kernels) >= 1
    for k in entry.plan.kernels:
        assert f"kernel {k.name}" in src
    assert "BLAS matmul" in src and "relu" in src and "(2, 4) float32" in src
    assert "param 1" in src  # w's slot is a parameter slot
    assert viz.draw(entry.plan).source.count("subgraph cluster_") == len(clusters)


def test_plan_of_tinygpt_keeps_scopes(compile_always, own_plan_cache):
    params = _tiny_gpt_step()
    lazyvic.sync()
    entry = own_plan_cache.last
    scopes = [e.scope for e in entry.plan.entries]
    assert "transformer.h.0.attn" in scopes and "optim.AdamW" in scopes
    # Every plan entry names the trace entry it came from, and keeps its scope through the passes
    # (the transposed-matmul rewrite turns a permute of a product into a product).
    trace = entry.trace.named
    for e in entry.plan.entries:
        assert e.origin is not None and e.scope == trace[e.origin].scope
        assert e.op == trace[e.origin].op or (e.op, trace[e.origin].op) == ("matmul", "permute")
    src = viz.draw(entry, collapse="module").source
    assert "transformer.h.0.mlp.c_fc (backward)" in src
    del params


@needs_dot
@pytest.mark.parametrize("fmt,magic", [("svg", b"<svg"), ("png", b"\x89PNG"), ("pdf", b"%PDF")])
def test_render_through_dot(tmp_path, fmt, magic):
    path = tmp_path / f"g.{fmt}"
    g = viz.draw((lazyvic.ones(2, 2) + 1).sum(), path=path, format=fmt)
    data = path.read_bytes()
    assert magic in data[:400]
    assert isinstance(g, graphviz.Digraph)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"g.{fmt}"]  # no temporary left


def test_render_dot_source_and_missing_dot(tmp_path, monkeypatch):
    t = lazyvic.ones(2) * 2
    viz.draw(t, path=tmp_path / "g.dot", format="dot")
    assert (tmp_path / "g.dot").read_text().startswith("digraph")

    def no_dot(*args, **kwargs):
        raise graphviz.ExecutableNotFound(["dot"])

    monkeypatch.setattr(graphviz.Digraph, "pipe", no_dot)
    with pytest.raises(RuntimeError, match="apt-get install graphviz"):
        viz.draw(t, path=tmp_path / "g.svg")
    assert not (tmp_path / "g.svg").exists()


_SCRIPT = """
import sys
import numpy as np
import lazyvic

assert __name__ == "__main__"
open(sys.argv[1], "w").write(" ".join(sys.argv[2:]))
x = lazyvic.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
for _ in range(2):
    print(float((x.exp() * 2).sum()))
"""


def test_viz_script(tmp_path, own_plan_cache):
    script = tmp_path / "prog.py"
    script.write_text(_SCRIPT)
    argv = sys.argv[:]
    index = viz.viz_script(str(script), [str(tmp_path / "args.txt"), "--flag", "7"], str(tmp_path / "out"))
    assert sys.argv == argv
    assert (tmp_path / "args.txt").read_text() == "--flag 7"
    assert index == tmp_path / "out" / "index.md"
    text = index.read_text()
    assert "| 0 |" in text and "1 / 2" in text  # one plan: one hit in two runs
    names = [p.name for p in (tmp_path / "out").iterdir() if p.name != "index.md"]
    assert len(names) == 1 and names[0] in text
    if shutil.which("dot"):
        assert names[0].endswith(".svg")


def test_lazyvic_viz_env_draws_at_exit(tmp_path):
    out = tmp_path / "pics"
    code = textwrap.dedent("""
        import lazyvic
        print(float((lazyvic.ones(3) * 2).sum()))
    """)
    env = dict(os.environ, LAZYVIC_VIZ=str(out))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "6.0" in r.stdout
    assert (out / "index.md").exists(), r.stderr
    assert "| 0 |" in (out / "index.md").read_text()
