"""Runtime: runs traces; the only mutable global state (caches, pools, counters) lives here.

plan_cache.py   trace key -> compiled plan; ``run``, the runtime's entry point; miss reasons
executor.py     one lowering backend per device (handed what only the runtime knows) and the
                run of a compiled plan of either device (``plan.run``)
interpreter.py  the NumPy reference interpreter (first runs in hot mode, fallbacks, the oracle)
device.py       devices, GPU detection (CUDA, the simulator, CuPy), counted host/device copies
buffers.py      the pool of large output arrays
metrics.py      counters, ``lazyvic.metrics``
config.py       settings from the environment
capture.py      ``lazyvic.compile``: record a call once, replay its plan
"""

from lazyvic.runtime.plan_cache import plan_cache, run, run_hashed

__all__ = ["plan_cache", "run", "run_hashed"]
