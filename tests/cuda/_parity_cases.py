"""Subprocess side of tests/cuda/test_parity.py: the same programs on "cpu" and "cuda".

Run as ``python tests/cuda/_parity_cases.py GROUP`` with ``NUMBA_ENABLE_CUDASIM=1`` (set
before Numba is first imported; test_parity.py does it). Each case prints one JSON line
``{"case": ..., "problems": [...], ...}``; an empty ``problems`` list is a pass. GROUP is
``ops`` (every primitive's forward case, every VJP case, random numbers and dropout
masks), ``gpt`` or ``resnet`` (training steps on both devices, then a repeated CUDA run).

The CUDA side runs in compile mode "always", so a CUDA trace runs as a compiled CudaPlan
(device kernels), not on the host interpreter; every CUDA case also reports the counted
fallbacks (``lazyvic.metrics.snapshot()["fallback_ops"]``) and interpreted runs. The CPU side of
the forward, VJP and model cases runs on the NumPy interpreter (``CPU_MODE``), the oracle of
every other test, which gives the compiled CPU plans' bits (tests/test_ops_forward.py,
tests/test_numerics.py): compiled, it cost CI a cold compile of every case's CPU kernels.
Shapes are tiny: under the simulator every CUDA thread is a Python thread.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parents[1]

# Float tolerances of a CPU/CUDA comparison. The float32 transcendentals are polynomial
# approximations on both devices (a few ulp apart at most); reductions and products may
# associate differently on the device.
TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-10, atol=1e-12)}

# Primitives whose forward case must give the same bits on both devices: data movement,
# selection, comparisons, integer results, random numbers, and max-pool (a selection). The
# rest are float arithmetic, compared within TOL. randn's float64 case is "close": on a GPU,
# libdevice's log/cos/sin may round the last bit otherwise than the host's libm.
EXACT_OPS = {
    "buffer",
    "scalar",
    "reshape",
    "permute",
    "expand",
    "slice",
    "pad",
    "neg",
    "abs",
    "relu",
    "maximum",
    "minimum",
    "where",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_not",
    "cast",
    "max",
    "min",
    "argmax",
    "gather",
    "max_pool2d",
    "cat",
    "rand",
    "round_float16",
    "round_bfloat16",
    "scatter_add",
}


def compare(cpu: np.ndarray, gpu: np.ndarray, exact: bool, what: str = "output") -> list:
    """Problems (strings) found comparing a CPU result with the CUDA one."""
    if cpu.shape != gpu.shape or cpu.dtype != gpu.dtype:
        return [f"{what}: CUDA gave {gpu.shape} {gpu.dtype}, CPU {cpu.shape} {cpu.dtype}"]
    if exact or cpu.dtype.kind not in "f":
        if cpu.tobytes() != gpu.tobytes():
            bad = np.flatnonzero(cpu.ravel().view(np.uint8) != gpu.ravel().view(np.uint8))
            return [
                f"{what}: not bit-identical ({bad.size} bytes differ): CPU {cpu.ravel()[:6]}, CUDA {gpu.ravel()[:6]}"
            ]
        return []
    if not np.allclose(gpu, cpu, equal_nan=True, **TOL[cpu.dtype.name]):
        err = float(np.nanmax(np.abs(gpu.astype(np.float64) - cpu)))
        return [f"{what}: max abs difference {err:.3g} beyond {TOL[cpu.dtype.name]}"]
    return []


@contextlib.contextmanager
def on_device(lv, device: str):
    """Make the creation functions the cases call (``lv.tensor``, ``lv.rand``, ...) put their
    result on ``device``: data tensors are built on the CPU and moved with ``.to(device)``
    (the public path), random and filled ones get ``device=``."""
    if device == "cpu":
        yield
        return
    saved = {}

    def moved(make):
        def tensor(*args, **kwargs):
            if kwargs.get("requires_grad") or "device" in kwargs:
                kwargs.setdefault("device", device)
                return make(*args, **kwargs)
            return make(*args, **kwargs).to(device)

        return tensor

    def placed(make):
        def create(*args, **kwargs):
            kwargs.setdefault("device", device)
            return make(*args, **kwargs)

        return create

    for name in ("tensor", "as_tensor"):
        if hasattr(lv, name):
            saved[name] = getattr(lv, name)
            setattr(lv, name, moved(saved[name]))
    for name in ("rand", "randn", "randint", "randperm", "zeros", "ones", "full", "empty", "arange", "eye"):
        saved[name] = getattr(lv, name)
        setattr(lv, name, placed(saved[name]))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(lv, name, fn)


def pending_ops(t) -> set:
    seen, stack, ops = set(), [t._node], set()
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            ops.add(node.op)
            stack.extend(node.inputs)
    return ops


class Counted:
    """The runtime counters a block of work added: fallbacks, interpreted and compiled runs."""

    def __init__(self, lv):
        self.lv = lv

    def __enter__(self):
        self.before = self.lv.metrics.snapshot()
        return self

    def __exit__(self, *exc):
        after = self.lv.metrics.snapshot()
        b = self.before
        self.fallbacks = {
            k: v - b["fallback_ops"].get(k, 0)
            for k, v in after["fallback_ops"].items()
            if v != b["fallback_ops"].get(k, 0)
        }
        self.interpreted = after["interpreted_runs"] - b["interpreted_runs"]
        self.compiled = after["compiled_runs"] - b["compiled_runs"]
        self.h2d = after["host_to_device_bytes"] - b["host_to_device_bytes"]
        self.d2h = after["device_to_host_bytes"] - b["device_to_host_bytes"]

    def record(self) -> dict:
        return {"fallbacks": self.fallbacks, "interpreted_runs": self.interpreted, "compiled_runs": self.compiled}


# ============================================================ group "ops"
# Ops of the table that PRIMITIVE_CASES (tests/test_ops_forward.py) has no case for yet:
# the mixed-precision rounding primitives. Each builds (tensor, None).


def _round_case(opname):
    def build():
        import lazyvic as lv

        # Values that round differently to float16 / bfloat16: ties, subnormals, overflow.
        a = np.array([[1.0009766, -2.5e-8, 65519.0, 70000.0], [3.14159, 1e-40, -0.3333333, 2.0**-14]], dtype=np.float32)
        return lv.Tensor.apply(opname, lv.tensor(a)), None

    return build


EXTRA_FORWARD_CASES = {"round_float16": _round_case("round_float16"), "round_bfloat16": _round_case("round_bfloat16")}

# VJP cases for differentiable primitives no case of tests/test_vjp.py records (same form).


def _round_float16(x):
    return x.apply("round_float16", x * 3.0)


def _round_bfloat16(x):
    return x.apply("round_bfloat16", x.exp())


EXTRA_VJP_CASES = [
    ("round_float16", _round_float16, [np.linspace(-1.0, 1.0, 6).reshape(2, 3)]),
    ("round_bfloat16", _round_bfloat16, [np.linspace(-1.0, 1.0, 6).reshape(2, 3)]),
]


def forward_cases() -> dict:
    from test_ops_forward import PRIMITIVE_CASES

    from lazyvic.ops import OPS

    cases = dict(PRIMITIVE_CASES)
    for name, build in EXTRA_FORWARD_CASES.items():
        if name in OPS and name not in cases:
            cases[name] = build
    return cases


def vjp_cases() -> list:
    from test_vjp import VJP_CASES

    from lazyvic.ops import OPS

    names = {name for name, _, _ in VJP_CASES}
    return list(VJP_CASES) + [c for c in EXTRA_VJP_CASES if c[0] in OPS and c[0] not in names]


def run_forward_case(lv, opname: str, build) -> dict:
    from lazyvic.runtime.config import config

    rec = {"case": f"forward:{opname}", "group": "forward", "op": opname}
    config.compile = CPU_MODE
    t, _ = build()
    rec["cpu_ops"] = sorted(pending_ops(t))
    cpu = t.numpy().copy()
    config.compile = "always"
    with on_device(lv, "cuda"):
        g, _ = build()
    rec["cuda_ops"] = sorted(pending_ops(g))
    problems = []
    if g.device != "cuda":
        problems.append(f"the CUDA case's result is on {g.device!r}")
    with Counted(lv) as c:
        gpu = g.numpy()
    rec.update(c.record())
    exact = opname in EXACT_OPS or (opname == "randn" and cpu.dtype == np.float32)
    rec["exact"] = exact
    problems += compare(cpu, gpu, exact)
    rec["problems"] = problems
    return rec


# The CPU side of the forward, VJP and model cases runs on the NumPy interpreter (the op table's
# reference implementations, the oracle of every other test): compiling ~100 distinct float64
# backward traces for the CPU would cost ~30 s with a cold kernel cache, and test_ops_forward.py,
# test_vjp.py and test_numerics.py already check compiled CPU plans against the interpreter. The
# CUDA side always runs compiled plans.
CPU_MODE = "never"


def run_vjp_case(lv, name: str, fn, arrays, seed: int = 0) -> dict:
    """forward value and every input's gradient of sum(fn(*x) * w), in float64, on both devices."""
    from lazyvic.runtime.config import config

    rec = {"case": f"vjp:{name}", "group": "vjp"}
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    results = {}
    for device in ("cpu", "cuda"):
        config.compile = CPU_MODE if device == "cpu" else "always"
        with on_device(lv, device):
            leaves = [lv.tensor(a, dtype=lv.float64, requires_grad=True, device=device) for a in arrays]
            out = fn(*leaves)
            weight = np.random.default_rng(seed).uniform(0.5, 1.5, size=out.shape)
            (out * lv.tensor(weight, dtype=lv.float64)).sum().backward()
        rec.setdefault(
            "ops", sorted(pending_ops(out) | set().union(*[pending_ops(x.grad) for x in leaves if x.grad is not None]))
        )
        grads = [x.grad for x in leaves]
        if any(gr is None for gr in grads):
            rec["problems"] = [f"{device}: an input got no gradient"]
            return rec
        with Counted(lv) as c:
            lv.sync(out, *grads)
            results[device] = (
                out.numpy().copy(),
                [gr.numpy().copy() for gr in grads],
                out.device,
                [gr.device for gr in grads],
            )
        if device == "cuda":
            rec.update(c.record())
    cpu, gpu = results["cpu"], results["cuda"]
    problems = []
    if gpu[2] != "cuda" or set(gpu[3]) != {"cuda"}:
        problems.append(f"CUDA results on {gpu[2]}, gradients on {gpu[3]}")
    problems += compare(cpu[0], gpu[0], False, "output")
    for k, (a, b) in enumerate(zip(cpu[1], gpu[1])):
        problems += compare(a, b, False, f"gradient of input {k}")
    rec["problems"] = problems
    return rec


