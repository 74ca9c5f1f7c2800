"""Under ``lazyvic run``: write what this rank sees (torchrun variables before lazyvic is imported,
sys.argv, lazyvic.distributed's rank and MPI's own) to ``$LAUNCH_OUT/<rank>.json`` (a file per rank:
mpirun may interleave the ranks' output within a line)."""

import json
import os
import sys
from pathlib import Path

# Scripts written for torchrun read these at the top, before any process group exists.
NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
env = {name: os.environ.get(name) for name in NAMES}
path0 = sys.path[0]

from mpi4py import MPI  # noqa: E402

import lazyvic.distributed as dist  # noqa: E402

dist.init_process_group()
world = MPI.COMM_WORLD
local = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
result = {
    "env": env,
    "argv": sys.argv,
    "name": __name__,
    "path0": path0,
    "dist": [dist.get_rank(), dist.get_world_size()],
    "mpi": [world.Get_rank(), world.Get_size(), local.Get_rank(), local.Get_size()],
}
local.Free()
dist.barrier()
(Path(os.environ["LAUNCH_OUT"]) / f"{dist.get_rank()}.json").write_text(json.dumps(result))
dist.destroy_process_group()
