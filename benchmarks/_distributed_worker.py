"""One measurement of ``distributed.py``: a training loop on one rank, started by that harness
as a plain process (1 process, no DDP) or through a launcher (``python -m
lazyvic.distributed.run -n 2`` or ``python -m torch.distributed.run --nproc-per-node 2``).

    python _distributed_worker.py SPEC_JSON OUT_PREFIX

SPEC_JSON: {"workload": "digits"|"gpt", "framework": "lazyvic"|"torch", "mode": "eager"|"compile",
"nproc": 1|2, "threads": null|N, "warmup": W, "steps": S, "chunks": C}. Each rank trains on its
equal part of every combined batch (rank r: rows r*B/n .. (r+1)*B/n), runs W warm-up steps, waits
at a barrier, times S steps in C chunks, and writes its record to OUT_PREFIX.rank<r>.json.
lazyvic workers never import torch; torch workers never import lazyvic.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import counter_delta  # noqa: E402
from tiny_gpt import init_weights, model_config, token_batches, torch_tiny_gpt  # noqa: E402

N_BATCHES = 8  # combined batches, cycled
LOSS_STEPS = 3  # the first losses are returned: frameworks and process counts agree
DIGITS = dict(sizes=(64, 128, 10), batch=128, lr=0.1, momentum=0.9)
GPT = dict(lr=3e-4, weight_decay=0.1, clip=1.0)  # batch 16 x 64: tiny_gpt.TRAIN["batch"], block 64


# ------------------------------------------------------------------ data and weights
def digits_batches() -> list:
    """N_BATCHES combined batches (x float32 (128, 64), y int64 (128,)): scikit-learn's digits
    scaled to [0, 1], else random data of that shape."""
    rng = np.random.default_rng(0)
    b = DIGITS["batch"]
    try:
        from sklearn.datasets import load_digits

        d = load_digits()
        x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    except ImportError:
        x = rng.random((N_BATCHES * b, 64), dtype=np.float32)
        y = rng.integers(0, 10, N_BATCHES * b)
    order = rng.permutation(len(x))[: N_BATCHES * b]
    return [(x[order[i * b : (i + 1) * b]], y[order[i * b : (i + 1) * b]]) for i in range(N_BATCHES)]


def digits_weights() -> dict:
    """The MLP's initial state dict (PyTorch's default Linear init, drawn with NumPy)."""
    rng = np.random.default_rng(2)
    (i, h, o), out = DIGITS["sizes"], {}
    for name, fan_in, fan_out in (("0", i, h), ("2", h, o)):
        bound = 1.0 / math.sqrt(fan_in)
        out[f"{name}.weight"] = rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32)
        out[f"{name}.bias"] = rng.uniform(-bound, bound, fan_out).astype(np.float32)
    return out


def rank_batches(workload: str, rank: int, world: int) -> list:
    """This rank's rows of every combined batch."""
    batches = digits_batches() if workload == "digits" else token_batches(model_config(0.0))
    per = len(batches[0][0]) // world
    return [(x[rank * per : (rank + 1) * per].copy(), y[rank * per : (rank + 1) * per].copy()) for x, y in batches]


