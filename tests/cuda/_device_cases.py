"""Subprocess side of tests/cuda/test_device.py: the "cuda" device API under the simulator.

Run as ``python tests/cuda/_device_cases.py device`` with ``NUMBA_ENABLE_CUDASIM=1`` (see
_simulator.py). Each ``check_*`` function is plain assert-based code; the driver prints one
JSON line per check (``{"case": name}`` when it passed, with ``"error"`` when it raised).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np


def _counters(lv) -> dict:
    snap = lv.metrics.snapshot()
    keys = (
        "host_to_device_copies",
        "host_to_device_bytes",
        "device_to_host_copies",
        "device_to_host_bytes",
        "interpreted_runs",
        "compiled_runs",
        "plans_compiled",
        "traces",
    )
    return {k: snap[k] for k in keys}


class Moved:
    """What a block of work added to the transfer and run counters."""

    def __init__(self, lv):
        self.lv = lv

    def __enter__(self):
        self.before = _counters(self.lv)
        return self

    def __exit__(self, *exc):
        after = _counters(self.lv)
        self.delta = {k: after[k] - self.before[k] for k in after}

    def __getitem__(self, key):
        return self.delta[key]

    def copies(self) -> tuple:
        d = self.delta
        return (
            d["host_to_device_copies"],
            d["host_to_device_bytes"],
            d["device_to_host_copies"],
            d["device_to_host_bytes"],
        )


def _raises(lv, fn, *words):
    """Call ``fn``; it must raise DeviceError whose message holds every one of ``words``."""
    try:
        fn()
    except lv.errors.DeviceError as e:
        for w in words:
            assert w in str(e), f"{w!r} not in the DeviceError message: {e}"
        return str(e)
    raise AssertionError(f"no DeviceError (expected one naming {words})")


# ------------------------------------------------------------------ the checks


def check_cuda_module(lv):
    assert lv.cuda.is_available() is True
    assert lv.cuda.device_count() == 1
    on_gpu = os.environ.get("LAZYVIC_TEST_GPU") == "1"  # see _simulator.py
    assert lv.cuda.is_simulated() is not on_gpu
    assert ("simulator" in lv.cuda.get_device_name()) is not on_gpu
    lv.cuda.synchronize()
    lv.cuda.synchronize(0)


def check_moves_and_exact_byte_counts(lv):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = lv.tensor(a)
    with Moved(lv) as m:
        y = x.to("cuda")
    assert m.copies() == (1, 24, 0, 0), m.delta
    assert y.device == "cuda" and y.is_cuda and not x.is_cuda and x.device == "cpu"
    assert y.shape == (2, 3) and y.dtype == lv.float32 and not y.is_lazy
    with Moved(lv) as m:
        z = y.cpu()
    assert m.copies() == (0, 0, 1, 24), m.delta
    assert z.device == "cpu" and np.array_equal(z.numpy(), a)
    with Moved(lv) as m:
        got = y.numpy()
    assert m.copies() == (0, 0, 1, 24) and np.array_equal(got, a), m.delta
    i = lv.tensor(np.arange(5, dtype=np.int64))
    with Moved(lv) as m:
        ic = i.cuda()
        assert np.array_equal(ic.numpy(), np.arange(5))
    assert m.copies() == (1, 40, 1, 40), m.delta
    with Moved(lv) as m:  # no move, no copy
        assert y.to("cuda") is y and y.cuda() is y and x.to("cpu") is x and x.cpu() is x
        assert y.to("cuda:0") is y and y.to(device="cuda") is y
    assert m.copies() == (0, 0, 0, 0), m.delta
    with Moved(lv) as m:
        c = lv.tensor(a, device="cuda")  # the copy goes straight to the device
    assert m.copies() == (1, 24, 0, 0) and c.device == "cuda", m.delta


def check_to_forms(lv):
    a = np.array([[1.5, -2.0], [0.25, 3.0]], dtype=np.float32)
    x = lv.tensor(a)
    y = x.to("cuda", lv.float64)
    assert y.device == "cuda" and y.dtype == lv.float64 and np.array_equal(y.numpy(), a.astype(np.float64))
    w = x.to(device="cuda", dtype=lv.int32)
    assert w.device == "cuda" and w.dtype == lv.int32 and np.array_equal(w.numpy(), a.astype(np.int32))
    other = lv.zeros(1, dtype=lv.float64, device="cuda")
    o = x.to(other)  # its device and dtype
    assert o.device == "cuda" and o.dtype == lv.float64
    back = y.to(x)
    assert back.device == "cpu" and back.dtype == lv.float32 and np.array_equal(back.numpy(), a)
    c = y.to("cuda", copy=True)
    assert c is not y and c.device == "cuda" and np.array_equal(c.numpy(), y.numpy())

    class TorchLikeDevice:  # torch.device("cuda", 0): .type and .index
        type, index = "cuda", 0

    assert x.to(TorchLikeDevice()).device == "cuda"
    assert x.cuda(0).device == "cuda"
    _raises(lv, lambda: x.to("cuda:1"), "cuda:1")
    _raises(lv, lambda: x.to(device="tpu"), "tpu")
    _raises(lv, lambda: lv.zeros(2, device="cuda:3"), "cuda:3")


def check_pending_source_is_computed_first(lv):
    from lazyvic.runtime.config import config

    config.compile = "always"  # a compiled plan: its own copies are the output's only
    x = lv.tensor(np.arange(4, dtype=np.float32))
    p = x * 2.0 + 1.0
    assert p.is_lazy
    with Moved(lv) as m:
        q = p.to("cuda")
    assert not p.is_lazy and m["traces"] == 1 and m.copies() == (1, 16, 0, 0), m.delta
    assert np.array_equal(q.numpy(), np.arange(4) * 2.0 + 1.0)
    r = (q * 3.0).sum()  # a pending CUDA tensor moved to the CPU: synced on the device, then copied
    with Moved(lv) as m:
        s = r.cpu()
    assert not r.is_lazy and s.device == "cpu" and s.item() == 48.0
    assert m.copies() == (0, 0, 1, 4), m.delta


def check_creation_functions(lv):
    lv.manual_seed(3)
    cpu = [
        lv.tensor([[1, 2], [3, 4]]),
        lv.zeros(2, 3),
        lv.ones(3, dtype=lv.int32),
        lv.full((2, 2), 7.5),
        lv.empty(2),
        lv.rand(3, 4),
        lv.randn(2, 5),
        lv.randint(0, 9, (7,)),
        lv.randperm(6),
        lv.arange(1, 10, 2),
        lv.arange(0.0, 1.0, 0.25),
        lv.eye(3, 2),
    ]
    lv.manual_seed(3)
    d = "cuda"
    gpu = [
        lv.tensor([[1, 2], [3, 4]], device=d),
        lv.zeros(2, 3, device=d),
        lv.ones(3, dtype=lv.int32, device=d),
        lv.full((2, 2), 7.5, device=d),
        lv.empty(2, device=d),
        lv.rand(3, 4, device=d),
        lv.randn(2, 5, device=d),
        lv.randint(0, 9, (7,), device=d),
        lv.randperm(6, device=d),
        lv.arange(1, 10, 2, device=d),
        lv.arange(0.0, 1.0, 0.25, device=d),
        lv.eye(3, 2, device=d),
    ]
    for k, (c, g) in enumerate(zip(cpu, gpu)):
        assert g.device == "cuda", (k, g.device)
        assert g.dtype == c.dtype and g.shape == c.shape, (k, g.dtype, c.dtype, g.shape, c.shape)
        if k != 4:  # empty: any value
            assert c.numpy().tobytes() == g.numpy().tobytes(), (k, c.numpy(), g.numpy())
    x = lv.ones(2, 3, device=d)
    for t in (
        lv.zeros_like(x),
        lv.ones_like(x),
        lv.full_like(x, 2.0),
        lv.rand_like(x),
        lv.randn_like(x),
        x.zeros_like(),
        x.ones_like(),
        x.new_zeros(4),
        x.new_ones(1, 2),
        x.new_full((3,), 1.0),
        x.new_tensor([1.0, 2.0]),
    ):
        assert t.device == "cuda", t.shape
    assert lv.zeros_like(x, device="cpu").device == "cpu"
    assert lv.ones(2, requires_grad=True, device=d).requires_grad
    assert float(lv.full_like(x, 2.0).sum().item()) == 12.0


def check_zero_d_item_and_repr(lv):
    s = lv.tensor(3.5).cuda()
    assert s.shape == () and s.device == "cuda"
    with Moved(lv) as m:
        v = s.item()
    assert v == 3.5 and isinstance(v, float) and m.copies() == (0, 0, 1, 4), m.delta
    n = lv.tensor(np.arange(6, dtype=np.int64), device="cuda").sum()  # a pending 0-d result
    assert n.device == "cuda" and n.item() == 15 and isinstance(n.item(), int)
    assert float(s) == 3.5 and int(n) == 15 and bool(s) is True and s.tolist() == 3.5
    assert np.asarray(lv.tensor([1.0, 2.0], device="cuda")).tolist() == [1.0, 2.0]
    r = repr(lv.tensor([1.0, 2.0], device="cuda"))
    assert r == "tensor([1., 2.], device='cuda:0')", r
    r = repr(lv.tensor([1.0], dtype=lv.float64, device="cuda", requires_grad=True))
    assert r == "tensor([1.], dtype=lazyvic.float64, device='cuda:0', requires_grad=True)", r
    assert str(s) == "tensor(3.5, device='cuda:0')", str(s)
    assert "device" not in repr(lv.tensor([1.0]))


def check_autograd_through_to(lv):
    a = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    x = lv.tensor(a, requires_grad=True)  # CPU leaf, computed on the device
    y = x.to("cuda")
    assert y.requires_grad and not y.is_leaf and y.grad_fn == "to_device"
    (y * y * 0.5 + y.exp()).sum().backward()
    assert x.grad is not None and x.grad.device == "cpu"
    assert np.allclose(x.grad.numpy(), a + np.exp(a), rtol=1e-5), x.grad.numpy()
    w = lv.tensor(a, requires_grad=True, device="cuda")  # CUDA leaf, computed on the CPU
    assert w.is_leaf and w.device == "cuda"
    (w.cpu() * lv.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert w.grad.device == "cuda" and np.array_equal(w.grad.numpy(), [1.0, 2.0, 3.0])
    u = lv.tensor(a, requires_grad=True, device="cuda")  # there and back
    (u.cpu().cuda() * 2.0).sum().backward()
    assert u.grad.device == "cuda" and np.array_equal(u.grad.numpy(), [2.0, 2.0, 2.0])
    with lv.no_grad():
        assert not x.to("cuda").requires_grad


def check_device_error_names_the_op(lv):
    c = lv.tensor(np.ones((2, 3), np.float32))
    g = lv.ones(2, 3, device="cuda")
    _raises(lv, lambda: c + g, "add", "cpu", "cuda")
    _raises(lv, lambda: g * c, "mul", "cpu", "cuda")
    _raises(lv, lambda: c @ lv.ones(3, 2, device="cuda"), "matmul", "cpu", "cuda")
    _raises(lv, lambda: lv.where(lv.tensor([True, False, True]), g, c), "where")
    _raises(lv, lambda: lv.cat([lv.tensor(np.ones((2, 3), np.float32)), g]), "cpu", "cuda")
    _raises(lv, lambda: g.gather(1, lv.tensor([[0], [1]])), "gather")
    _raises(lv, lambda: lv.functional.linear(g, lv.tensor(np.ones((4, 3), np.float32))), "matmul", "cpu", "cuda")


def check_python_scalars_join_any_device(lv):
    g = lv.tensor(np.arange(3, dtype=np.float32), device="cuda")
    k = lv.zeros(3) + 1.0  # Python numbers only: no device yet
    assert k.is_lazy
    out = (g + k) * lv.full((3,), 2.0)
    assert out.device == "cuda" and np.array_equal(out.numpy(), (np.arange(3) + 1.0) * 2.0)
    assert np.array_equal(k.numpy(), np.ones(3, np.float32)) and k.device == "cpu"
    assert (g + [1.0, 2.0, 3.0]).device == "cuda"  # list data joins the tensor's device


def check_array_data_joins_the_device(lv):
    """NumPy arrays and lists as indices, masks and operands of a CUDA tensor go to the device
    (no DeviceError); CUDA index tensors may be negative (wrapped on the device)."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = lv.tensor(a, device="cuda")
    mask = a % 3 == 0
    outs = {
        "list index": (g[[2, 0, -1]], a[[2, 0, -1]]),
        "array index": (g[:, np.array([-1, 0])], a[:, [-1, 0]]),
        "cuda index": (g[lv.tensor([-1, 1], device="cuda")], a[[-1, 1]]),
        "masked_fill": (g.masked_fill(mask, -1.0), np.where(mask, -1.0, a)),
        "where": (lv.where(mask, g, 0.5), np.where(mask, a, 0.5)),
        "int mask": (lv.where(mask.astype(np.int64), 2.0, g), np.where(mask, 2.0, a)),
        "list operand": (g * [1.0, 2.0, 3.0, 4.0], a * [1.0, 2.0, 3.0, 4.0]),
    }
    for what, (t, want) in outs.items():
        assert t.device == "cuda", what
        assert np.array_equal(t.numpy(), want.astype(np.float32)), (what, t.numpy(), want)


