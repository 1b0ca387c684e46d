"""The compiled char transformer step's memory-bound row ops against PyTorch eager (issue 23).

    python benchmarks/bench_rowops.py [--rounds N] [--threads T] [--only OPS] [--save [--tag TAG]]

At the step's shapes (1024 rows of 128 floats, MLP hidden 1024x512, the model's 0.8 M
parameters): layer_norm, add_layer_norm (PyTorch: an add then layer_norm), the layer_norm
backward (autograd.grad on a retained graph; flowgrad's kernel is norm_backward), gelu and its
backward, the bias gradient's column sum, and an SGD-momentum and an AdamW step over the
transformer's parameter shapes (multi-tensor on both sides: foreach=True). Per op, the median over
interleaved rounds (common.interleaved) of each library's time per call, and torch/flowgrad
(above 1: flowgrad faster). The plan-only fused ops (gelu_backward_colsum, norm_backward
accumulating a residual's gradient, the multi-tensor updates) are timed inside the compiled
char transformer step with `step.profile()` (--profile: ms per step of every op, SGD and AdamW).
"""
import argparse
import collections
import os
import sys

import numpy as np

import flowgrad as fg
from bench_ewise import backward_pair
from common import interleaved, machine, save

import torch

ROWS, WIDTH, HIDDEN = 1024, 128, 512
# The char transformer's parameters: embedding, positions, 4 blocks (qkv, proj, 2 norms, MLP), norm, head.
PARAM_SHAPES = [(96, 128), (64, 128)] + [(384, 128), (384,), (128, 128), (128,), (128,), (128,), (128,), (128,),
                                         (512, 128), (512,), (128, 512), (128,)] * 4 + [(128,), (128,), (96, 128), (96,)]


def norm_cases(rng):
    x, r, g = (rng.standard_normal((ROWS, WIDTH), dtype=np.float32) for _ in range(3))
    w, b = (rng.standard_normal(WIDTH, dtype=np.float32) for _ in range(2))
    fx, fr, fw, fb = (fg.tensor(a) for a in (x, r, w, b))
    tx, tr, tw, tb = (torch.from_numpy(a.copy()) for a in (x, r, w, b))
    F, TF = fg.nn.functional, torch.nn.functional
    return {
        "layer_norm": (lambda: F.layer_norm(fx, WIDTH, fw, fb), lambda: TF.layer_norm(tx, (WIDTH,), tw, tb)),
        "add_layer_norm": (lambda: F.add_layer_norm(fx, fr, WIDTH, fw, fb),
                           lambda: (lambda s: (s, TF.layer_norm(s, (WIDTH,), tw, tb)))(tx + tr)),
        "layer_norm_backward": backward_pair(lambda v: F.layer_norm(v, WIDTH, fw, fb),
                                             lambda v: TF.layer_norm(v, (WIDTH,), tw, tb), x, g,
                                             params=(fw, fb, tw, tb)),
    }


def gelu_cases(rng):
    h, g = (rng.standard_normal((ROWS, HIDDEN), dtype=np.float32) for _ in range(2))
    fh, th = fg.tensor(h), torch.from_numpy(h.copy())
    TF = torch.nn.functional
    return {
        "gelu": (lambda: fg.gelu(fh), lambda: TF.gelu(th)),
        "gelu_tanh": (lambda: fg.gelu(fh, approximate="tanh"), lambda: TF.gelu(th, approximate="tanh")),
        "gelu_backward": backward_pair(fg.gelu, TF.gelu, h, g),
        "sum_dim0_512": (lambda: fh.sum(0), lambda: th.sum(0)),
    }


def optimizer_cases(rng):
    found = {}
    for name, make_fg, make_torch in (
            ("sgd_momentum", lambda ps: fg.optim.SGD(ps, lr=1e-3, momentum=0.9, foreach=True),
             lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9, foreach=True)),
            ("adamw", lambda ps: fg.optim.AdamW(ps, lr=1e-3, foreach=True),
             lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True))):
        values = [rng.standard_normal(s, dtype=np.float32) for s in PARAM_SHAPES]
        grads = [rng.standard_normal(s, dtype=np.float32) * 1e-3 for s in PARAM_SHAPES]
        fps = [fg.tensor(v, requires_grad=True) for v in values]
        tps = [torch.from_numpy(v.copy()).requires_grad_(True) for v in values]
        for p, gr in zip(fps, grads):
            p.grad = fg.tensor(gr)
        for p, gr in zip(tps, grads):
            p.grad = torch.from_numpy(gr.copy())
        found[name] = (make_fg(fps).step, make_torch(tps).step)
    return found


def profile_step(optimizer, steps=10):
    """ms per step of each op of the compiled char transformer step (step.profile(), averaged)."""
    import bench_compile as bc
    _, compiled, step = bc.flowgrad_steps("transformer", 16, optimizer, "cpu")
    for _ in range(5):
        compiled()
    x, y = (fg.tensor(a) for a in bc.batch_data("transformer", 16))
    ms, calls = collections.Counter(), collections.Counter()
    for _ in range(steps):
        for row in step.profile(x, y):
            ms[row["op"]] += row["ms"] / steps
            calls[row["op"]] += 1
    return [{"op": op, "per_step_ms": ms[op], "calls": calls[op] // steps} for op in sorted(ms)]  # by name: rows
    # keep their places between runs (bench_before_after.py pairs them by position)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated op names")
    parser.add_argument("--profile", action="store_true", help="also profile the compiled step (sgd, adamw)")
    parser.add_argument("--no-torch", action="store_true", help="time flowgrad alone (before/after comparisons)")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--tag", default="", help="suffix of the results file name (bench_rowops-TAG-DATE.json)")
    args = parser.parse_args()
    fg.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    only = set(filter(None, args.only.split(",")))
    rng = np.random.default_rng(0)
    rows = []
    for name, (f_fg, f_torch) in {**norm_cases(rng), **gelu_cases(rng), **optimizer_cases(rng)}.items():
        if only and name not in only:
            continue
        peers = {"flowgrad": f_fg} if args.no_torch else {"flowgrad": f_fg, "torch": f_torch}
        t = interleaved(peers, rounds=args.rounds)
        row = {"op": name, "flowgrad_us": t["flowgrad"]["median"] * 1e6}
        line = f"{name:20s} flowgrad {row['flowgrad_us']:8.1f} us"
        if "torch" in t:
            row["torch_us"] = t["torch"]["median"] * 1e6
            row["ratio_vs_torch"] = row["torch_us"] / row["flowgrad_us"]
            line += f"  torch {row['torch_us']:8.1f} us  torch/flowgrad {row['ratio_vs_torch']:.2f}x"
        rows.append(row)
        print(line, flush=True)
    profiles = {}
    if args.profile:
        for optimizer in ("sgd", "adamw"):
            profiles[optimizer] = profile_step(optimizer)
            print(f"compiled step ({optimizer}), ms per step:")
            for r in sorted(profiles[optimizer], key=lambda r: -r["per_step_ms"])[:14]:
                print(f"  {r['op']:32s} {r['per_step_ms']:7.3f} ms {r['calls']:4d} calls")
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; median of {args.rounds} rounds")
    if args.save:
        save("bench_rowops" + (f"-{args.tag}" if args.tag else ""),
             {"machine": machine(), "command": " ".join(sys.argv), "threads": args.threads, "load": load,
              "rows": rows, "step_profiles": profiles})


if __name__ == "__main__":
    sys.exit(main())