def group_ops(lv) -> None:
    from lazyvic.ops import OPS

    cases = forward_cases()
    emit(
        {
            "case": "_ops_table",
            "ops": sorted(OPS),
            "differentiable": sorted(name for name, op in OPS.items() if op.differentiable and op.vjp is not None),
        }
    )
    for opname in sorted(cases):
        guarded(f"forward:{opname}", run_forward_case, lv, opname, cases[opname])
    for name, fn, arrays in vjp_cases():
        guarded(f"vjp:{name}", run_vjp_case, lv, name, fn, arrays)
    for name, build in RANDOM_CASES.items():
        guarded(f"random:{name}", run_random_case, lv, name, build)


# ============================================================ random numbers and dropout
# Each returns the tensors it drew; it runs once per device after the same manual_seed, and
# every result must be bit-identical (the counter-based generator is the same on both).


def random_dropout_masks(lv, device):
    f = lv.functional
    lv.manual_seed(2024)
    x = lv.ones(5, 9, device=device)
    first = f.dropout(x, 0.3)
    second = f.dropout(x, 0.3)  # the generator's offset moved on by the same amount
    layer = lv.nn.Dropout(0.5).train()
    return [first, second, first != 0.0, layer(lv.ones(3, 4, 6, device=device) * 2.0)]