def _net(lv):
    nn = lv.nn
    # Batch norm after the ReLU: a bias right before it would get a zero gradient (rounding
    # noise), which Adam would blow up into steps that differ between devices.
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.BatchNorm1d(6), nn.Linear(6, 3))


def _train(lv, model, opt, device, steps=2):
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        x = lv.tensor(rng.standard_normal((5, 4)).astype(np.float32), device=device)
        y = lv.tensor(rng.integers(0, 3, (5,)), device=device)
        loss = lv.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def check_module_to_keeps_parameters_and_optimizer(lv):
    from lazyvic.runtime.config import config

    config.compile = "always"
    lv.manual_seed(0)
    ref = _net(lv)
    lv.manual_seed(0)
    model = _net(lv)
    params = list(model.parameters())
    opt = lv.optim.Adam(model.parameters(), lr=0.05)  # made before the move
    ref_losses = _train(lv, ref, lv.optim.Adam(ref.parameters(), lr=0.05), "cpu")
    with Moved(lv) as m:
        assert model.to("cuda") is model
    n_bytes = sum(t.numel() * t.dtype.itemsize for t in [*model.parameters(), *model.buffers()])
    assert m["host_to_device_bytes"] == n_bytes, (m.delta, n_bytes)
    assert all(a is b for a, b in zip(params, model.parameters()))
    assert all(p.device == "cuda" for p in model.parameters())
    assert all(b.device == "cuda" for b in model.buffers()) and len(list(model.buffers())) >= 2
    losses = _train(lv, model, opt, "cuda")
    assert np.allclose(losses, ref_losses, rtol=1e-5), (losses, ref_losses)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.device == "cuda" and p.grad.device == "cuda", name
        assert np.allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-5), name
        st = opt.state[id(p)] if id(p) in opt.state else opt.state[p]
        assert st["exp_avg"].device == "cuda" and st["exp_avg_sq"].device == "cuda", name
    for (name, b), r in zip(model.named_buffers(), ref.buffers()):
        assert b.device == "cuda" and np.allclose(b.numpy(), r.numpy(), rtol=1e-4, atol=1e-6), name
    model.cpu()  # back, with the gradients
    assert all(a is b for a, b in zip(params, model.parameters()))
    assert all(p.device == "cpu" and p.grad.device == "cpu" for p in model.parameters())
    assert model.cuda() is model and all(p.device == "cuda" for p in params)


