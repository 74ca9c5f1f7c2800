"""Under ``lazyvic run -n 2 launch_fail.py raise|exit``: rank 1 raises (or exits with status 3)
while rank 0 waits in a barrier; the job must end at once, not at the collective's deadline."""

import sys
import time

import lazyvic.distributed as dist

dist.init_process_group()
dist.barrier()
if dist.get_rank() == 1:
    time.sleep(0.2)  # let rank 0 enter its barrier first
    if sys.argv[1] == "raise":
        raise RuntimeError("rank 1 fails on purpose")
    sys.exit(3)
dist.barrier()
print("rank 0 passed the barrier", flush=True)
