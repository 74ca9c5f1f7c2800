"""``lazyvic onnx``: check, run, convert and export ONNX models from the command line.

    lazyvic onnx check MODEL.onnx
    lazyvic onnx run MODEL.onnx [--input NAME=FILE.npy ...] [--random-inputs] [--output OUT.npz]
                     [--compare-ort] [--repeat N]
    lazyvic onnx convert MODEL.onnx OUT.safetensors
    lazyvic onnx export MODULE:FACTORY OUT.onnx --input-shape 1,3,32,32[:DTYPE] [...] [--opset 13]
                        [--dynamic-batch]

The conversion itself is ``lazyvic.onnx.load`` / ``lazyvic.onnx.export``; this module parses
arguments, prints and maps errors to exit codes: 0 success, 1 a failure (missing file, invalid
model, unsupported ops for ``check``, outputs that differ from onnxruntime), 2 usage errors.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


# ------------------------------------------------------------------------------------------ helpers
def _read(path: str):
    """The ModelProto at ``path`` with its external data, or CommandError naming the problem."""
    from lazyvic.errors import LazyvicError
    from lazyvic.interop.onnx import read_model

    try:
        model, _ = read_model(path)
    except LazyvicError as e:
        raise CommandError(str(e)) from None
    return model


def _dims(type_proto) -> str:
    t = type_proto.tensor_type
    if not t.HasField("shape"):
        return "(unknown shape)"
    dims = [d.dim_param if d.dim_param else (str(d.dim_value) if d.HasField("dim_value") else "?") for d in t.shape.dim]
    return "(" + ", ".join(dims) + ")"


def _elem(type_proto) -> str:
    import onnx

    try:
        return onnx.helper.tensor_dtype_to_np_dtype(type_proto.tensor_type.elem_type).name
    except Exception:
        return f"type {type_proto.tensor_type.elem_type}"


def _user_inputs(model) -> list:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _opset(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 0


def _support(model) -> dict:
    """``{op label: [node names]}`` of nodes lazyvic cannot import (empty: all supported)."""
    import onnx

    from lazyvic.interop.onnx import supported_ops

    table, opset, missing = supported_ops(), _opset(model), {}
    for i, node in enumerate(model.graph.node):
        name = node.name or f"#{i}"
        if node.domain not in ("", "ai.onnx"):
            missing.setdefault(f"{node.domain}.{node.op_type}", []).append(name)
            continue
        versions = table.get(node.op_type)
        try:
            since = onnx.defs.get_schema(node.op_type, opset).since_version
        except Exception:
            since = None
        if versions is None or since not in versions:
            label = node.op_type if versions is None else f"{node.op_type} (version {since})"
            missing.setdefault(label, []).append(name)
    return missing


# ------------------------------------------------------------------------------------------ check
def _check(args) -> int:
    model = _read(args.model)
    g = model.graph
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    print(
        f"{args.model}: IR version {model.ir_version}, opsets: {opsets}"
        + (f", producer {model.producer_name} {model.producer_version}".rstrip() if model.producer_name else "")
    )
    print("inputs:")
    for i in _user_inputs(model):
        print(f"  {i.name:24s} {_elem(i.type):8s} {_dims(i.type)}")
    print("outputs:")
    for o in g.output:
        print(f"  {o.name:24s} {_elem(o.type):8s} {_dims(o.type)}")
    n_params = sum(int(np.prod(t.dims)) for t in g.initializer)
    print(f"initializers: {len(g.initializer)} ({n_params:,} values)")
    missing = _support(model)
    bad_types = {label.split(" ")[0] for label in missing}
    hist = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in g.node)
    print(f"ops ({len(g.node)} nodes, {len(hist)} types):")
    for op, k in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {op:28s} {k:5d}  {'NOT supported' if op in bad_types else 'supported'}")
    if missing:
        print(
            "lazyvic cannot import: "
            + "; ".join(
                f"{label}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}" for label, names in missing.items()
            )
        )
        return 1
    print("lazyvic supports every op of this model")
    return 0


# ------------------------------------------------------------------------------------------ run
def _parse_inputs(specs: list, model) -> dict:
    feeds = {}
    names = [i.name for i in _user_inputs(model)]
    for spec in specs or []:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise CommandError(f"--input {spec!r}: expected NAME=FILE.npy")
        if name not in names:
            raise CommandError(f"--input {spec!r}: the model has no input {name!r} (inputs: {', '.join(names)})")
        if not os.path.isfile(file):
            raise CommandError(f"--input {spec!r}: {file}: no such file")
        try:
            feeds[name] = np.load(file, allow_pickle=False)
        except Exception as e:
            raise CommandError(f"--input {spec!r}: {file} is not a .npy file: {type(e).__name__}: {e}") from None
        if not isinstance(feeds[name], np.ndarray):
            raise CommandError(f"--input {spec!r}: {file} holds an archive, not one array (.npy expected)")
    return feeds


def _random_input(info, seed: int) -> np.ndarray:
    import onnx

    t = info.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in t.shape.dim]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 2, shape).astype(dtype)  # indices: 0 and 1 are valid for any table


def _save_npz(path: str, arrays: dict) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _run(args) -> int:
    import lazyvic
    from lazyvic.errors import LazyvicError

    model = _read(args.model)
    feeds = _parse_inputs(args.input, model)
    for i, info in enumerate(_user_inputs(model)):
        if info.name not in feeds:
            if not args.random_inputs:
                raise CommandError(
                    f"{args.model}: input {info.name!r} {_dims(info.type)} {_elem(info.type)} is not "
                    f"given: pass --input {info.name}=FILE.npy (or --random-inputs)"
                )
            feeds[info.name] = _random_input(info, args.seed + i)
    order = [i.name for i in _user_inputs(model)]
    try:
        t0 = time.perf_counter()
        module = lazyvic.onnx.load(model, name=args.model)
        t_load = time.perf_counter() - t0
        run = module if args.no_compile else lazyvic.compile(module)  # inference: replay the recorded plan
        times = []
        with lazyvic.no_grad():
            for _ in range(max(1, args.repeat)):
                t0 = time.perf_counter()
                out = run(*[feeds[n] for n in order])
                outs = out if isinstance(out, tuple) else (out,)
                arrays = [o.numpy() for o in outs]
                times.append(time.perf_counter() - t0)
    except LazyvicError as e:
        raise CommandError(str(e)) from None
    names = [o.name for o in model.graph.output]
    # Run 1 records and interprets the plan; run 2 compiles it (LAZYVIC_COMPILE=hot); later runs are steady.
    steady = f", then median {np.median(times[2:]) * 1e3:.2f} ms over {len(times) - 2} runs" if len(times) > 2 else ""
    print(
        f"{args.model}: import {t_load * 1e3:.1f} ms, first run {times[0] * 1e3:.1f} ms (interpreted)"
        + (f", second {times[1] * 1e3:.1f} ms (compiles)" if len(times) > 1 else "")
        + steady
    )
    for name, a in zip(names, arrays):
        stats = f"min {a.min():.6g} max {a.max():.6g} mean {a.mean():.6g}" if a.size and a.dtype.kind in "fiu" else ""
        print(f"  {name:24s} {a.dtype.name:8s} {a.shape}  {stats}")
    if args.output:
        _save_npz(args.output, dict(zip(names, arrays)))
        print(f"wrote {args.output}")
    if args.compare_ort:
        return _compare_ort(args, model, feeds, names, arrays)
    return 0


def _compare_ort(args, model, feeds, names, arrays) -> int:
    try:
        import onnxruntime as ort
    except ImportError:
        raise CommandError("--compare-ort needs onnxruntime (pip install 'lazyvic[onnx]')") from None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    times = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        ref = sess.run(names, feeds)
        times.append(time.perf_counter() - t0)
    print(f"onnxruntime: median {np.median(times) * 1e3:.2f} ms over {len(times)} runs")
    worst_ok = True
    for name, a, r in zip(names, arrays, ref):
        if a.shape != r.shape:
            print(f"  {name:24s} shape {a.shape} vs onnxruntime {r.shape}: MISMATCH")
            worst_ok = False
            continue
        diff = float(np.max(np.abs(a.astype(np.float64) - r.astype(np.float64)))) if a.size else 0.0
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        ok = diff <= args.atol + args.rtol * scale
        worst_ok &= ok
        print(
            f"  {name:24s} max |lazyvic - onnxruntime| = {diff:.3g} (max |value| {scale:.3g}) "
            f"{'ok' if ok else 'DIFFERS'}"
        )
    return 0 if worst_ok else 1


# ------------------------------------------------------------------------------------------ convert
def _convert(args) -> int:
    import lazyvic
    from lazyvic.errors import LazyvicError

    model = _read(args.model)
    try:
        module = lazyvic.onnx.load(model, name=args.model)
        lazyvic.save(module, args.out)
    except LazyvicError as e:
        raise CommandError(str(e)) from None
    n = sum(p.numel() for p in module.parameters())
    print(
        f"wrote {args.out}: {len(module.state_dict())} tensors, {n:,} parameters "
        f"(rebuild with lazyvic.load({str(args.out)!r}))"
    )
    return 0


# ------------------------------------------------------------------------------------------ export
def _parse_shape(spec: str) -> tuple:
    shape_text, _, dtype = spec.partition(":")
    try:
        shape = tuple(int(d) for d in shape_text.split(","))
    except ValueError:
        raise CommandError(f"--input-shape {spec!r}: expected comma-separated sizes like 1,3,32,32[:float32]") from None
    if not shape or any(d <= 0 for d in shape):
        raise CommandError(f"--input-shape {spec!r}: sizes must be positive integers")
    from lazyvic import dtypes as dt

    dtype = dtype or "float32"
    if dtype not in dt._BY_NAME or dt._BY_NAME[dtype].name != dtype:
        raise CommandError(f"--input-shape {spec!r}: dtype must be one of " + ", ".join(d.name for d in dt.ALL))
    return shape, dt._BY_NAME[dtype].np


def _factory(spec: str):
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CommandError(f"{spec!r}: expected MODULE:FACTORY, e.g. lazyvic.models:resnet18 or my_model:build")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise CommandError(f"{spec!r}: cannot import {module_name!r}: {e}") from None
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise CommandError(f"{spec!r}: {module_name} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise CommandError(f"{spec!r}: {attr} is not callable")
    return fn


def _export(args) -> int:
    import json

    import lazyvic
    from lazyvic.errors import LazyvicError
    from lazyvic.nn.module import Module

    fn = _factory(args.factory)
    kwargs = json.loads(args.kwargs) if args.kwargs else {}
    if not isinstance(kwargs, dict):
        raise CommandError(f"--kwargs {args.kwargs!r}: expected a JSON object")
    shapes = [_parse_shape(s) for s in args.input_shape]
    lazyvic.manual_seed(args.seed)
    model = fn(**kwargs)
    if not isinstance(model, Module):
        raise CommandError(f"{args.factory} returned a {type(model).__name__}, not an nn.Module")
    if args.weights:
        try:
            _load_weights(model, args.weights)
        except LazyvicError as e:
            raise CommandError(f"--weights {args.weights}: {e}") from None
    rng = np.random.default_rng(args.seed)
    examples = [rng.standard_normal(s).astype(d) if d.kind == "f" else np.zeros(s, dtype=d) for s, d in shapes]
    in_names = [f"input_{i}" for i in range(len(examples))] if len(examples) > 1 else ["input"]
    dynamic = {n: {0: "batch"} for n in in_names} if args.dynamic_batch else None
    try:
        onnx_model = lazyvic.onnx.export(
            model, tuple(examples), args.out, opset_version=args.opset, input_names=in_names, dynamic_axes=dynamic
        )
    except LazyvicError as e:
        raise CommandError(str(e)) from None
    ops = Counter(n.op_type for n in onnx_model.graph.node)
    print(
        f"wrote {args.out}: opset {args.opset}, {len(onnx_model.graph.node)} nodes "
        f"({', '.join(f'{k} {v}' for k, v in ops.most_common(8))}), {len(onnx_model.graph.initializer)} initializers"
    )
    return 0


def _load_weights(model, path: str) -> None:
    """Load ``path`` into ``model``: a PyTorch ``.pt``/``.pth``/``.bin`` state dict, a lazyvic format v1
    file (a saved module or state dict) or a plain safetensors file."""
    import lazyvic
    from lazyvic.errors import CheckpointError

    if not os.path.isfile(path):
        raise CommandError(f"--weights {path}: no such file")
    if path.endswith((".pt", ".pth", ".bin")):
        model.load_state_dict(lazyvic.interop.torch.load(path))
        return
    try:
        from safetensors import safe_open

        with safe_open(path, "np") as f:
            meta = f.metadata() or {}
    except Exception as e:  # safetensors raises its own error types for files it cannot read
        raise CheckpointError(f"not a safetensors file or a PyTorch checkpoint ({type(e).__name__}: {e})") from None
    if meta.get("format") == "lazyvic" and meta.get("kind") == "module":
        lazyvic.load(path, model=model)
    elif meta.get("format") == "lazyvic":
        model.load_state_dict(lazyvic.load(path))
    else:
        model.load_state_dict(lazyvic.interop.torch.load_safetensors(path))


# ------------------------------------------------------------------------------------------ parser
def add_parser(sub) -> None:
    """Add ``onnx`` and its subcommands to the ``lazyvic`` parser's subparsers."""
    p = sub.add_parser(
        "onnx",
        help="check, run, convert and export ONNX models",
        description="Check, run, convert and export ONNX models (lazyvic.onnx).",
    )
    osub = p.add_subparsers(dest="onnx_command", required=True)

    c = osub.add_parser("check", help="opset, inputs/outputs, op histogram and which ops lazyvic supports")
    c.add_argument("model", help="the .onnx file")
    c.set_defaults(func=_guard(_check))

    r = osub.add_parser("run", help="run a model with lazyvic; print timings (and the difference to onnxruntime)")
    r.add_argument("model", help="the .onnx file")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input array (repeat per input)")
    r.add_argument(
        "--random-inputs",
        action="store_true",
        help="make inputs not given: seeded normal floats, 0/1 integers; dynamic sizes 1",
    )
    r.add_argument("--seed", type=int, default=0, help="seed of --random-inputs (default 0)")
    r.add_argument("--output", metavar="OUT.npz", help="write the outputs, by output name")
    r.add_argument("--compare-ort", action="store_true", help="also run onnxruntime and print the max difference")
    r.add_argument(
        "--repeat",
        type=int,
        default=10,
        help="timed runs (default 10): the first is interpreted, the second compiles, the rest are steady",
    )
    r.add_argument(
        "--no-compile", action="store_true", help="record every call again instead of replaying it with lazyvic.compile"
    )
    r.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="onnxruntime intra-op threads")
    r.add_argument("--rtol", type=float, default=1e-4, help="--compare-ort tolerance, relative to max |value|")
    r.add_argument("--atol", type=float, default=1e-5, help="--compare-ort absolute tolerance")
    r.set_defaults(func=_guard(_run))

    v = osub.add_parser("convert", help="import a model and save it in lazyvic format v1 (weights and graph)")
    v.add_argument("model", help="the .onnx file")
    v.add_argument("out", help="the .safetensors file to write (lazyvic.load rebuilds the module)")
    v.set_defaults(func=_guard(_convert))

    e = osub.add_parser("export", help="build a lazyvic model from a Python factory and export it to ONNX")
    e.add_argument("factory", metavar="MODULE:FACTORY", help="e.g. lazyvic.models:resnet18 or my_file:build")
    e.add_argument("out", help="the .onnx file to write")
    e.add_argument(
        "--input-shape",
        action="append",
        required=True,
        metavar="SHAPE[:DTYPE]",
        help="example input shape, e.g. 1,3,32,32 or 2,16:int64 (repeat per input)",
    )
    e.add_argument("--kwargs", help="JSON keyword arguments of the factory, e.g. '{\"num_classes\": 10}'")
    e.add_argument("--weights", help="weights to load: lazyvic format v1, safetensors, or a PyTorch .pt state dict")
    e.add_argument("--opset", type=int, default=13, help="opset version, 13 to 18 (default 13)")
    e.add_argument("--dynamic-batch", action="store_true", help="make axis 0 of every input dynamic")
    e.add_argument("--seed", type=int, default=0, help="seed of the factory's initialisation (default 0)")
    e.set_defaults(func=_guard(_export))


def _guard(fn):
    from lazyvic.errors import LazyvicError

    def run(args) -> int:
        try:
            return fn(args)
        except (CommandError, LazyvicError, ValueError, TypeError) as e:
            if os.environ.get("LAZYVIC_DEBUG"):
                raise
            print(f"lazyvic onnx {args.onnx_command}: error: {e}", file=sys.stderr)
            return 1

    return run