# ------------------------------------------------------------------ lazyvic
class LazyvicTrainer:
    def __init__(self, spec: dict):
        import lazyvic as lv

        self.lv, self.dist = lv, None
        rank, world = 0, 1
        if spec["nproc"] > 1:
            import lazyvic.distributed as dist

            dist.init_process_group("gloo")  # lazyvic's name for its MPI backend
            self.dist, rank, world = dist, dist.get_rank(), dist.get_world_size()
        self.rank, self.world = rank, world
        lv.manual_seed(0)
        if spec["workload"] == "digits":
            i, h, o = DIGITS["sizes"]
            model = lv.nn.Sequential(lv.nn.Linear(i, h), lv.nn.ReLU(), lv.nn.Linear(h, o))
            model.load_state_dict(digits_weights())
        else:
            model = lv.models.TinyGPT(**model_config(0.0))
            model.load_state_dict(init_weights(model_config(0.0)))
        lv.sync(*model.parameters())
        net = lv.nn.parallel.DistributedDataParallel(model) if world > 1 else model
        if spec["workload"] == "digits":
            opt = lv.optim.SGD(model.parameters(), lr=DIGITS["lr"], momentum=DIGITS["momentum"])

            def train_step(x, y):
                opt.zero_grad()
                loss = lv.nn.functional.cross_entropy(net(x), y)
                loss.backward()
                opt.step()
                return loss
        else:
            opt = lv.optim.AdamW(model.parameters(), lr=GPT["lr"], weight_decay=GPT["weight_decay"])

            def train_step(x, y):
                opt.zero_grad()
                _, loss = net(x, y)
                loss.backward()
                lv.nn.utils.clip_grad_norm_(model.parameters(), GPT["clip"])
                opt.step()
                return loss

        self.run = lv.compile(train_step) if spec["mode"] == "compile" else train_step
        self.data = [(lv.tensor(x), lv.tensor(y)) for x, y in rank_batches(spec["workload"], rank, world)]

    def step(self, i: int) -> float:
        return self.run(*self.data[i % N_BATCHES]).item()  # the sync: the whole step

    def barrier(self) -> None:
        if self.dist is not None:
            self.dist.barrier()

    def counters(self) -> dict:
        return dict(self.lv.metrics.snapshot())

    def comm(self, before: dict, after: dict, steps: int) -> dict:
        """Collective time and count per step from lazyvic.metrics (this rank)."""
        d = counter_delta(after, before)
        return {
            "source": "lazyvic.metrics collective_seconds",
            "ms_per_step": 1e3 * d.get("collective_seconds", 0.0) / steps,
            "collectives_per_step": d.get("collectives", 0) / steps,
            "bytes_per_step": d.get("collective_bytes", 0) / steps,
        }

    def info(self) -> dict:
        import numba

        out = {"numba_threads": numba.config.NUMBA_NUM_THREADS}
        if hasattr(self.run, "replays"):
            out["capture"] = {
                "replays": self.run.replays,
                "recordings": self.run.recordings,
                "fallbacks": self.run.fallbacks,
                "reasons": {str(k): v for k, v in self.run.reasons.items()},
            }
        return out

    def close(self) -> None:
        if self.dist is not None:
            self.dist.destroy_process_group()