def check_sgd_momentum_state_on_device(lv):
    from lazyvic.runtime.config import config

    config.compile = "always"
    runs = {}
    for device in ("cpu", "cuda"):
        lv.manual_seed(1)
        model = _net(lv).to(device)
        opt = lv.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        runs[device] = _train(lv, model, opt, device, steps=3)
    assert np.allclose(runs["cuda"], runs["cpu"], rtol=1e-5), runs
    for p in model.parameters():
        st = opt.state[id(p)] if id(p) in opt.state else opt.state[p]
        assert st["momentum_buffer"].device == "cuda"


def check_state_dict_cuda_to_cpu_through_save(lv):
    lv.manual_seed(2)
    model = _net(lv).cuda()
    _train(lv, model, lv.optim.SGD(model.parameters(), lr=0.1), "cuda", steps=1)
    state = model.state_dict()
    assert all(t.device == "cuda" for t in state.values())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "net.lazyvic"
        lv.save(state, path)
        loaded = lv.load(path)
        lv.save(model, Path(tmp) / "module.lazyvic")
        lv.manual_seed(9)
        again = lv.load(Path(tmp) / "module.lazyvic", model=_net(lv))
    cpu_model = _net(lv)
    cpu_model.load_state_dict(loaded)
    for (name, t), c, a in zip(state.items(), cpu_model.state_dict().values(), again.state_dict().values()):
        assert c.device == "cpu" and a.device == "cpu", name
        assert t.numpy().tobytes() == c.numpy().tobytes() == a.numpy().tobytes(), name


