"""Every rank loads a checkpoint saved by another number of ranks and compares it, bit for bit,
with the reference the savers wrote (lazyvic format v1):

- into a fresh model and a fresh AdamW (whose empty "state" takes the saved state), then through
  ``model.load_state_dict`` and ``opt.load_state_dict``;
- into a state dict that asks for the model only.

Usage: mpirun -n N python checkpoint_load.py <checkpoint dir> <reference file>
"""

import sys

from checkpoint_state import assert_same, build, state

import lazyvic
import lazyvic.distributed as dist
import lazyvic.distributed.checkpoint as dcp

checkpoint, reference = sys.argv[1], sys.argv[2]
dist.init_process_group("mpi")
rank = dist.get_rank()
expected = lazyvic.load(reference)

model, opt = build(seed=10 + rank)
loaded = state(model, opt, seed=10 + rank)
assert loaded["optim"]["state"] == {}
dcp.load(loaded, checkpoint_id=checkpoint)
assert_same(loaded, expected)
model.load_state_dict(loaded["model"])
opt.load_state_dict(loaded["optim"])
assert_same({"model": model.state_dict(), "optim": opt.state_dict()}, {k: expected[k] for k in ("model", "optim")})

only_model = {"model": build(seed=20 + rank)[0].state_dict()}
dcp.load(only_model, checkpoint_id=checkpoint)
assert_same(only_model, {"model": expected["model"]})

dist.barrier()
print(f"rank {rank} of {dist.get_world_size()}: loaded", flush=True)
dist.destroy_process_group()
