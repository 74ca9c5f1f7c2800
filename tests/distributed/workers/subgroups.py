"""Process subgroups (new_group) under mpirun -n 3: collectives among members only, global and
group ranks, non-members, DistributedDataParallel in a subgroup, destroy. Prints "ok <rank>".
"""

from __future__ import annotations

import numpy as np
from _checks import raises

import lazyvic as lv
import lazyvic.distributed as dist
from lazyvic import nn
from lazyvic.errors import ArgumentError, DistributedError

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
assert n == 3


outer = dist.new_group([2, 0])  # the order given does not matter: group ranks follow global ones
solo = dist.new_group([1])
everyone = dist.new_group()
raises(ArgumentError, lambda: dist.new_group([0, 3]), "distinct ranks of the default group (0 .. 2)")
if not dist.is_nccl_available():  # every rank raises, frees its part, and the groups go on working
    raises(DistributedError, lambda: dist.new_group(backend="nccl"), "new_group: the 'nccl' backend needs")

if r in (0, 2):
    assert dist.get_rank(outer) == (0 if r == 0 else 1) and dist.get_world_size(outer) == 2
    assert dist.get_process_group_ranks(outer) == [0, 2] and dist.get_global_rank(outer, 1) == 2
    assert dist.get_group_rank(outer, 2) == 1 and dist.get_backend(outer) == "mpi"
    x = lv.tensor([1.0 + r, 10.0 * r])
    dist.all_reduce(x, group=outer)
    assert x.numpy().tolist() == [4.0, 20.0]  # ranks 0 and 2 only
    b = lv.tensor([float(r)])
    dist.broadcast(b, src=2, group=outer)  # src: a global rank
    assert b.numpy().tolist() == [2.0]
    c = lv.tensor([float(r)])
    dist.broadcast(c, src=None, group=outer, group_src=0)  # group_src: a rank in the group
    assert c.numpy().tolist() == [0.0]
    raises(ArgumentError, lambda: dist.broadcast(lv.zeros(1), src=1, group=outer), "src=1 is not a rank of this group")
    objs = [None, None]
    dist.all_gather_object(objs, f"from {r}", group=outer)
    assert objs == ["from 0", "from 2"]
    if r == 0:
        dist.send(lv.tensor([5.0]), dst=2, group=outer)
    else:
        got = lv.zeros(1)
        assert dist.recv(got, group=outer) == 0 and got.numpy().tolist() == [5.0]  # the sender's global rank
    # DistributedDataParallel in a subgroup: both members end with the same parameters.
    lv.manual_seed(r)  # different initial weights: the wrap broadcasts the group's first rank's
    model = nn.parallel.DistributedDataParallel(nn.Linear(3, 2), process_group=outer)
    opt = lv.optim.SGD(model.parameters(), lr=0.1)
    loss = (model(lv.tensor(np.full((2, 3), r, np.float32))) ** 2).mean()
    loss.backward()
    opt.step()

    def train_step(xb):
        opt.zero_grad()
        loss = (model(xb) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    captured = lv.compile(train_step)  # its all-reduce is a step of the plan, in the subgroup
    for k in range(3):
        captured(lv.tensor(np.full((2, 3), r + k, np.float32))).item()
    mine = [p.numpy().copy() for p in model.parameters()]
    theirs = [None, None]
    dist.all_gather_object(theirs, mine, group=outer)
    for a, b in zip(*theirs):
        assert np.array_equal(a, b)
else:
    assert outer is dist.GroupMember.NON_GROUP_MEMBER
    assert dist.get_rank(outer) == -1 and dist.get_world_size(outer) == -1
    x = lv.tensor([7.0])
    assert dist.all_reduce(x, group=outer) is None and x.numpy().tolist() == [7.0]  # not a member: nothing
    raises(
        ArgumentError, lambda: nn.parallel.DistributedDataParallel(nn.Linear(1, 1), process_group=outer), "not a member"
    )
    y = lv.tensor([3.0])
    dist.all_reduce(y, group=solo)  # a group of one
    assert y.numpy().tolist() == [3.0] and dist.get_world_size(solo) == 1

# The whole world through a subgroup of everyone.
z = lv.tensor([float(r)])
dist.all_reduce(z, group=everyone)
assert z.numpy().tolist() == [3.0]

dist.destroy_process_group(everyone)
raises(DistributedError, lambda: dist.all_reduce(lv.zeros(1), group=everyone), "was destroyed")
dist.barrier()
dist.destroy_process_group()
print(f"ok {r}\n", end="", flush=True)  # one write: the ranks share one stdout