def check_map_location_loads_onto_the_device(lv):
    """lazyvic.load and the PyTorch checkpoint reader place tensors with map_location."""
    from lazyvic.interop import torch as torch_io

    lv.manual_seed(3)
    model = _net(lv)
    with tempfile.TemporaryDirectory() as tmp:
        lv.save(model.state_dict(), Path(tmp) / "state.lazyvic")
        gpt = lv.models.TinyGPT(vocab_size=11, d_model=8, n_layer=1, n_head=2, block_size=4)
        lv.save(gpt, Path(tmp) / "module.lazyvic")  # rebuilt from its config
        torch_io.save(model.state_dict(), Path(tmp) / "state.pt")
        state = lv.load(Path(tmp) / "state.lazyvic", map_location="cuda")
        module = lv.load(Path(tmp) / "module.lazyvic", map_location="cuda")
        from_torch = torch_io.load(Path(tmp) / "state.pt", map_location="cuda")
        mapped = torch_io.load(Path(tmp) / "state.pt", map_location={"cpu": "cuda:0"})
    for name, t in model.state_dict().items():
        for got in (state[name], from_torch[name], mapped[name]):
            assert got.device == "cuda", name
            assert got.numpy().tobytes() == t.numpy().tobytes(), name
    rebuilt = module.state_dict()
    for name, t in gpt.state_dict().items():
        assert rebuilt[name].device == "cuda" and rebuilt[name].numpy().tobytes() == t.numpy().tobytes(), name