def random_sources(lv, device):
    lv.manual_seed(7)
    return [
        lv.rand(4, 7, device=device),
        lv.randn(3, 5, device=device),
        lv.randint(0, 10, (6,), device=device),
        lv.randperm(9, device=device),
        lv.rand(2, 3, dtype=lv.float64, device=device),
        lv.rand_like(lv.zeros(2, 2, device=device)),
    ]


RANDOM_CASES = {"dropout_masks": random_dropout_masks, "sources": random_sources}


def run_random_case(lv, name: str, build) -> dict:
    from lazyvic.runtime.config import config

    config.compile = "always"
    rec = {"case": f"random:{name}", "group": "random"}
    values, devices = {}, {}
    for device in ("cpu", "cuda"):
        with Counted(lv) as c:
            outs = build(lv, device)
            lv.sync(*outs)
            values[device] = [t.numpy().copy() for t in outs]
            devices[device] = sorted({t.device for t in outs})
        if device == "cuda":
            rec.update(c.record())
    problems = [] if devices["cuda"] == ["cuda"] else [f"CUDA results on {devices['cuda']}"]
    for k, (a, b) in enumerate(zip(values["cpu"], values["cuda"])):
        problems += compare(a, b, True, f"output {k}")
    rec["problems"] = problems
    rec["kept"] = [int(values["cuda"][2].sum()), int(values["cuda"][2].size)] if name == "dropout_masks" else None
    return rec


