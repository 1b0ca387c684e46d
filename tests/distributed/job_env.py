"""Prints what init chose for this rank: its compute threads and MPI's waiting mode."""
import os

import flowgrad as fg
import flowgrad.distributed as dist

dist.init("mpi")
print(f"rank {dist.rank()} threads {fg.get_num_threads()} yield {os.environ.get('OMPI_MCA_mpi_yield_when_idle')}", flush=True)
dist.barrier()  # every rank has written its line before any exits