def check_load_state_dict_into_cuda_model(lv):
    lv.manual_seed(4)
    src = _net(lv)
    model = _net(lv).cuda()
    params = list(model.parameters())
    model.load_state_dict(src.state_dict())
    assert all(a is b for a, b in zip(params, model.parameters()))
    for (name, t), s in zip(model.state_dict().items(), src.state_dict().values()):
        assert t.device == "cuda" and t.numpy().tobytes() == s.numpy().tobytes(), name
    model.load_state_dict({k: v.numpy() for k, v in src.state_dict().items()})  # NumPy values
    assert all(t.device == "cuda" for t in model.state_dict().values())
    opt = lv.optim.AdamW(model.parameters(), lr=0.01)
    _train(lv, model, opt, "cuda", steps=1)
    opt2 = lv.optim.AdamW(model.parameters(), lr=0.01)
    opt2.load_state_dict(opt.state_dict())  # optimizer state copied into the parameters' device
    for p in model.parameters():
        st = opt2.state[id(p)] if id(p) in opt2.state else opt2.state[p]
        assert st["exp_avg"].device == "cuda" and st["step"] == 1
    _train(lv, model, opt2, "cuda", steps=1)


def check_compile_cuda_model(lv):
    from lazyvic.runtime.config import config

    config.compile = "always"
    lv.manual_seed(5)
    model = _net(lv).cuda().eval()
    fast = lv.compile(model)
    rng = np.random.default_rng(3)
    xs = [lv.tensor(rng.standard_normal((5, 4)).astype(np.float32), device="cuda") for _ in range(3)]
    with lv.no_grad():
        want = [model(x).numpy() for x in xs]
        got = [fast(x) for x in xs]
    assert fast.recordings == 1 and fast.replays == 2, (fast.recordings, fast.replays, fast.fallbacks)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.device == "cuda" and g.shape == (5, 3), (k, g.device)
        assert np.array_equal(g.numpy(), w), (k, g.numpy(), w)  # each call reads its own input
    assert not np.array_equal(want[0], want[1])
    w = lv.tensor(rng.standard_normal((4,)).astype(np.float32), device="cuda")
    scaled = lv.compile(lambda x: (x * w).sum(1))  # a CUDA tensor closed over: captured by value
    with lv.no_grad():
        for x in xs:
            y = scaled(x)
            assert y.device == "cuda" and np.allclose(y.numpy(), (x.numpy() * w.numpy()).sum(1), rtol=1e-5)
    assert scaled.recordings == 1 and scaled.replays == 2, (scaled.recordings, scaled.replays)
    mixed = lv.tensor(rng.standard_normal((5, 4)).astype(np.float32))  # a CPU input to a CUDA model
    with lv.no_grad():
        _raises(lv, lambda: fast(mixed), "cpu", "cuda")


