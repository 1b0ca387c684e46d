"""A job where one rank fails while the others wait in a collective. argv[1]: 'raise' (an
exception on the last rank), 'crash' (the last rank's process ends at once, exit status 3) or
'unused' (a parameter without a gradient, no find_unused)."""
import os
import sys

import flowgrad as fg
import flowgrad.distributed as dist
import flowgrad.nn.functional as F
from flowgrad.nn.parallel import DistributedDataParallel as DDP

dist.init("mpi")
rank, size = dist.rank(), dist.world_size()
if sys.argv[1] == "raise":
    if rank == size - 1:
        raise ValueError("deliberate failure")
    dist.all_reduce(fg.ones(3))  # the other ranks wait here for the failed one
elif sys.argv[1] == "crash":  # dies without a Python exception: no excepthook, no MPI_Abort
    if rank == size - 1:
        os._exit(3)
    dist.all_reduce(fg.ones(3))
elif sys.argv[1] == "unused":
    fg.manual_seed(0)
    g = fg.FlowBuilder(fg.nn.Linear(4, 4)).switch(fg.flow.FixedSelector(0), fg.nn.Linear(4, 4), fg.nn.Linear(4, 4)).build()
    ddp = DDP(g, bucket_mb=1e-6)
    for _ in range(2):
        F.mse_loss(ddp(fg.ones(2, 4)), fg.zeros(2, 4)).backward()
print("unreachable: the job should have failed")
