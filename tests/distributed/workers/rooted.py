"""reduce, gather, scatter, send/recv and isend/irecv on every rank against NumPy (under mpirun
with 1, 2 or 3 processes; point-to-point checks need 2 or more). Prints "ok <rank>" at the end;
any failed check raises (and aborts the job).
"""

from __future__ import annotations

import numpy as np
from _checks import raises

import lazyvic as lv
import lazyvic.distributed as dist
from lazyvic.errors import ArgumentError, ShapeError

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
ranks = range(n)
last = n - 1


def values(rank: int, shape=(4, 5), dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(200 + rank).standard_normal(shape).astype(dtype)


# reduce: rank order on the destination (the bits all_reduce gives), others unchanged.
x = lv.from_numpy(values(r)) * 3  # pending: computed at the collective
dist.reduce(x, dst=last)
want = values(0) * 3
for k in ranks[1:]:
    want = want + values(k) * 3
assert np.array_equal(x.numpy(), want if r == last else values(r) * 3)
y = lv.from_numpy(values(r))
dist.all_reduce(y)
z = lv.from_numpy(values(r))
dist.reduce(z, dst=0)
if r == 0:
    assert np.array_equal(z.numpy(), y.numpy()), "reduce and all_reduce gave other bits"
m = lv.tensor([r, -r, 2 * r], dtype=lv.int64)
dist.reduce(m, dst=0, op=dist.ReduceOp.MAX)
assert m.numpy().tolist() == ([last, 0, 2 * last] if r == 0 else [r, -r, 2 * r])

# gather: a list on the destination only.
outs = [lv.zeros(3, 2) for _ in ranks] if r == 0 else None
dist.gather(lv.from_numpy(values(r, (3, 2))), outs, dst=0)
if r == 0:
    for k in ranks:
        assert np.array_equal(outs[k].numpy(), values(k, (3, 2)))
if n > 1 and r == 1:
    raises(ArgumentError, lambda: dist.gather(lv.zeros(2), [lv.zeros(2)] * n, dst=0), "destination rank 0 only")
if r == 0:
    raises(ShapeError, lambda: dist.gather(lv.zeros(2), [lv.zeros(3)] * n, dst=0), "gather_list[0] has shape (3,)")

# scatter: rank r gets the source's r-th tensor.
got = lv.zeros(2, 3, dtype=lv.float64)
parts = [lv.from_numpy(values(k, (2, 3), np.float64)) for k in ranks] if r == last else None
dist.scatter(got, parts, src=last)
assert got.dtype == lv.float64 and np.array_equal(got.numpy(), values(r, (2, 3), np.float64))

if n > 1:
    # send / recv between rank 0 and the last rank; a receive from any rank names its sender.
    if r == 0:
        dist.send(lv.from_numpy(values(0, (6,))) + 1, dst=last)
        back = lv.zeros(2, dtype=lv.int32)
        assert dist.recv(back) == last
        assert back.numpy().tolist() == [7, 8]
        raises(ArgumentError, lambda: dist.send(lv.zeros(1), dst=0), "own rank")
    elif r == last:
        into = lv.zeros(6)
        assert dist.recv(into, src=0) == 0
        assert np.array_equal(into.numpy(), values(0, (6,)) + 1)
        dist.send(lv.tensor([7, 8], dtype=lv.int32), dst=0)
    # isend / irecv in a ring: every rank sends to the next and receives from the previous.
    nxt, prev = (r + 1) % n, (r - 1) % n
    inbox = lv.zeros(3, 3)
    recv_work = dist.irecv(inbox, src=prev, tag=5)
    send_work = dist.isend(lv.from_numpy(values(r, (3, 3))), dst=nxt, tag=5)
    send_work.wait()
    recv_work.wait()
    assert recv_work.is_completed() and recv_work.source_rank() == prev
    assert np.array_equal(inbox.numpy(), values(prev, (3, 3)))
    # A message of another size is a ShapeError naming the sizes, not a silent truncation.
    if r == 0:
        dist.send(lv.zeros(3), dst=last, tag=9)
        dist.send(lv.zeros(5), dst=last, tag=10)
    elif r == last:
        raises(ShapeError, lambda: dist.recv(lv.zeros(4), src=0, tag=9), "rank 0 sent 3 elements, tensor has 4")
        raises(ShapeError, lambda: dist.recv(lv.zeros(4), src=0, tag=10), "sent more elements than tensor has (4")

dist.barrier()
dist.destroy_process_group()
print(f"ok {r}\n", end="", flush=True)  # one write: the ranks share one stdout