def check_hot_mode_interprets_then_compiles(lv):
    from lazyvic.runtime.config import config

    config.compile = "hot"
    x = lv.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), device="cuda")
    outs = []
    for k in range(2):
        with Moved(lv) as m:
            y = ((x * 1.5).tanh() + x.sum(1, keepdim=True)).numpy()
        outs.append(y)
        if k == 0:  # first sight: the NumPy interpreter on host copies, counted
            assert m["interpreted_runs"] == 1 and m["compiled_runs"] == 0, m.delta
            assert m["device_to_host_bytes"] >= 48 and m["host_to_device_bytes"] >= 48, m.delta
        else:  # it recurs: compiled for the device
            assert m["plans_compiled"] == 1 and m["compiled_runs"] == 1 and m["interpreted_runs"] == 0, m.delta
    assert np.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)


def check_deterministic_mode_compiles_at_first_sight(lv):
    from lazyvic.runtime.config import config

    config.compile = "hot"
    lv.use_deterministic_algorithms(True)
    try:
        x = lv.tensor(np.arange(10, dtype=np.float32), device="cuda")
        with Moved(lv) as m:
            v = (x * 0.5).exp().sum().item()
        assert m["interpreted_runs"] == 0 and m["compiled_runs"] == 1, m.delta
        assert abs(v - float(np.exp(np.arange(10) * 0.5).sum())) < 1e-2
    finally:
        lv.use_deterministic_algorithms(False)


CHECKS = [name for name in list(globals()) if name.startswith("check_")]


def main() -> None:
    sys.setswitchinterval(1e-5)  # the simulator's barriers poll their threads
    import lazyvic as lv
    from lazyvic.runtime.config import config

    print(
        json.dumps({"case": "_probe", "simulated": lv.cuda.is_simulated(), "available": lv.cuda.is_available()}),
        flush=True,
    )
    for name in CHECKS:
        config.compile = "hot"
        rec = {"case": name}
        t0 = time.perf_counter()
        try:
            globals()[name](lv)
        except Exception:  # noqa: BLE001 - reported to the parent test
            rec["error"] = traceback.format_exc()
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        print(json.dumps(rec), flush=True)
    print(json.dumps({"case": "_done"}), flush=True)


if __name__ == "__main__":
    main()
