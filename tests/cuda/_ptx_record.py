"""Subprocess side of tests/cuda/test_ptx.py: record the CUDA kernels that lazyvic launches,
then compile each one to PTX with numba-cuda (NVVM), as a GPU would.

The CUDA simulator runs kernels as Python: it never types them in numba-cuda's CUDA target,
lowers them through NVVM or links libdevice. This script does that check without a GPU.

- ``python _ptx_record.py GROUP`` (with ``NUMBA_ENABLE_CUDASIM=1``, see _simulator.py):
  runs a group of existing CUDA cases in compile mode "always" while recording every kernel
  launch (the simulator's ``FakeCUDAKernel.__call__``): the kernel's Python function (module,
  qualname, source file, closure values of a factory's kernel) and its argument types. Prints
  the cases' own JSON lines, then ``{"case": "_kernels", "kernels": [...]}`` (deduplicated).
  GROUP: ``ops`` (every forward and VJP case, random numbers: tests/cuda/_parity_cases.py),
  ``gpt``, ``resnet`` (the CUDA side of _parity_cases' two training steps), ``codegen``
  (tests/cuda/test_codegen_cuda.py) or ``amp`` (tests/cuda/test_amp_cuda.py).
- ``python _ptx_record.py compile KERNELS.json CC [SHARD SHARDS]`` (NOT under the simulator,
  CC such as ``8.0``): first a trivial kernel (the ``_probe`` line says whether this
  interpreter can compile PTX at all), then each recorded kernel (of the shard) with
  ``numba.cuda.compile_ptx`` for that compute capability: one JSON line per kernel,
  ``{"case": "kernel:N", "ok": ..., "error": ...}``, and a ``_done`` line.
- ``python _ptx_record.py probe CC``: the probe alone.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent

CCS = ((8, 0), (9, 0))  # Ampere (A100) and Hopper (H100)


def emit(rec: dict) -> None:
    print(json.dumps(rec), flush=True)


# ============================================================ recording (under the simulator)


def _arg_type(arg) -> dict:
    """The Numba type a launch argument would have on a GPU, as plain data."""
    import numpy as np

    if isinstance(arg, bool | np.bool_):
        return {"scalar": "bool"}
    if isinstance(arg, np.generic):
        return {"scalar": arg.dtype.name}
    if isinstance(arg, int):
        return {"scalar": "int64"}
    if isinstance(arg, float):
        return {"scalar": "float64"}
    if hasattr(arg, "dtype") and hasattr(arg, "ndim") and hasattr(arg, "shape"):  # NumPy or device array
        c = arg.is_c_contiguous() if hasattr(arg, "is_c_contiguous") else arg.flags["C_CONTIGUOUS"]
        f = arg.is_f_contiguous() if hasattr(arg, "is_f_contiguous") else arg.flags["F_CONTIGUOUS"]
        return {"array": np.dtype(arg.dtype).name, "ndim": int(arg.ndim), "layout": "C" if c else "F" if f else "A"}
    return {"other": type(arg).__module__ + "." + type(arg).__qualname__}


def _closure(fn) -> dict:
    """A factory's kernel: the values it closes over (dtypes by name), so that the compiling
    process can call the factory again."""
    import numpy as np

    out = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, np.dtype):
            out[name] = {"dtype": value.name}
        elif isinstance(value, bool | int | float | str):
            out[name] = value
        else:
            out[name] = {"type": type(value).__name__}
    return out


def install_recorder(kinds: dict) -> dict:
    """Patch the simulator's kernel launch (and lowering.cuda.loader.load_kernel, for the
    generated kernels' kind); returns the dict that fills with ``key -> record``."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    from lazyvic.lowering.cuda import loader

    seen: dict = {}
    launch = FakeCUDAKernel.__call__

    def recorded(self, *args):
        if not self._device:
            fn = self.fn
            rec = {
                "module": fn.__module__,
                "qualname": fn.__qualname__,
                "file": fn.__code__.co_filename,
                "closure": _closure(fn) if "<locals>" in fn.__qualname__ else {},
                "args": [_arg_type(a) for a in args],
            }
            generated = fn.__module__.startswith("lazyvic_cuda_kernels.")  # see loader.load_kernel
            rec["kind"] = kinds.get(fn.__name__, "generated") if generated else "library"
            key = json.dumps([rec["module"], rec["qualname"], rec["file"], rec["closure"], rec["args"]])
            if key in seen:
                seen[key]["launches"] += 1
            else:
                seen[key] = dict(rec, launches=1)
        return launch(self, *args)

    FakeCUDAKernel.__call__ = recorded
    load = loader.load_kernel

    def load_kernel(ks, cache_dir, stats):
        kinds[ks.name] = ks.kind
        return load(ks, cache_dir, stats)

    loader.load_kernel = load_kernel  # the backend looks it up in the module at each compile
    return seen


