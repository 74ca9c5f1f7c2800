"""Ways a data-parallel job fails; each must end the job with a clear error, never hang.

    python ddp_failures.py {mismatch,timeout,die,unused}

mismatch: rank 1 wraps a model with another shape of one parameter (DistributedDataParallel
raises on every rank, naming it). timeout: rank 1 skips an all_reduce and waits; rank 0's
all_reduce raises DistributedError after the group's 3 s timeout. die: rank 1 exits in the
middle of training. unused: a parameter without a gradient, without find_unused_parameters.
"""

from __future__ import annotations

import datetime
import os
import sys
import time

import lazyvic as lv
import lazyvic.distributed as dist
from lazyvic import nn

mode = sys.argv[1]
dist.init_process_group("mpi")
rank = dist.get_rank()
if mode == "mismatch":
    width = 16 if rank == 0 else 17
    try:
        nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, width), nn.Linear(width, 2)))
    except dist.DistributedError as e:
        print(f"rank {rank} caught: {e}", flush=True)
        sys.exit(3)
elif mode == "timeout":
    # Both ranks are up (the barrier, under the long timeout); then a group of 3 s.
    dist.barrier()
    dist.destroy_process_group()
    dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=3))
    x = lv.ones(3)
    if rank == 1:
        time.sleep(60)
    dist.all_reduce(x)
elif mode == "die":
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
    for step in range(1000):
        if rank == 1 and step == 3:
            os._exit(7)
        model(lv.ones(2, 4)).sum().backward()
elif mode == "unused":
    m = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 2)})
    model = nn.parallel.DistributedDataParallel(m)
    m["a"](lv.ones(2, 4)).sum().backward()
print(f"rank {rank} finished {mode}", flush=True)
