"""Collectives and DistributedDataParallel on "cuda" tensors (run under mpirun).

    python cuda_collectives.py {nccl,mpi}

``nccl``: on real GPUs (CuPy and NCCL), one per rank: every collective runs GPU to GPU (no host
copy is counted) and its result stays on the device. ``mpi``: the same calls through MPI (on a
GPU or Numba's CUDA simulator): values through host memory, results back on the device. Both:
results against NumPy, CPU tensors in the same group, and two DDP steps of a small model on
"cuda" against one process on the combined batch. Prints "ok <rank>" at the end; any failed check
raises (and aborts the job).
"""

from __future__ import annotations

import sys

import numpy as np

import lazyvic as lv
import lazyvic.distributed as dist
from lazyvic import nn
from lazyvic.nn import functional as F

backend = sys.argv[1]
dist.init_process_group(backend)
r, n = dist.get_rank(), dist.get_world_size()
ranks = range(n)
assert dist.get_backend() == backend
exact = backend == "mpi"  # MPI's rank-order sum is NumPy's; NCCL sums in its own order


def values(rank: int, shape=(5, 7), dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(100 + rank).standard_normal(shape).astype(dtype)


def same(got, want, rtol=1e-6):
    if exact:
        assert np.array_equal(got, want), (got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)


def host_copies() -> int:
    snap = lv.metrics.snapshot()
    return snap["device_to_host_bytes"] + snap["host_to_device_bytes"]


# all_reduce of a pending CUDA tensor: computed at the collective, the result on the device.
x = lv.from_numpy(values(r)).to("cuda") * 2
lv.sync(x)
before, calls = host_copies(), lv.metrics.snapshot()["collectives"]
dist.all_reduce(x)
if backend == "nccl":
    assert host_copies() == before, "an NCCL all-reduce copied through host memory"
assert lv.metrics.snapshot()["collectives"] == calls + 1
assert x.is_cuda, f"all_reduce moved the tensor to {x.device}"
same(x.numpy(), np.sum([values(k) * 2 for k in ranks], axis=0))
y = x + 1  # the result joins the next trace on the device
assert y.is_cuda
same(y.numpy(), np.sum([values(k) * 2 for k in ranks], axis=0) + 1)

for op, fn in [("MAX", np.max), ("MIN", np.min), ("AVG", np.mean)]:
    t = lv.from_numpy(values(r, (3, 4))).to("cuda")
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    assert t.is_cuda
    np.testing.assert_allclose(t.numpy(), fn([values(k, (3, 4)) for k in ranks], axis=0), rtol=1e-6)
i = lv.tensor([r, 2 * r + 1, -r], dtype=lv.int64, device="cuda")
dist.all_reduce(i)
assert i.is_cuda and i.numpy().tolist() == [sum(ranks), sum(2 * k + 1 for k in ranks), -sum(ranks)]
b = lv.tensor([r == 0, False, True], device="cuda")
dist.all_reduce(b, op=dist.ReduceOp.MAX)
assert b.is_cuda and b.numpy().tolist() == [True, False, True]

# broadcast, all_gather, all_gather_into_tensor, reduce_scatter(_tensor).
t = lv.from_numpy(values(r, (4,), np.float64)).to("cuda")
dist.broadcast(t, src=n - 1)
assert t.is_cuda and t.dtype == lv.float64 and np.array_equal(t.numpy(), values(n - 1, (4,), np.float64))
outs = [lv.zeros(2, 3, device="cuda") for _ in ranks]
dist.all_gather(outs, lv.from_numpy(values(r, (2, 3))).to("cuda"))
for k in ranks:
    assert outs[k].is_cuda and np.array_equal(outs[k].numpy(), values(k, (2, 3)))
big = lv.zeros(2 * n, 3, device="cuda")
dist.all_gather_into_tensor(big, lv.from_numpy(values(r, (2, 3))).to("cuda"))
assert big.is_cuda and np.array_equal(big.numpy(), np.concatenate([values(k, (2, 3)) for k in ranks]))
out = lv.zeros(3, device="cuda")
dist.reduce_scatter(out, [lv.from_numpy(values(r, (n, 3))[j]).to("cuda") for j in ranks])
assert out.is_cuda
same(out.numpy(), np.sum([values(k, (n, 3))[r] for k in ranks], axis=0))
out2 = lv.zeros(2, device="cuda")
dist.reduce_scatter_tensor(out2, lv.from_numpy(values(r, (2 * n,))).to("cuda"), op=dist.ReduceOp.MAX)
assert out2.is_cuda and np.array_equal(
    out2.numpy(), np.max([values(k, (2 * n,)) for k in ranks], axis=0)[2 * r : 2 * r + 2]
)

# A CPU tensor in the same group goes through MPI and stays on the CPU.
c = lv.from_numpy(values(r, (6,)))
dist.all_reduce(c)
assert not c.is_cuda
np.testing.assert_allclose(c.numpy(), np.sum([values(k, (6,)) for k in ranks], axis=0), rtol=1e-6)

if backend == "nccl":
    try:
        dist.all_reduce(lv.tensor([1, 2], dtype=lv.int32, device="cuda"), op=dist.ReduceOp.BAND)
    except lv.errors.UnsupportedOpError as e:
        assert "NCCL has no ReduceOp.BAND" in str(e), e
    else:
        raise AssertionError("BAND through NCCL did not raise")

# A subgroup of every rank (in an "nccl" group: its own NCCL communicator).
sub = dist.new_group(list(ranks))
s = lv.from_numpy(values(r, (5,))).to("cuda")
dist.all_reduce(s, group=sub)
assert s.is_cuda and dist.get_backend(sub) == backend
same(s.numpy(), np.sum([values(k, (5,)) for k in ranks], axis=0))

# DistributedDataParallel on "cuda": two SGD steps, each rank on its part of the combined batch,
# against one process on the whole batch (no process group needed for it).
B = 4 * n
xs = np.random.default_rng(7).standard_normal((2, B, 8)).astype(np.float32)
ys = np.random.default_rng(8).integers(0, 3, size=(2, B))


def model():
    lv.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)).to("cuda")


def train(m, rows):
    opt = lv.optim.SGD(m.parameters(), lr=0.5)
    losses = []
    for s in range(2):
        opt.zero_grad()
        loss = F.cross_entropy(m(lv.tensor(xs[s][rows], device="cuda")), lv.tensor(ys[s][rows], device="cuda"))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


ddp = nn.parallel.DistributedDataParallel(model())
train(ddp, slice(4 * r, 4 * r + 4))
single = model()
train(single, slice(None))
for (name, p), q in zip(ddp.module.named_parameters(), single.parameters()):
    assert p.is_cuda and p.grad.is_cuda, name
    np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)

dist.destroy_process_group()
print(f"ok {r}\n", end="", flush=True)  # one write: the ranks share one stdout