def run_group(lv, group: str) -> None:
    """The existing cases of ``group``; their own JSON lines go to stdout (the parent ignores
    them but their errors: a case that fails early launches fewer kernels)."""
    if group == "ops":
        import _parity_cases as cases

        cases.group_ops(lv)
    elif group in ("gpt", "resnet"):  # the CUDA side of the parity steps only: the same kernels
        import _parity_cases as cases

        from lazyvic.runtime.config import config

        config.compile = "always"
        run = cases.gpt_run if group == "gpt" else cases.resnet_run
        try:
            run(lv, "cuda", 2)  # the second step differs (optimizer state): its own kernels
            emit({"case": f"model:{group}"})
        except Exception:  # noqa: BLE001 - reported to the parent test
            emit({"case": f"model:{group}", "error": traceback.format_exc()})
    elif group == "codegen":
        codegen_cases(lv)
    elif group == "amp":
        import test_amp_cuda

        from lazyvic.runtime.config import config

        config.compile = "always"
        try:
            problems = test_amp_cuda.check_rounding_bits(lv)
            emit({"case": "amp:rounding_bits", "problems": problems})
        except Exception:  # noqa: BLE001 - reported to the parent test
            emit({"case": "amp:rounding_bits", "error": traceback.format_exc()})
    else:
        raise SystemExit(
            f"unknown group {group!r}; usage: _ptx_record.py GROUP | compile KERNELS.json CC | probe CC (CC: 8.0)"
        )


def codegen_cases(lv) -> None:
    """test_codegen_cuda's cases, each trace run once on the device (its CPU plans, second
    runs and other launch sizes launch no other kernel), then its checks as they are."""
    import test_codegen_cuda as cases

    from lazyvic.runtime.executor import backend
    from lazyvic.trace.cut import cut

    for name in cases.CASES:
        try:
            outs, _ = getattr(cases, name)(lv)
            for trace_outs in [] if outs is None else outs if isinstance(outs[0], list) else [outs]:
                trace, inputs, scalars, _ = cut([t._node for t in trace_outs])
                backend("cuda").compile(trace).run(inputs, scalars, to_host=True)
            emit({"case": f"codegen:{name}"})
        except Exception:  # noqa: BLE001 - reported to the parent test
            emit({"case": f"codegen:{name}", "error": traceback.format_exc()})
    for name in cases.CHECKS:
        try:
            emit({"case": f"codegen:{name}", "problems": getattr(cases, name)(lv)})
        except Exception:  # noqa: BLE001 - reported to the parent test
            emit({"case": f"codegen:{name}", "error": traceback.format_exc()})


def record(group: str) -> None:
    """Run ``group`` under the simulator and print the kernels it launched (see the module)."""
    sys.path[:0] = [str(HERE), str(TESTS)]
    sys.setswitchinterval(1e-5)  # the simulator's barriers poll their threads
    import lazyvic as lv
    from lazyvic.lowering.cuda import target

    # Fewer simulated threads: launch sizes change no result and no kernel source, only the
    # simulator's time (lowering/cuda/target.py's "Launch sizes").
    target.SIMULATOR_THREADS, target.SIMULATOR_MAX_BLOCKS = 8, 1
    # The tiled product, as a GPU without CuPy runs it (the simulator's default is the product
    # without barriers, kernel_lib.matmul_rows_kernel, which no GPU runs).
    target.SIMULATOR_MATMUL_TILE = 4
    kinds: dict = {}
    seen = install_recorder(kinds)
    emit({"case": "_probe", "simulated": lv.cuda.is_simulated()})
    t0 = time.perf_counter()
    run_group(lv, group)
    emit({"case": "_kernels", "kernels": list(seen.values()), "seconds": round(time.perf_counter() - t0, 1)})


# ============================================================ compiling (numba-cuda with NVVM)


def _factory_kernel(rec: dict):
    """The GPU's dispatcher of a factory-made kernel: the factory called as the CUDA target calls
    it on a GPU (the simulator's smaller tile replaced by the GPU's)."""
    import numpy as np

    from lazyvic.lowering.cuda import kernel_lib, target

    where = f"{rec['module']}:{rec['qualname']}"
    if where == "lazyvic.lowering.cuda.kernel_lib:matmul_kernel.<locals>.matmul_tiled":
        return kernel_lib.matmul_kernel(target.MATMUL_TILE, np.dtype(rec["closure"]["dtype"]["dtype"]))
    raise LookupError(f"no known factory for {where} (add it to _ptx_record._factory_kernel)")


_modules: dict = {}


