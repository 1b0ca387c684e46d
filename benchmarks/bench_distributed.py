"""fg.distributed on 2 local MPI ranks: all_reduce bandwidth (1-256 MB float32) against mpi4py
calling the same MPI library, and the step-time overhead of DistributedDataParallel against the
same per-rank batch without it.

    python benchmarks/bench_distributed.py [--save]     (starts the 2 ranks with mpirun itself)
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SIZES_MB = [1, 4, 16, 64, 256]


def timed(fn, iters, rounds, dist, fg):
    """Best over rounds of the mean seconds per call, each round timed by the slowest rank."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        elapsed = fg.tensor([(time.perf_counter() - start) / iters], dtype=fg.float64)
        dist.all_reduce(elapsed, op="max")
        best = min(best, elapsed.item())
    return best


def worker(rounds):
    from mpi4py import MPI  # initialises MPI first; flowgrad then joins the same MPI_COMM_WORLD

    import flowgrad as fg
    import flowgrad.distributed as dist
    import flowgrad.nn.functional as F
    from flowgrad import nn
    from flowgrad.nn.parallel import DistributedDataParallel

    dist.init("mpi")
    size = dist.world_size()
    comm = MPI.COMM_WORLD
    result = {"world_size": size, "all_reduce": [], "ddp": {}}
    for mb in SIZES_MB:
        n = mb * 2**20 // 4
        iters = max(2, min(16, 64 // mb))
        t = fg.ones(n)
        a = np.ones(n, dtype=np.float32)
        ours = timed(lambda: dist.all_reduce(t), iters, rounds, dist, fg)
        peer = timed(lambda: comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM), iters, rounds, dist, fg)
        bus = 2 * (size - 1) / size * n * 4 / 1e9  # bytes each rank sends and receives (ring)
        result["all_reduce"].append({"mb": mb, "flowgrad_gbps": bus / ours, "mpi4py_gbps": bus / peer,
                                     "ratio": peer / ours})

    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    ddp = DistributedDataParallel(model)
    opt = fg.optim.SGD(model.parameters(), lr=0.01)
    x, y = fg.randn(64, 784), fg.randint(0, 10, (64,))

    def step(net):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()

    plain = timed(lambda: step(model), 20, rounds, dist, fg)
    wrapped = timed(lambda: step(ddp), 20, rounds, dist, fg)
    result["ddp"] = {"model": "MLP 784-512-512-10, batch 64 per rank", "plain_ms": plain * 1e3,
                     "ddp_ms": wrapped * 1e3, "overhead": wrapped / plain - 1}
    if dist.rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.rounds)

    sys.path.insert(0, os.path.dirname(__file__))
    from common import machine, save

    env = dict(os.environ, FLOWGRAD_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "flowgrad.distributed.run", "--nproc", "2", "--timeout", "600",
           __file__, "--worker", "--rounds", str(args.rounds)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        sys.exit(f"benchmark job failed:\n{out.stdout}\n{out.stderr}")
    result = json.loads(lines[0][len("RESULT "):])
    print(f"{'all_reduce':>12} {'flowgrad GB/s':>14} {'mpi4py GB/s':>12} {'ratio':>6}")
    for r in result["all_reduce"]:
        print(f"{r['mb']:>9} MB {r['flowgrad_gbps']:>14.2f} {r['mpi4py_gbps']:>12.2f} {r['ratio']:>5.2f}x")
    d = result["ddp"]
    print(f"DDP step ({d['model']}): {d['ddp_ms']:.2f} ms vs {d['plain_ms']:.2f} ms without, "
          f"overhead {100 * d['overhead']:+.1f}%")
    if args.save:
        result.update(machine=machine(), command="python benchmarks/bench_distributed.py --save",
                      ranks="2 local MPI ranks, FLOWGRAD_NUM_THREADS=1 each")
        print("saved", save("bench_distributed", result))


if __name__ == "__main__":
    main()
