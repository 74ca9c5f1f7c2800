"""Every collective on every rank against NumPy (run under mpirun with 2 or 3 processes).

Each rank's input is a function of its rank, so each rank computes the expected result itself.
Prints "ok <rank>" at the end; any failed check raises (and aborts the job).
"""

from __future__ import annotations

import numpy as np

import lazyvic as lv
import lazyvic.distributed as dist
from lazyvic.errors import DTypeError, ShapeError


def values(rank: int, shape=(5, 7), dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(100 + rank)
    return rng.standard_normal(shape).astype(dtype)


dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
assert dist.is_initialized() and dist.get_backend() == "mpi"
ranks = range(n)

# all_reduce SUM: bit-exact against a NumPy sum in rank order (the documented fixed order).
x = lv.from_numpy(values(r))
dist.all_reduce(x)
expected = values(0).copy()
for k in ranks[1:]:
    expected += values(k)
assert np.array_equal(x.numpy(), expected), "sum is not the rank-order sum"

# A lazy (pending) input is computed at the collective, and the result joins the next trace.
y = lv.from_numpy(values(r)) * 2 + 1
dist.all_reduce(y, op=dist.ReduceOp.MAX)
assert np.array_equal((y + 0).numpy(), np.max([values(k) * 2 + 1 for k in ranks], axis=0))
for op, fn in [("MIN", np.min), ("PRODUCT", np.prod)]:
    t = lv.from_numpy(values(r, (3, 4)))
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    np.testing.assert_allclose(t.numpy(), fn([values(k, (3, 4)) for k in ranks], axis=0), rtol=1e-6)
t = lv.from_numpy(values(r, (3,), np.float64))
dist.all_reduce(t, op=dist.ReduceOp.AVG)
assert t.dtype == lv.float64
np.testing.assert_allclose(t.numpy(), np.mean([values(k, (3,), np.float64) for k in ranks], axis=0), rtol=1e-12)

# Integers, bool, float16, sizes not divisible by the world size, and empty tensors.
i = lv.tensor([r, 2 * r + 1, -r], dtype=lv.int64)
dist.all_reduce(i)
assert i.numpy().tolist() == [sum(ranks), sum(2 * k + 1 for k in ranks), -sum(ranks)]
b = lv.tensor([r == 0, False, True])
dist.all_reduce(b, op=dist.ReduceOp.MAX)
assert b.numpy().tolist() == [True, False, True]
band = lv.tensor([7, 6, 5], dtype=lv.int32) - r
dist.all_reduce(band, op=dist.ReduceOp.BAND)
want = np.array([7, 6, 5], np.int32)
for k in ranks[1:]:
    want &= np.array([7, 6, 5], np.int32) - k
assert np.array_equal(band.numpy(), want)
h = lv.from_numpy(values(r, (11,))).to(lv.float16)
dist.all_reduce(h)
assert h.dtype == lv.float16
want16 = np.sum([values(k, (11,)).astype(np.float16).astype(np.float32) for k in ranks], axis=0).astype(np.float16)
assert np.array_equal(h.numpy(), want16)
e = lv.zeros(0, 3)
dist.all_reduce(e)
assert e.shape == (0, 3)

# A parameter that requires grad is updated in place, without autograd history.
w = lv.nn.Parameter(lv.ones(4) * (r + 1))
dist.all_reduce(w, op=dist.ReduceOp.AVG)
assert w.requires_grad and w.grad_fn is None and np.allclose(w.numpy(), (n + 1) / 2)

# async_op: the Work finishes the in-place update.
a = lv.ones(6) * r
work = dist.all_reduce(a, async_op=True)
assert isinstance(work, dist.Work)
work.wait()
assert work.is_completed() and np.array_equal(a.numpy(), np.full(6, sum(ranks), np.float32))

# broadcast, all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor.
src = n - 1
bt = lv.from_numpy(values(r, (2, 3)))
dist.broadcast(bt, src=src)
assert np.array_equal(bt.numpy(), values(src, (2, 3)))
outs = [lv.zeros(2, 3) for _ in ranks]
dist.all_gather(outs, lv.from_numpy(values(r, (2, 3))))
for k in ranks:
    assert np.array_equal(outs[k].numpy(), values(k, (2, 3)))
big = lv.zeros(2 * n, 3)
dist.all_gather_into_tensor(big, lv.from_numpy(values(r, (2, 3))))
assert np.array_equal(big.numpy(), np.concatenate([values(k, (2, 3)) for k in ranks]))
rs = lv.zeros(4)
dist.reduce_scatter(rs, [lv.from_numpy(values(r * 10 + j, (4,))) for j in ranks])
want = values(0 * 10 + r, (4,)).copy()
for k in ranks[1:]:
    want += values(k * 10 + r, (4,))
assert np.array_equal(rs.numpy(), want)
rst = lv.zeros(3)
dist.reduce_scatter_tensor(rst, lv.from_numpy(values(r, (n * 3,))))
want = values(0, (n * 3,))[r * 3 : r * 3 + 3].copy()
for k in ranks[1:]:
    want += values(k, (n * 3,))[r * 3 : r * 3 + 3]
assert np.array_equal(rst.numpy(), want)

# Objects, barrier.
objs = [None] * n
dist.all_gather_object(objs, {"rank": r, "name": "x" * r})
assert objs == [{"rank": k, "name": "x" * k} for k in ranks]
lst = [r, "mine"] if r == 0 else [None, None]
dist.broadcast_object_list(lst, src=0)
assert lst == [0, "mine"]
dist.barrier()

# Errors: typed, naming the collective.
for call, kind in [
    (lambda: dist.all_gather([lv.zeros(2)] * (n + 1), lv.zeros(2)), ShapeError),
    (lambda: dist.all_reduce(lv.ones(2, dtype=lv.int64), op=dist.ReduceOp.AVG), DTypeError),
    (
        lambda: dist.reduce_scatter_tensor(lv.zeros(1, dtype=lv.int64), lv.zeros(n, dtype=lv.int64), op="avg"),
        DTypeError,
    ),
    (lambda: dist.broadcast(lv.ones(2), src=n), lv.errors.ArgumentError),
    (lambda: dist.all_reduce(lv.ones(2), op="median"), lv.errors.ArgumentError),
]:
    try:
        call()
    except kind:
        pass
    else:
        raise AssertionError(f"expected {kind.__name__}")

# Counted in lazyvic.metrics, and shown by explain as the sync point of its own kind.
assert lv.metrics.snapshot()["collectives"] >= 15


def step():
    z = lv.ones(3) * 2
    dist.all_reduce(z)
    return z


report = lv.explain(step)
assert any(c["reason"] == "collective all_reduce" for c in report.cuts), [c["reason"] for c in report.cuts]
ddp = lv.nn.parallel.DistributedDataParallel(lv.nn.Linear(4, 2))


def ddp_step():
    loss = ddp(lv.ones(3, 4)).sum()
    loss.backward()  # the gradients are computed at the end of the walk, then all-reduced
    return loss


report = lv.explain(ddp_step)
assert [c["reason"] for c in report.cuts][:1] == ["collective all_reduce (DistributedDataParallel)"], report.cuts
dist.destroy_process_group()
assert not dist.is_initialized()
print(f"ok {r}\n", end="", flush=True)  # one write: the ranks share one stdout
