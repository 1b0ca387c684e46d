"""fg.distributed on 2 local MPI ranks: all_reduce bandwidth (1-256 MB float32) against mpi4py
calling the same MPI library, and the step-time overhead of DistributedDataParallel (eager and
compiled) against the same per-rank batch without it, with every rank stepping at once.

    python benchmarks/bench_distributed.py [--save] [--variants default,spin,threads2] [--no-bandwidth]

Starts the ranks with flowgrad's launcher itself, once per variant (see VARIANTS): the defaults,
MPI busy-polling instead of yielding while it waits, and 2 compute threads per rank.
--no-bandwidth measures the DDP steps only (no mpi4py needed).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SIZES_MB = [1, 4, 16, 64, 256]


def rounds_of(fns, iters, rounds, dist, fg):
    """Per round, the mean seconds per call of each fn, timed by the slowest rank. The fns take
    turns within every round, so a change in the machine's load touches them all alike."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            elapsed = fg.tensor([(time.perf_counter() - start) / iters], dtype=fg.float64)
            dist.all_reduce(elapsed, op="max")
            times[k].append(elapsed.item())
    return times


def timed(fns, iters, rounds, dist, fg):
    """Best over rounds of the mean seconds per call of each fn."""
    return [min(t) for t in rounds_of(fns, iters, rounds, dist, fg)]


def paired(times, k, base):
    """Median over rounds of fn k's time over fn base's in the same round, minus one: on a machine
    whose load changes, times taken side by side compare better than the best of each."""
    return float(np.median(np.array(times[k]) / np.array(times[base]))) - 1


def bandwidth(rounds, dist, fg, size):
    from mpi4py import MPI
    comm, out = MPI.COMM_WORLD, []
    for mb in SIZES_MB:
        n = mb * 2**20 // 4
        iters = max(2, min(16, 64 // mb))
        t = fg.ones(n)
        a = np.ones(n, dtype=np.float32)
        times = rounds_of([lambda: dist.all_reduce(t), lambda: comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)],
                          iters, rounds, dist, fg)
        ours, peer = min(times[0]), min(times[1])
        bus = 2 * (size - 1) / size * n * 4 / 1e9  # bytes each rank sends and receives (ring)
        out.append({"mb": mb, "flowgrad_gbps": bus / ours, "mpi4py_gbps": bus / peer, "ratio": peer / ours,
                    "ratio_paired": 1 / (1 + paired(times, 0, 1))})
    return out


def ddp_overhead(rounds, dist, fg, bucket_mb):
    """One step (zero_grad, forward, backward, SGD update) of the same model on the same per-rank
    batch, every rank stepping at the same time: without DDP, with DDP's hooks but no communication
    (no_sync), with DDP, and compiled (fg.compile) without and with DDP."""
    import flowgrad.nn.functional as F
    from flowgrad import nn
    from flowgrad.nn.parallel import DistributedDataParallel

    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    ddp = DistributedDataParallel(model, bucket_mb=bucket_mb)
    opt = fg.optim.SGD(model.parameters(), lr=0.01)
    x, y = fg.randn(64, 784), fg.randint(0, 10, (64,))

    def step(net):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()

    def hooks_only():
        with ddp.no_sync():
            step(ddp)

    grads = fg.zeros(sum(p.numel() for p in model.parameters()))
    compiled = fg.compile(model, F.cross_entropy, opt, example_inputs=(x, y))
    compiled_ddp = fg.compile(ddp, F.cross_entropy, opt, example_inputs=(x, y))
    names = ["plain", "hooks_only", "ddp", "all_reduce_grads", "compiled", "compiled_ddp"]
    fns = [lambda: step(model), hooks_only, lambda: step(ddp), lambda: dist.all_reduce(grads, op="avg"),
           lambda: compiled(x, y), lambda: compiled_ddp(x, y)]
    times = rounds_of(fns, 10, 2 * rounds, dist, fg)
    ms = {k: 1e3 * min(t) for k, t in zip(names, times)}
    return {"model": "MLP 784-512-512-10, batch 64 per rank, SGD", "bucket_mb": bucket_mb,
            "buckets": len(ddp._reducer.bucket_indices), "threads_per_rank": fg.get_num_threads(),
            **{f"{k}_ms": v for k, v in ms.items()},
            "overhead_best": ms["ddp"] / ms["plain"] - 1, "overhead": paired(times, 2, 0),
            "hooks_overhead": paired(times, 1, 0), "compiled_overhead": paired(times, 5, 4)}


def worker(args):
    if args.bandwidth:
        from mpi4py import MPI  # noqa: F401  initialises MPI first; flowgrad then joins the same MPI_COMM_WORLD

    import flowgrad as fg
    import flowgrad.distributed as dist

    dist.init("mpi")
    result = {"world_size": dist.world_size(), "load_before": os.getloadavg()}
    if args.bandwidth:
        result["all_reduce"] = bandwidth(args.rounds, dist, fg, dist.world_size())
    result["ddp"] = [ddp_overhead(args.rounds, dist, fg, mb) for mb in (25, 1)]
    result["load_after"] = os.getloadavg()
    if dist.rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)


