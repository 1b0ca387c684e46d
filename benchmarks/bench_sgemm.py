"""flowgrad's own AVX-512 float32 GEMM (kernels/linalg/sgemm_cpu.cpp) against the linked BLAS
(FLOWGRAD_SGEMM=blas), NumPy and PyTorch, on the products of the benchmarked training steps.

    python benchmarks/bench_sgemm.py [--rounds 5] [--threads 2] [--save]

Each round starts one process per flowgrad setting (the setting is read at import): the default one
times fg.matmul, NumPy's `@` and torch.matmul in alternating batches (a pause between libraries, so
no library's spinning threads overlap another's timing); the FLOWGRAD_SGEMM=blas one times
fg.matmul alone. Rounds alternate the two processes; the table shows medians over rounds, GFLOP/s
= 2MKN / seconds. Shapes are (M, K, N) with A (M, K) or its transpose (tA: stored (K, M)) and B
likewise: a linear's forward is A @ W^T (tB), its input gradient G @ W, its weight gradient G^T @ X
(tA). fg.matmul sends shapes where the AVX-512 kernel does not beat OpenBLAS (M < 4, N < 32, tiny
products; kernels/linalg/gemm_cpu.cpp) to the BLAS, so both columns match there.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import interleaved, load_average, machine, save  # noqa: E402

# (label, M, K, N, trans_a, trans_b)
SHAPES = [
    ("MLP b512 fc1 forward", 512, 784, 512, False, True),
    ("MLP b512 fc2 input grad", 512, 512, 512, False, False),
    ("MLP b512 fc1 weight grad", 512, 512, 784, True, False),
    ("MLP b64 fc1 forward", 64, 784, 512, False, True),
    ("MLP b64 fc1 weight grad", 512, 64, 784, True, False),
    ("MLP head forward (N=10)", 512, 512, 10, False, True),
    ("MLP head input grad (K=10)", 512, 10, 512, False, False),
    ("MLP head weight grad (M=10)", 10, 512, 512, True, False),
    ("transformer qkv forward", 1024, 128, 384, False, True),
    ("transformer mlp up forward", 1024, 128, 512, False, True),
    ("transformer mlp down input grad", 1024, 128, 512, False, False),
    ("transformer mlp up weight grad", 512, 1024, 128, True, False),
    ("transformer head forward", 1024, 128, 96, False, True),
    ("transformer proj forward", 1024, 128, 128, False, True),
    ("transformer mlp down forward", 1024, 512, 128, False, True),
    ("transformer qkv input grad", 1024, 384, 128, False, False),
    ("square 1024", 1024, 1024, 1024, False, False),
    ("square 128", 128, 128, 128, False, False),
    ("tiny 32", 32, 32, 32, False, False),
    ("batch 8 through a layer", 8, 784, 512, False, True),
    ("batch 1 through a layer", 1, 784, 512, False, True),
    ("matrix-vector 1x512x512", 1, 512, 512, False, False),
]


def operands(m, k, n, ta, tb):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
    return a, b


def child(threads, peers_wanted):
    import flowgrad as fg
    fg.set_num_threads(threads)
    out = {"sgemm": fg.build_config()["sgemm"], "seconds": {}}
    torch = None
    if "torch" in peers_wanted:
        try:
            import torch
            torch.set_num_threads(threads)
        except ImportError:
            torch = None
    for label, m, k, n, ta, tb in SHAPES:
        a, b = operands(m, k, n, ta, tb)
        x, y = fg.tensor(a), fg.tensor(b)
        x, y = (x.T if ta else x), (y.T if tb else y)
        na, nb = (a.T if ta else a), (b.T if tb else b)
        np.testing.assert_allclose(fg.matmul(x, y).numpy(), na.astype(np.float64) @ nb.astype(np.float64),
                                   rtol=1e-4, atol=1e-3 * np.sqrt(k))
        peers = {"flowgrad": lambda x=x, y=y: fg.matmul(x, y)}
        if "numpy" in peers_wanted:
            peers["numpy"] = lambda na=na, nb=nb: na @ nb
        if torch is not None:
            tx, ty = torch.from_numpy(a), torch.from_numpy(b)
            tx, ty = (tx.T if ta else tx), (ty.T if tb else ty)
            peers["torch"] = lambda tx=tx, ty=ty: torch.matmul(tx, ty)
        timed = interleaved(peers, rounds=1, min_time=0.05, gap=0.05 if len(peers) == 1 else 0.3)
        out["seconds"][label] = {name: r["median"] for name, r in timed.items()}
    print(json.dumps(out))


def run_child(setting, threads, peers):
    env = dict(os.environ, FLOWGRAD_SGEMM=setting, FLOWGRAD_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, __file__, "--child", ",".join(peers), "--threads", str(threads)],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        return child(args.threads, args.child.split(","))
    loads = [load_average()]
    samples = {}  # (label, contender) -> seconds per round
    kernel = None
    for _ in range(args.rounds):
        own = run_child("avx512", args.threads, ["torch", "numpy"])
        kernel = own["sgemm"]
        blas = run_child("blas", args.threads, [])
        for label, times in own["seconds"].items():
            for name, seconds in times.items():
                samples.setdefault((label, "avx512" if name == "flowgrad" else name), []).append(seconds)
            samples.setdefault((label, "blas"), []).append(blas["seconds"][label]["flowgrad"])
        loads.append(load_average())
    if kernel != "avx512":
        print(f"note: this CPU or build has no AVX-512 kernel (sgemm={kernel}): both flowgrad columns run the BLAS")
    header = f"{'product (M x K x N)':<44} {'ours':>7} {'BLAS':>7} {'NumPy':>7} {'torch':>7}  ours/BLAS ours/torch"
    print(header)
    table = []
    for label, m, k, n, ta, tb in SHAPES:
        med = {name: statistics.median(samples[(label, name)]) for name in ("avx512", "blas", "numpy", "torch")
               if (label, name) in samples}
        flops = 2 * m * k * n
        gf = {name: flops / s / 1e9 for name, s in med.items()}
        shape = f"{m}x{k}x{n}{' tA' if ta else ''}{' tB' if tb else ''}"
        row = {"label": label, "shape": shape, "gflops": gf, "seconds": med,
               "speedup_vs_blas": med["blas"] / med["avx512"],
               "speedup_vs_torch": med["torch"] / med["avx512"] if "torch" in med else None}
        table.append(row)
        torch_ratio = f"{row['speedup_vs_torch']:.2f}x" if row["speedup_vs_torch"] else "-"
        print(f"{label + ' ' + shape:<44} {gf['avx512']:7.1f} {gf['blas']:7.1f} {gf.get('numpy', 0):7.1f} "
              f"{gf.get('torch', 0):7.1f}  {row['speedup_vs_blas']:8.2f}x {torch_ratio:>9}")
    print(f"GFLOP/s, medians of {args.rounds} rounds, {args.threads} threads; load average {loads}")
    if args.save:
        path = save("bench_sgemm", {"machine": machine(), "threads": args.threads, "rounds": args.rounds,
                                    "load_average": loads, "sgemm": kernel, "results": table,
                                    "command": " ".join(["python", "benchmarks/bench_sgemm.py"] + sys.argv[1:])})
        print("saved", path)


if __name__ == "__main__":
    main()