# ============================================================ groups "gpt" and "resnet"
# Training steps of the same seeded model on both devices: the CPU's on the interpreter
# (CPU_MODE), the CUDA's compiled ("always").

MODEL_TOL = dict(rtol=1e-4, atol=2e-5)  # float32, after a few optimizer steps


def gpt_run(lv, device: str, steps: int) -> tuple:
    """Per step: (loss, {name: grad}, {name: value of the state_dict}, devices), and the
    runtime counters of the steps (model set-up excluded)."""
    from lazyvic.models.tiny_gpt import TinyGPT

    lv.manual_seed(0)
    model = TinyGPT(vocab_size=11, block_size=4, n_layer=1, n_head=2, d_model=8, dropout=0.1).to(device)
    model.train()
    opt = lv.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    rng = np.random.default_rng(0)
    out = []
    with Counted(lv) as counted:
        for _ in range(steps):
            x = lv.tensor(rng.integers(0, 11, (2, 4)), device=device)
            y = lv.tensor(rng.integers(0, 11, (2, 4)), device=device)
            _, loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(_step_record(model, loss))
    return out, counted


def resnet_run(lv, device: str, steps: int) -> tuple:
    """ResNet-18 at width 1 on 4x4 images, batch 2, BatchNorm in train mode, SGD with momentum."""
    from lazyvic.models.resnet import resnet18

    lv.manual_seed(0)
    model = resnet18(num_classes=3, width=1, small_input=True).to(device)
    model.train()
    opt = lv.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    rng = np.random.default_rng(0)
    out = []
    with Counted(lv) as counted:
        for _ in range(steps):
            x = lv.tensor(rng.standard_normal((2, 3, 4, 4)).astype(np.float32), device=device)
            y = lv.tensor(rng.integers(0, 3, (2,)), device=device)
            loss = lv.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(_step_record(model, loss))
    return out, counted


def _step_record(model, loss) -> tuple:
    value = loss.item()  # the sync point: forward, backward and the update run as one plan
    devices = {t.device for t in [loss, *model.parameters(), *model.buffers()]}
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    state = {n: t.numpy().copy() for n, t in model.state_dict().items()}
    return value, grads, state, sorted(devices)


def compare_runs(cpu: list, gpu: list, exact: bool = False) -> tuple:
    """Problems, and the largest differences of losses, gradients and parameters."""
    problems, worst = [], {"loss": 0.0, "grad": 0.0, "state": 0.0}
    for step, (c, g) in enumerate(zip(cpu, gpu)):
        if g[3] != ["cuda"] and not exact:
            problems.append(f"step {step}: CUDA model and loss on {g[3]}")
        worst["loss"] = max(worst["loss"], abs(c[0] - g[0]))
        if exact and c[0] != g[0]:
            problems.append(f"step {step}: loss {g[0]!r} != {c[0]!r}")
        elif not np.isclose(g[0], c[0], **MODEL_TOL):
            problems.append(f"step {step}: loss CUDA {g[0]} CPU {c[0]}")
        for kind, k in (("grad", 1), ("state", 2)):
            for name, a in c[k].items():
                b = g[k][name]
                if a.dtype.kind == "f":
                    worst[kind] = max(worst[kind], float(np.abs(a.astype(np.float64) - b).max(initial=0.0)))
                if exact:
                    if a.tobytes() != b.tobytes():
                        problems.append(f"step {step}: {kind} {name}: other bits")
                elif a.shape != b.shape or not np.allclose(b, a, **MODEL_TOL):
                    problems.append(f"step {step}: {kind} {name} differs (max {np.abs(a - b).max():.3g})")
    return problems, worst


