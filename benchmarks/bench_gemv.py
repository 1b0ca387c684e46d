"""Single-row linears (x W^T, batch 1, and a few rows): flowgrad's linear against PyTorch's, d = 256 .. 4096,
with and without bias, at the ISA level in force (FLOWGRAD_ISA). --form matmul times x W instead (W row-major,
(K, N): an input gradient at batch 1, or `x @ W` in hand-written models), flowgrad's matmul against PyTorch's.

    python benchmarks/bench_gemv.py [--rows 1] [--dims 256 1024 4096] [--threads 1] [--rounds 7]
                                    [--form linear|matmul] [--from-memory MB] [--save NAME]

Interleaved rounds, medians; ratio = flowgrad time / PyTorch time (below 1: flowgrad faster). The PyTorch peer
is skipped when torch is not installed (the flowgrad times still print).

By default each peer multiplies by one W, which stays in the caches as far as they hold it (a 2048 x 2048
float32 W is 16 MB: in L3 on large-L3 machines, from memory on others). --from-memory MB gives each peer enough
copies of W to pass MB megabytes and takes the next one on every call, so that W comes from memory (make MB
larger than the L3: `lscpu`); each row records its copies.
"""
import argparse
import itertools
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import interleaved, load_average, machine, save  # noqa: E402

import flowgrad as fg  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1])
    parser.add_argument("--dims", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--form", choices=["linear", "matmul"], default="linear",
                        help="linear: x W^T (+ b); matmul: x W, W row-major (default linear)")
    parser.add_argument("--from-memory", type=int, default=0, metavar="MB",
                        help="copies of W per peer passing MB megabytes, one per call (default: one W)")
    parser.add_argument("--save", default=None, help="save as benchmarks/results/bench_gemv-NAME-<date>.json")
    args = parser.parse_args()
    fg.set_num_threads(args.threads)
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    rows = []
    for m in args.rows:
        for d in args.dims:
            for bias in (False, True) if args.form == "linear" else (False,):
                copies = max(1, -(-args.from_memory * 2**20 // (d * d * 4)))
                x = rng.standard_normal((m, d), dtype=np.float32)
                ws = [rng.standard_normal((d, d), dtype=np.float32) for _ in range(copies)]
                b = rng.standard_normal(d, dtype=np.float32)
                fx, fb = fg.tensor(x), fg.tensor(b) if bias else None
                fws = [fg.tensor(w) for w in ws]
                fw = itertools.cycle(fws)
                ours = (lambda w: fg.nn.functional.linear(fx, w, fb)) if args.form == "linear" else (
                    lambda w: fg.matmul(fx, w))
                peers = {"flowgrad": lambda: ours(next(fw))}
                if torch is not None:
                    tx, tb = torch.from_numpy(x), torch.from_numpy(b) if bias else None
                    tws = [torch.from_numpy(w) for w in ws]  # NumPy's memory; flowgrad's tensors are copies
                    tw = itertools.cycle(tws)
                    theirs = (lambda w: torch.nn.functional.linear(tx, w, tb)) if args.form == "linear" else (
                        lambda w: torch.matmul(tx, w))
                    peers["torch"] = lambda: theirs(next(tw))
                    np.testing.assert_allclose(ours(fws[0]).numpy(), theirs(tws[0]).numpy(), rtol=1e-3,
                                               atol=1e-3 * np.sqrt(d))
                times = interleaved(peers, rounds=args.rounds, min_time=0.02, gap=0.05)
                row = {"form": args.form, "rows": m, "d": d, "bias": bias, "copies": copies, "load": load_average(),
                       **{name: t["median"] for name, t in times.items()}}
                line = f"{args.form} rows {m} d {d:5d} bias {bias!s:5}: flowgrad {row['flowgrad'] * 1e6:8.1f} us"
                if torch is not None:
                    row["ratio"] = row["flowgrad"] / row["torch"]
                    line += f"  torch {row['torch'] * 1e6:8.1f} us  ratio {row['ratio']:.2f}"
                print(line, flush=True)
                rows.append(row)
    if args.save:
        payload = {"machine": machine(), "command": "python " + " ".join(["benchmarks/bench_gemv.py"] + sys.argv[1:]),
                   "config": vars(args), "results": rows}
        print("saved", save(f"bench_gemv-{args.save}", payload))


if __name__ == "__main__":
    main()
