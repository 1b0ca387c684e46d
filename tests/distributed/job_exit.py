"""A job where the last rank leaves while the others wait in a collective. argv[1]: 'exit1'
(sys.exit(1)), 'systemexit' (raise SystemExit with a message: status 1), 'signal' (the rank
kills itself with SIGKILL), 'exit0' (sys.exit(0): a clean exit, but the others still wait for it),
'return' (its script ends normally while the others wait), 'done_early' (the last rank ends at
once, the others work on and end without another collective: a fine job) or 'wait' (every rank prints its
pid and waits in a barrier that the last rank never joins: it sleeps; for the launcher-kill test)."""
import os
import signal
import sys
import time

import flowgrad as fg
import flowgrad.distributed as dist

dist.init("mpi")
rank, size = dist.rank(), dist.world_size()
mode = sys.argv[1]
dist.barrier()  # every rank is up
if mode == "done_early":
    if rank != size - 1:
        time.sleep(1)
        print(f"rank {rank} done", flush=True)
elif mode == "wait":
    print(f"rank {rank} pid {os.getpid()} waiting", flush=True)
    if rank == size - 1:
        time.sleep(3600)
    dist.barrier()
elif rank == size - 1:
    if mode == "exit1":
        sys.exit(1)
    elif mode == "systemexit":
        raise SystemExit("deliberate exit")
    elif mode == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "exit0":
        sys.exit(0)
else:
    dist.all_reduce(fg.ones(3))  # the last rank never joins this
    print("unreachable: the job should have failed", flush=True)
