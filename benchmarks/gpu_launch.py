#!/usr/bin/env python
"""What one kernel launch costs on the GPU, by the paths lazyvic's CUDA plans could take.

    python benchmarks/gpu_launch.py [--launches N] [--size N] [--json PATH]

A CUDA plan runs one Python call per kernel (lowering/cuda/steps.py), so a small training step
is launch-bound (see benchmarks/README.md, "First GPU run"). This measures, for one elementwise
kernel ``out[i] = a[i] + b[i]`` on ``--size`` float32 elements:

- ``numba, CuPy arrays``: a ``numba.cuda.jit`` kernel given CuPy arrays (what a plan passes for
  its inputs and the runtime's storage);
- ``numba, numba arrays``: the same kernel given Numba device arrays (a plan's temporaries);
- ``numba, numba arrays, stream``: the same on an explicit non-blocking stream;
- ``cupy RawKernel``: the same kernel as CUDA C through CuPy (NVRTC), arguments CuPy arrays;
- ``CUDA graph, numba launches``: the numba launches (on a CuPy stream, wrapped for Numba by
  ``cuda.external_stream``) captured once in a CUDA graph (``cupy.cuda.Stream.begin_capture``),
  then the graph replayed; the cost per kernel of a replay;
- ``CUDA graph, RawKernel launches``: the same with the CuPy kernel.

Each path: warm-up, then ``--launches`` launches timed from the first to a device
synchronization, microseconds per launch (median of 5 rounds). Needs a GPU, numba-cuda and CuPy.
This file is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def _rounds(fn, sync, launches: int, rounds: int = 5) -> float:
    fn(10)
    sync()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(launches)
        sync()
        out.append((time.perf_counter() - t0) / launches * 1e6)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    import cupy as cp
    from numba import cuda

    @cuda.jit
    def add(out, a, b):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    raw = cp.RawKernel(
        r"""extern "C" __global__ void add(float* out, const float* a, const float* b, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = a[i] + b[i];
        }""",
        "add",
    )
    n, threads = args.size, 256
    blocks = (n + threads - 1) // threads
    a, b, o = (cp.ones(n, cp.float32) for _ in range(3))
    an, bn, on = (cuda.as_cuda_array(x) for x in (a, b, o))
    stream = cp.cuda.Stream(non_blocking=True)
    nstream = cuda.external_stream(stream.ptr)
    sync = cp.cuda.Device().synchronize
    results = {}

    def loop(launch):
        def run(k):
            for _ in range(k):
                launch()

        return run

    results["numba, CuPy arrays"] = _rounds(loop(lambda: add[blocks, threads](o, a, b)), sync, args.launches)
    results["numba, numba arrays"] = _rounds(loop(lambda: add[blocks, threads](on, an, bn)), sync, args.launches)
    results["numba, numba arrays, stream"] = _rounds(
        loop(lambda: add[blocks, threads, nstream](on, an, bn)), sync, args.launches
    )
    n32 = np.int32(n)
    results["cupy RawKernel"] = _rounds(loop(lambda: raw((blocks,), (threads,), (o, a, b, n32))), sync, args.launches)

    per_graph = 100
    for name, launch in (
        ("CUDA graph, numba launches", lambda: add[blocks, threads, nstream](on, an, bn)),
        ("CUDA graph, RawKernel launches", lambda: raw((blocks,), (threads,), (o, a, b, n32), stream=stream)),
    ):
        try:
            launch()
            stream.synchronize()
            stream.begin_capture()
            for _ in range(per_graph):
                launch()
            graph = stream.end_capture()
            graph.launch(stream)
            stream.synchronize()

            def replay(k, graph=graph):
                for _ in range(max(1, k // per_graph)):
                    graph.launch(stream)

            results[name] = _rounds(replay, stream.synchronize, args.launches)
        except Exception as e:  # noqa: BLE001 - reported: whether the path works is a result
            results[name] = f"failed: {type(e).__name__}: {e}"[:300]

    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {n} float32 elements, {args.launches} launches")
    for name, v in results.items():
        print(f"  {name:34s} {v:8.2f} us per launch" if isinstance(v, float) else f"  {name:34s} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