def run_model(lv, name: str, run, steps: int, repeat_steps: int) -> list:
    """CPU vs CUDA over ``steps`` steps, then a repeated seeded CUDA run of ``repeat_steps``
    steps that must give the same bits as the first."""
    from lazyvic.runtime.config import config

    config.compile = CPU_MODE
    recs = []
    t0 = time.perf_counter()
    cpu, _ = run(lv, "cpu", steps)
    t1 = time.perf_counter()
    config.compile = "always"
    gpu, c = run(lv, "cuda", steps)
    t2 = time.perf_counter()
    problems, worst = compare_runs(cpu, gpu)
    recs.append(
        {
            "case": f"model:{name}",
            "group": "model",
            "problems": problems,
            "max_abs_diff": worst,
            "losses": {"cpu": [r[0] for r in cpu], "cuda": [r[0] for r in gpu]},
            "cpu_seconds": round(t1 - t0, 3),
            "cuda_seconds": round(t2 - t1, 3),
            "host_to_device_bytes": c.h2d,
            "device_to_host_bytes": c.d2h,
            **c.record(),
        }
    )
    t2 = time.perf_counter()
    again, _ = run(lv, "cuda", repeat_steps)
    problems, _ = compare_runs(gpu[:repeat_steps], again, exact=True)
    recs.append(
        {
            "case": f"determinism:{name}",
            "group": "determinism",
            "problems": problems,
            "steps": repeat_steps,
            "cuda_seconds": round(time.perf_counter() - t2, 3),
        }
    )
    return recs


def group_model(lv, name: str) -> None:
    run, steps, repeat = {"gpt": (gpt_run, 2, 1), "resnet": (resnet_run, 2, 1)}[name]
    t0 = time.perf_counter()
    try:
        recs = run_model(lv, name, run, steps, repeat)
    except Exception:  # noqa: BLE001 - reported to the parent test
        recs = [{"case": f"model:{name}", "error": traceback.format_exc()}]
    recs[0]["seconds"] = round(time.perf_counter() - t0, 3)
    for rec in recs:
        emit(rec)


# ============================================================ driver


def emit(rec: dict) -> None:
    print(json.dumps(rec), flush=True)


# Numba's simulator swaps the ``cuda`` global of a device function's module while it iterates
# that module's globals, in every simulated thread (numba/cuda/simulator/kernelapi.py,
# swapped_cuda_module): with threads switching every 10 us it once raised "dictionary changed
# size during iteration" inside a device function (a run of 5,700 tests, the fmod case). A case
# that fails so is run once more; any other error, or the same one twice, is reported.
SIMULATOR_RACE = "dictionary changed size during iteration"


def guarded(name: str, run, *args) -> None:
    """Emit ``run(*args)``'s record, or the traceback it raised, with the seconds it took."""
    t0 = time.perf_counter()
    for attempt in (0, 1):
        try:
            rec = run(*args)
            break
        except Exception as e:  # noqa: BLE001 - reported to the parent test
            rec = {"case": name, "error": traceback.format_exc()}
            if attempt or SIMULATOR_RACE not in str(e):
                break
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    emit(rec)


def main(group: str) -> None:
    sys.path.insert(0, str(TESTS))
    # The simulator's barriers poll their threads: switch between them often.
    sys.setswitchinterval(1e-5)
    import lazyvic as lv

    emit({"case": "_probe", "simulated": lv.cuda.is_simulated(), "available": lv.cuda.is_available()})
    t0 = time.perf_counter()
    if group == "ops":
        group_ops(lv)
    else:
        group_model(lv, group)
    emit({"case": "_done", "seconds": round(time.perf_counter() - t0, 3)})


if __name__ == "__main__":
    main(sys.argv[1])