# ------------------------------------------------------------------ PyTorch
class TorchTrainer:
    def __init__(self, spec: dict):
        import torch

        self.torch, self.dist = torch, None
        if spec["threads"] is not None:
            torch.set_num_threads(spec["threads"])
        rank, world = 0, 1
        if spec["nproc"] > 1:
            import torch.distributed as dist

            dist.init_process_group("gloo")
            self.dist, rank, world = dist, dist.get_rank(), dist.get_world_size()
        self.rank, self.world = rank, world
        torch.manual_seed(0)
        if spec["workload"] == "digits":
            i, h, o = DIGITS["sizes"]
            model = torch.nn.Sequential(torch.nn.Linear(i, h), torch.nn.ReLU(), torch.nn.Linear(h, o))
            model.load_state_dict({k: torch.from_numpy(v) for k, v in digits_weights().items()})
            opt = torch.optim.SGD(model.parameters(), lr=DIGITS["lr"], momentum=DIGITS["momentum"])
        else:
            model = torch_tiny_gpt(model_config(0.0))
            model.load_state_dict({k: torch.from_numpy(v) for k, v in init_weights(model_config(0.0)).items()})
            opt = torch.optim.AdamW(model.parameters(), lr=GPT["lr"], weight_decay=GPT["weight_decay"])
        self.net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
        self.model, self.opt, self.gpt = model, opt, spec["workload"] == "gpt"
        self.data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in rank_batches(spec["workload"], rank, world)]
        self.hook_s: list = []  # all-reduce seconds, once the timing hook is registered

    def step(self, i: int) -> float:
        x, y = self.data[i % N_BATCHES]
        self.opt.zero_grad()
        if self.gpt:
            _, loss = self.net(x, y)
        else:
            loss = self.torch.nn.functional.cross_entropy(self.net(x), y)
        loss.backward()
        if self.gpt:
            self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), GPT["clip"])
        self.opt.step()
        return loss.item()

    def barrier(self) -> None:
        if self.dist is not None:
            self.dist.barrier()

    def counters(self) -> dict:
        return {}

    def time_allreduce(self) -> None:
        """From now on, time each bucket's all-reduce: a DDP communication hook that runs
        PyTorch's default (``allreduce_hook``: divide by the world size, all-reduce) and records
        the seconds from the bucket being ready to the reduction's future completing. Registered
        after the timed steps, so the Python hook does not slow them down."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def hook(state, bucket):
            t0 = time.perf_counter()

            def done(fut):
                self.hook_s.append(time.perf_counter() - t0)
                return fut.value()  # the averaged bucket

            return default_hooks.allreduce_hook(None, bucket).then(done)

        self.net.register_comm_hook(None, hook)

    def comm(self, before: dict, after: dict, steps: int) -> dict:
        return {
            "source": "DDP comm hook around allreduce_hook (extra steps after the timed ones)",
            "ms_per_step": 1e3 * sum(self.hook_s) / steps,
            "collectives_per_step": len(self.hook_s) / steps,
        }

    def info(self) -> dict:
        return {"torch": self.torch.__version__, "torch_threads": self.torch.get_num_threads()}

    def close(self) -> None:
        if self.dist is not None:
            self.dist.barrier()  # no rank tears gloo down while the other still reduces
            self.dist.destroy_process_group()


# ------------------------------------------------------------------ the measurement
def measure(spec: dict) -> dict:
    t_start = time.perf_counter()
    trainer = (LazyvicTrainer if spec["framework"] == "lazyvic" else TorchTrainer)(spec)
    rec = {"spec": spec, "rank": trainer.rank, "world": trainer.world, "setup_s": time.perf_counter() - t_start}
    losses = []
    t0 = time.perf_counter()
    c0 = trainer.counters()
    for i in range(spec["warmup"]):
        loss = trainer.step(i)
        if i < LOSS_STEPS:
            losses.append(loss)
    rec["warmup_s"] = time.perf_counter() - t0
    trainer.barrier()
    c1 = trainer.counters()
    per_chunk = max(1, spec["steps"] // spec["chunks"])
    chunk_s, i = [], spec["warmup"]
    for _ in range(spec["chunks"]):
        t0 = time.perf_counter()
        for _ in range(per_chunk):
            trainer.step(i)
            i += 1
        chunk_s.append(time.perf_counter() - t0)
    c2 = trainer.counters()
    steps = per_chunk * spec["chunks"]
    rec["chunk_steps"] = per_chunk
    rec["chunk_s"] = chunk_s
    rec["steps_per_s"] = per_chunk / statistics.median(chunk_s)
    rec["steps_per_s_mean"] = steps / sum(chunk_s)
    rec["losses"] = losses
    rec["warmup_counters"] = counter_delta(c1, c0)
    rec["timed_counters"] = counter_delta(c2, c1)
    if trainer.world > 1:
        if isinstance(trainer, TorchTrainer):
            probe = max(1, steps // 5)
            trainer.time_allreduce()
            for _ in range(probe):
                trainer.step(i)
                i += 1
            rec["comm"] = trainer.comm({}, {}, probe) | {"steps": probe}
        else:
            rec["comm"] = trainer.comm(c1, c2, steps) | {"steps": steps}
    rec["info"] = trainer.info()
    trainer.close()
    rec["total_s"] = time.perf_counter() - t_start
    return rec


def main(argv: list[str]) -> int:
    spec, prefix = json.loads(argv[0]), argv[1]
    rec = measure(spec)
    rec["env"] = {k: os.environ.get(k) for k in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    Path(f"{prefix}.rank{rec['rank']}.json").write_text(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