def dispatcher(rec: dict):
    """The real numba-cuda dispatcher of a recorded kernel."""
    if rec["module"].startswith("lazyvic_cuda_kernels."):  # a generated kernel, loaded as load_kernel does
        module = _modules.get(rec["file"])
        if module is None:
            spec = importlib.util.spec_from_file_location(rec["module"], rec["file"])
            module = importlib.util.module_from_spec(spec)
            sys.modules[rec["module"]] = module
            spec.loader.exec_module(module)
            _modules[rec["file"]] = module
        return getattr(module, rec["qualname"])
    if "<locals>" in rec["qualname"]:
        return _factory_kernel(rec)
    module = importlib.import_module(rec["module"])
    obj = module
    for part in rec["qualname"].split("."):
        obj = getattr(obj, part)
    return obj


def numba_signature(args: list) -> tuple:
    import numpy as np
    from numba import from_dtype, types

    out = []
    for a in args:
        if "array" in a:
            out.append(types.Array(from_dtype(np.dtype(a["array"])), a["ndim"], a["layout"]))
        elif a.get("scalar") == "bool":
            out.append(types.boolean)
        elif "scalar" in a:
            out.append(from_dtype(np.dtype(a["scalar"])))
        else:
            raise TypeError(f"launch argument of type {a['other']}: no Numba type recorded")
    return tuple(out)


def gpu_key(rec: dict) -> str:
    """What the GPU compiles: a factory's kernel by its GPU parameters (not the simulator's
    tile), every other kernel by its function; and the argument types."""
    closure = {k: v for k, v in rec["closure"].items() if isinstance(v, dict) and "dtype" in v}
    return json.dumps([rec["module"], rec["qualname"], rec["file"], closure, rec["args"]])


def without_a_driver(cc: tuple) -> None:
    """Let numba-cuda compile the device functions a kernel calls without a GPU.

    Typing a call to a ``@cuda.jit(device=True)`` function compiles it for the current
    device's compute capability (``numba.cuda.dispatcher.get_current_device()``), which needs
    the CUDA driver; here "the current device" is one of capability ``cc``. ``compile_ptx``
    itself takes ``cc`` as an argument.
    """
    from numba.cuda import dispatcher

    class Device:
        compute_capability = tuple(cc)

    dispatcher.get_current_device = Device


def probe(cc: tuple) -> dict:
    """Can this interpreter compile a kernel that calls a device function to PTX (numba-cuda
    and NVVM present)?"""
    try:
        import math

        import numba
        import numba_cuda  # noqa: F401 - lazyvic's cuda extra; numba's own CUDA target is deprecated
        from numba import cuda, types

        without_a_driver(cc)

        @cuda.jit(device=True)
        def plus_exp(x):
            return x + math.exp(x)

        def trivial(out, x):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = plus_exp(x[i])

        arr = types.Array(types.float32, 1, "C")
        cuda.compile_ptx(trivial, (arr, arr), device=False, cc=cc)
        version = getattr(sys.modules.get("numba_cuda"), "__version__", None)
        return {"case": "_probe", "ok": True, "numba": numba.__version__, "numba_cuda": version}
    except Exception as e:  # noqa: BLE001 - the parent skips with this reason
        return {"case": "_probe", "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}


def compile_all(path: str, cc: tuple, shard: int = 0, shards: int = 1) -> None:
    """One JSON line per recorded kernel (those ``n`` with ``n % shards == shard``): compiled
    to PTX for ``cc`` or not (and why)."""
    from numba import cuda

    sys.path[:0] = [str(HERE), str(TESTS)]
    rec = probe(cc)
    emit(rec)
    if not rec["ok"]:
        return
    kernels = json.loads(Path(path).read_text())
    t0 = time.perf_counter()
    for n, kernel in enumerate(kernels):
        if n % shards != shard:
            continue
        out = {"case": f"kernel:{n}", "kernel": n, "cc": list(cc)}
        t1 = time.perf_counter()
        try:
            fn = dispatcher(kernel).py_func
            sig = numba_signature(kernel["args"])
            cuda.compile_ptx(fn, sig, device=False, cc=cc)
            out["ok"] = True
        except Exception as e:  # noqa: BLE001 - reported to the parent test
            out["ok"] = False
            out["error"] = _plain(f"{type(e).__name__}: {e}")[:4000]
            out["traceback"] = traceback.format_exc()[-3000:]
        out["seconds"] = round(time.perf_counter() - t1, 2)
        emit(out)
    emit({"case": "_done", "seconds": round(time.perf_counter() - t0, 1)})


def _plain(text: str) -> str:
    """Numba's error message without its terminal colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _cc(text: str) -> tuple:
    major, minor = text.split(".")
    return int(major), int(minor)


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        compile_all(sys.argv[2], _cc(sys.argv[3]), *map(int, sys.argv[4:6]))
    elif sys.argv[1] == "probe":
        emit(probe(_cc(sys.argv[2])))
    else:
        record(sys.argv[1])
