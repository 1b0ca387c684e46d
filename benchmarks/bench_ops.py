"""Op-level speed against NumPy (and PyTorch when installed), measured in one run.

    python benchmarks/bench_ops.py [--save]

Targets (issue 2): matmul float32 >= 0.95x NumPy for n >= 256; tiny-op latency <= 1.5 us and
<= 0.5x PyTorch eager; 16M-float add and (a*b+c).relu() >= 1.0x NumPy's GB/s.
"""
import argparse
import sys

import numpy as np

import flowgrad as fg
from common import best_time, machine, save

try:
    import torch
except ImportError:
    torch = None


def bench_matmul():
    rows = []
    rng = np.random.default_rng(0)
    for n in (128, 256, 512, 1024, 2048):
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        ta, tb = fg.from_numpy(a), fg.from_numpy(b)
        flops = 2 * n ** 3
        t_np = best_time(lambda: a @ b)
        t_fg = best_time(lambda: ta @ tb)
        row = {"n": n, "numpy_gflops": flops / t_np / 1e9, "flowgrad_gflops": flops / t_fg / 1e9}
        row["ratio_vs_numpy"] = row["flowgrad_gflops"] / row["numpy_gflops"]
        rows.append(row)
        print(f"matmul n={n:5d}: flowgrad {row['flowgrad_gflops']:7.1f} GFLOP/s  numpy {row['numpy_gflops']:7.1f}"
              f"  ratio {row['ratio_vs_numpy']:.2f}x")
    return rows


def bench_tiny_op(rounds=5):
    """Python-to-result latency of a + b on 1-element tensors. Peers are measured in alternating
    rounds (best of all rounds kept) so that machine noise hits every library alike."""
    a, b = fg.tensor([1.0]), fg.tensor([2.0])
    na, nb = np.array([1.0], np.float32), np.array([2.0], np.float32)
    peers = {"flowgrad_us": lambda: a + b, "numpy_us": lambda: na + nb}
    if torch is not None:
        x, y = torch.tensor([1.0]), torch.tensor([2.0])
        peers["torch_us"] = lambda: x + y
    result = {name: float("inf") for name in peers}
    for _ in range(rounds):
        for name, fn in peers.items():
            result[name] = min(result[name], best_time(fn, repeat=3, min_time=0.3) * 1e6)
    line = f"tiny a+b: flowgrad {result['flowgrad_us']:.2f} us  numpy {result['numpy_us']:.2f} us"
    if torch is not None:
        result["ratio_vs_torch"] = result["flowgrad_us"] / result["torch_us"]
        line += f"  torch {result['torch_us']:.2f} us  (flowgrad/torch {result['ratio_vs_torch']:.2f}x)"
    print(line)
    return result


def bench_elementwise():
    n = 16 * 1024 * 1024
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    ta, tb, tc = fg.from_numpy(a), fg.from_numpy(b), fg.from_numpy(c)
    rows = {}
    cases = {  # name: (bytes touched by an ideal single pass, numpy fn, flowgrad fn)
        "add": (3 * 4 * n, lambda: a + b, lambda: ta + tb),
        "(a*b+c).relu()": (4 * 4 * n, lambda: np.maximum(a * b + c, 0), lambda: (ta * tb + tc).relu()),
    }
    for name, (nbytes, np_fn, fg_fn) in cases.items():
        t_np, t_fg = best_time(np_fn, repeat=5), best_time(fg_fn, repeat=5)
        row = {"numpy_gbs": nbytes / t_np / 1e9, "flowgrad_gbs": nbytes / t_fg / 1e9}
        row["ratio_vs_numpy"] = row["flowgrad_gbs"] / row["numpy_gbs"]
        rows[name] = row
        print(f"{name:15s} 16M floats: flowgrad {row['flowgrad_gbs']:6.2f} GB/s  numpy {row['numpy_gbs']:6.2f} GB/s"
              f"  ratio {row['ratio_vs_numpy']:.2f}x")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true", help="write JSON into benchmarks/results/")
    args = parser.parse_args()
    info = machine()
    print(f"machine: {info}")
    payload = {"machine": info, "command": "python " + " ".join(sys.argv),
               "matmul_float32": bench_matmul(), "tiny_op": bench_tiny_op(), "elementwise": bench_elementwise()}
    if args.save:
        print(f"saved {save('bench_ops', payload)}")


if __name__ == "__main__":
    main()
