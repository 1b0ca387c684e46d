"""scaled_dot_product_attention forward+backward: the fused flash_attention op against the
composite (matmul + softmax, scaled_dot_product_attention_reference) and PyTorch, same threads.

    python benchmarks/bench_attention.py [--save] [--device cpu|cuda] [--cpu-time]

--cpu-time: one thread on each side, timed by the process's CPU time instead of the wall clock,
for a machine shared with other jobs (wall-clock timings there mostly measure the neighbours).

The first case is the char transformer's attention in bench_compile.py (B=16, 4 heads of 32, T=64).
"""
import argparse
import os
import time

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from common import best_time, machine, save

CASES = [  # (batch, heads, L, S, head dim, causal)
    (16, 4, 64, 64, 32, True), (16, 4, 64, 64, 64, True), (8, 4, 128, 128, 128, True),
    (4, 4, 256, 256, 64, True), (4, 4, 256, 256, 64, False), (2, 2, 1024, 1024, 64, True),
]


def cpu_time(fn, repeat=5, calls=3):
    """Best process CPU seconds per call (all threads of this process, none of the neighbours')."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls)
    return best


def fwd_bwd(attend, q, k, v, causal):
    def step():
        out = attend(q, k, v, is_causal=causal)
        out.backward(fg.ones_like(out))
    return step


def torch_fwd_bwd(tq, tk, tv, causal):
    import torch

    def step():
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        out.backward(torch.ones_like(out))
    return step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cpu-time", action="store_true")
    args = parser.parse_args()
    if args.cpu_time:
        fg.set_num_threads(1)
    timer = cpu_time if args.cpu_time else best_time
    try:
        import torch
        torch.set_num_threads(fg.get_num_threads())
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    rows = []
    for b, h, L, S, e, causal in CASES:
        arrays = [rng.standard_normal((b, h, n, e)).astype(np.float32) for n in (L, S, S)]
        q, k, v = (fg.tensor(a).to(args.device) for a in arrays)
        for t in (q, k, v):
            t.requires_grad = True
        row = {"shape": [b, h, L, S, e], "causal": causal,
               "fused_ms": 1e3 * timer(fwd_bwd(F.scaled_dot_product_attention, q, k, v, causal)),
               "composite_ms": 1e3 * timer(fwd_bwd(F.scaled_dot_product_attention_reference, q, k, v, causal))}
        if torch is not None:
            dev = "cuda" if args.device == "cuda" else "cpu"
            tq, tk, tv = (torch.tensor(a, device=dev, requires_grad=True) for a in arrays)
            row["torch_ms"] = 1e3 * timer(torch_fwd_bwd(tq, tk, tv, causal))
        rows.append(row)
        print(f"B={b} H={h} L={L} S={S} E={e} causal={causal}: fused {row['fused_ms']:.3f} ms, "
              f"composite {row['composite_ms']:.3f} ms, torch {row.get('torch_ms', float('nan')):.3f} ms "
              f"(fused/torch {row['fused_ms'] / row.get('torch_ms', float('nan')):.2f}x)")
    if args.save:
        save("bench_attention", {"machine": machine(), "device": args.device, "load_average": os.getloadavg(),
                                 "timer": "process CPU time, 1 thread" if args.cpu_time else "wall clock",
                                 "fwd_bwd": rows})


if __name__ == "__main__":
    main()
