"""Every rank trains the same replica 2 steps and saves it sharded; rank 0 also writes the state in
lazyvic format v1 (the reference the loaders compare with); then every rank loads the checkpoint
back, at the same world size, into state that holds other values (tensors rebound in place).
Then saves that fail on one rank (ranks whose tensors differ; a shard write that fails on rank 1)
raise on every rank and leave no index.json.

Usage: mpirun -n N python checkpoint_save.py <checkpoint dir> <reference file>
"""

import os
import re
import sys

from checkpoint_state import assert_same, build, state, train

import lazyvic
import lazyvic.distributed as dist
import lazyvic.distributed.checkpoint as dcp
from lazyvic.errors import CheckpointError

checkpoint, reference = sys.argv[1], sys.argv[2]
dist.init_process_group("mpi")
rank = dist.get_rank()

model, opt = build()
train(model, opt, range(2))
saved = state(model, opt)
dcp.save(saved, checkpoint_id=checkpoint)
if rank == 0:
    lazyvic.save(saved, reference)

other_model, other_opt = build(seed=1 + rank)
train(other_model, other_opt, range(2, 3))  # its optimizer state holds tensors: loaded in place
loaded = state(other_model, other_opt, seed=1 + rank)
held = loaded["model"]["0.weight"]
dcp.load(loaded, checkpoint_id=checkpoint)
assert loaded["model"]["0.weight"] is held
assert_same(loaded, saved)

# A save that fails on one rank leaves no index, and every rank raises.
failed = os.path.join(os.path.dirname(checkpoint), "failed")
dcp.save({"w": lazyvic.ones(4)}, checkpoint_id=failed)
assert os.path.exists(os.path.join(failed, "index.json"))
dist.barrier()  # rank 0's next save removes the index first: every rank has looked at it by then


def expect_failure(state, error, match):
    try:
        dcp.save(state, checkpoint_id=failed)
    except error as e:
        assert re.search(match, str(e)), str(e)
    else:
        raise AssertionError(f"rank {rank}: the save did not fail")
    assert not os.path.exists(os.path.join(failed, "index.json"))


expect_failure(
    {"w": lazyvic.ones(4 + rank)},
    CheckpointError,
    f"rank {1 - rank}'s state_dict holds tensor 'w' float32 \\[{5 - rank}\\]",
)
if rank == 1:

    def disk_full(path, chunks):
        raise OSError(f"disk full: {path}")

    dcp._write_atomic = disk_full
    expect_failure({"w": lazyvic.ones(4)}, OSError, "disk full")
else:
    expect_failure({"w": lazyvic.ones(4)}, CheckpointError, "rank 1 could not write shard-00001-of-00002.safetensors")

dist.barrier()
print(f"rank {rank} of {dist.get_world_size()}: saved and loaded back", flush=True)
dist.destroy_process_group()