# (name, environment, what it shows); the first is flowgrad's default and also measures bandwidth
VARIANTS = [
    ("default", {}, "the launcher's defaults: cores / local ranks threads per rank (1 here), MPI yields while waiting"),
    ("spin", {"OMPI_MCA_mpi_yield_when_idle": "0"}, "as default, but MPI busy-polls while waiting (the old behaviour)"),
    ("threads2", {"FLOWGRAD_NUM_THREADS": "2"}, "as default, but 2 compute (BLAS) threads per rank: 4 threads on 2 cores"),
]


def run_variant(name, extra, args):
    env = dict(os.environ, **extra)
    cmd = [sys.executable, "-m", "flowgrad.distributed.run", "--nproc", "2", "--timeout", "900",
           __file__, "--worker", "--rounds", str(args.rounds)] + \
        (["--bandwidth"] if name == "default" and not args.no_bandwidth else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        sys.exit(f"benchmark job {name} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[0][len("RESULT "):])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--variants", default=",".join(v[0] for v in VARIANTS))
    parser.add_argument("--no-bandwidth", action="store_true", help="DDP steps only (no mpi4py needed)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bandwidth", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    sys.path.insert(0, os.path.dirname(__file__))
    from common import machine, save

    chosen = args.variants.split(",")
    results = {name: dict(run_variant(name, extra, args), env=extra, meaning=meaning)
               for name, extra, meaning in VARIANTS if name in chosen}
    if "all_reduce" in results.get("default", {}):
        print(f"{'all_reduce':>12} {'flowgrad GB/s':>14} {'mpi4py GB/s':>12} {'ratio':>6} {'paired':>7}")
        for r in results["default"]["all_reduce"]:
            print(f"{r['mb']:>9} MB {r['flowgrad_gbps']:>14.2f} {r['mpi4py_gbps']:>12.2f} {r['ratio']:>5.2f}x "
                  f"{r['ratio_paired']:>6.2f}x")
    print("DDP step, ms per step (slowest rank; every rank steps at once, so 'plain' is the fair baseline:\n"
          "the same per-rank batch and threads per process while the other rank runs too)")
    print("(ms: best round; overhead: median over rounds of the ratio to plain in the same round)")
    print(f"{'variant':>9} {'bucket':>6} {'plain':>7} {'hooks':>7} {'ddp':>7} {'overhead':>8} {'grads AR':>8} "
          f"{'compiled':>8} {'comp+ddp':>8} {'overhead':>8}  load")
    for name, r in results.items():
        for d in r["ddp"]:
            print(f"{name:>9} {d['bucket_mb']:>4}MB {d['plain_ms']:>7.2f} {d['hooks_only_ms']:>7.2f} {d['ddp_ms']:>7.2f} "
                  f"{100 * d['overhead']:>+7.1f}% {d['all_reduce_grads_ms']:>8.2f} {d['compiled_ms']:>8.2f} "
                  f"{d['compiled_ddp_ms']:>8.2f} {100 * d['compiled_overhead']:>+7.1f}%  "
                  f"{r['load_before'][0]:.1f}->{r['load_after'][0]:.1f}")
    if args.save:
        payload = {"machine": machine(), "command": "python benchmarks/bench_distributed.py " + " ".join(sys.argv[1:]),
                   "ranks": "2 local MPI ranks (Open MPI, shared memory)",
                   "note": "load = 1-minute load average before/after each job; other engineers were "
                           "building code on this 2-core machine during the run", "variants": results}
        print("saved", save("bench_distributed", payload))


if __name__ == "__main__":
    main()
