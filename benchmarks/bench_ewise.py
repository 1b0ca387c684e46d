"""The non-GEMM kernels of a training step against PyTorch eager, measured in one run (issue 23).

    python benchmarks/bench_ewise.py [--rounds N] [--threads T] [--only OPS] [--save [--tag TAG]]

Per op and shape: the median over interleaved rounds of flowgrad's and PyTorch's time per call,
flowgrad's effective bandwidth (bytes the op must read and write once, over its time) and the
ratio torch_time / flowgrad_time (above 1: flowgrad faster). Backward kernels are timed through
autograd.grad on a retained graph, for both libraries alike. Shapes: the char transformer's
(1024x512 MLP hidden, 1024x128 model width, 16x64x128 a block's activations) and a batch-512
MLP's (512x512).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import flowgrad as fg
from common import best_time, machine, save

import torch

SHAPES = [(1024, 512), (1024, 128), (16, 64, 128), (512, 512)]


def cases(shape):
    """name -> (bytes moved, flowgrad fn, torch fn) for one shape."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape, dtype=np.float32)
    b = rng.standard_normal(shape, dtype=np.float32)
    bias = rng.standard_normal(shape[-1:], dtype=np.float32)
    nbytes = a.nbytes
    fa, fb, fbias = fg.tensor(a), fg.tensor(b), fg.tensor(bias)
    ta, tb, tbias = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(bias)
    found = {
        "add": (3 * nbytes, lambda: fa + fb, lambda: ta + tb),
        "add_bias": (2 * nbytes, lambda: fa + fbias, lambda: ta + tbias),
        "mul": (3 * nbytes, lambda: fa * fb, lambda: ta * tb),
        "mul_bias": (2 * nbytes, lambda: fa * fbias, lambda: ta * tbias),
        "sum_dim0": (nbytes, lambda: fa.reshape(-1, shape[-1]).sum(0), lambda: ta.reshape(-1, shape[-1]).sum(0)),
        "sum_last": (nbytes, lambda: fa.sum(-1), lambda: ta.sum(-1)),
        "softmax": (2 * nbytes, lambda: fg.nn.functional.softmax(fa, -1), lambda: torch.softmax(ta, -1)),
    }
    for name, fact, tact in (("relu", fg.relu, torch.relu), ("gelu", fg.gelu, torch.nn.functional.gelu),
                             ("tanh", fg.tanh, torch.tanh), ("sigmoid", fg.sigmoid, torch.sigmoid),
                             ("silu", fg.silu, torch.nn.functional.silu)):
        found[name] = (2 * nbytes, lambda f=fact: f(fa), lambda f=tact: f(ta))
        found[name + "_backward"] = (3 * nbytes,) + backward_pair(fact, tact, a, b)
    w = rng.standard_normal(shape[-1:], dtype=np.float32)
    fw, tw = fg.tensor(w), torch.from_numpy(w)
    found["layer_norm"] = (2 * nbytes, lambda: fg.nn.functional.layer_norm(fa, shape[-1:], fw, fbias),
                           lambda: torch.nn.functional.layer_norm(ta, shape[-1:], tw, tbias))
    # dx, dweight, dbias from g and x: reads g and x, writes dx
    found["layer_norm_backward"] = (3 * nbytes,) + backward_pair(
        lambda x, p=(fw, fbias): fg.nn.functional.layer_norm(x, shape[-1:], *p),
        lambda x, p=(tw, tbias): torch.nn.functional.layer_norm(x, shape[-1:], *p), a, b, params=(fw, fbias, tw, tbias))
    return found


def backward_pair(fact, tact, a, g, params=()):
    fx = fg.tensor(a, requires_grad=True)
    tx = torch.from_numpy(a.copy()).requires_grad_(True)
    for p in params:
        p.requires_grad_(True)
    fy, ty = fact(fx), tact(tx)
    fg_in = [fx] + [p for p in params if isinstance(p, fg.Tensor)]
    torch_in = [tx] + [p for p in params if isinstance(p, torch.Tensor)]
    fgrad, tgrad = fg.tensor(g), torch.from_numpy(g)
    return (lambda: fg.autograd.grad(fy, fg_in, fgrad, retain_graph=True),
            lambda: torch.autograd.grad(ty, torch_in, tgrad, retain_graph=True))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated op names")
    parser.add_argument("--sleep", type=float, default=0.3, help="seconds of rest after each PyTorch round")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--tag", default="", help="suffix of the results file name (bench_ewise-TAG-DATE.json)")
    args = parser.parse_args()
    fg.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    only = set(filter(None, args.only.split(",")))
    rows = []
    for shape in SHAPES:
        for name, (nbytes, f_fg, f_torch) in cases(shape).items():
            if only and name not in only:
                continue
            t_fg, t_torch = [], []
            for _ in range(args.rounds):  # interleaved: load changes hit both alike
                t_fg.append(best_time(f_fg, repeat=3, min_time=0.05))
                t_torch.append(best_time(f_torch, repeat=3, min_time=0.05))
                time.sleep(args.sleep)  # PyTorch's OpenMP workers spin a while after its last op
            row = {"op": name, "shape": list(shape), "flowgrad_us": statistics.median(t_fg) * 1e6,
                   "torch_us": statistics.median(t_torch) * 1e6}
            row["flowgrad_gbs"] = nbytes / row["flowgrad_us"] / 1e3
            row["ratio_vs_torch"] = row["torch_us"] / row["flowgrad_us"]
            rows.append(row)
            print(f"{name:20s} {'x'.join(map(str, shape)):>10s}: flowgrad {row['flowgrad_us']:8.1f} us"
                  f" ({row['flowgrad_gbs']:5.1f} GB/s)  torch {row['torch_us']:8.1f} us"
                  f"  torch/flowgrad {row['ratio_vs_torch']:.2f}x", flush=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; median of {args.rounds} rounds")
    if args.save:
        save("bench_ewise" + (f"-{args.tag}" if args.tag else ""), {"machine": machine(), "threads": args.threads, "load": load, "rows": rows})


if __name__ == "__main__":
    sys.exit(main())
