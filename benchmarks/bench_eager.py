"""Eager dispatch cost against PyTorch eager: the run_op path stage by stage, and an eager training step.

    python benchmarks/bench_eager.py [--rounds 7] [--save]

Targets (issue 23): a tiny op <= 0.5x PyTorch's time with autograd on and off; a hidden-style
MLP 784-512-512-10 SGD eager step >= 1.0x PyTorch at batch 64 and 512. Libraries run in
interleaved rounds (medians reported) with the same thread count, and the load average is
printed: on a shared machine the ratios, not the absolute times, are what to compare.

The stages of run_op (ops/registry.cpp) are isolated by calls that add one stage at a time:
  fg.add (no grad inputs)     op device, autocast mode, shape rule, allocation, kernel, modes after
  a + b                       the Python operator: its number slot calls the op directly
                              (bindings/fast_paths.cpp; fg.add and a.add_(b) are C functions too)
  a + 1.0                     + a Python scalar made a weak-typed tensor (binary_operands)
  a + b, inputs need grad     + the autograd mode's tape record (a Node, edges, saved specs)
  same under fg.no_grad()     the record skipped by grad mode (context read only)
  a.add_(b)                   in-place path: in-place check mode, version bump, no allocation
  under fg.autocast('cpu')    + the autocast mode's policy lookup (add follows its inputs: no cast)
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import flowgrad as fg
from common import SWITCH_GAP, machine, save

try:
    import torch
except ImportError:
    torch = None


def per_call_us(fn, number=1000, loops=5):
    """Microseconds per call of fn: the best of `loops` timed loops of `number` calls (on a loaded
    machine the best loop is the one least interrupted)."""
    fn()
    best = float("inf")
    for _ in range(loops):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / number * 1e6


def stage_cases():
    """name -> (flowgrad fn, torch fn or None) for 1-element float32 operands."""
    a, b = fg.tensor([1.0]), fg.tensor([2.0])
    ga, gb = fg.tensor([1.0], requires_grad=True), fg.tensor([2.0], requires_grad=True)
    cases = {"fg.add": (lambda: fg.add(a, b), None), "a + b": (lambda: a + b, None),
             "a + 1.0": (lambda: a + 1.0, None), "a + b, grad": (lambda: ga + gb, None)}

    def no_grad_add():
        with fg.no_grad():
            return ga + gb

    def autocast_add():
        with fg.autocast("cpu"):
            return a + b
    cases["a + b, grad, no_grad()"] = (no_grad_add, None)
    cases["a.add_(b)"] = (lambda: a.add_(b), None)
    cases["a + b, autocast block"] = (autocast_add, None)
    if torch is not None:
        x, y = torch.tensor([1.0]), torch.tensor([2.0])
        gx, gy = torch.tensor([1.0], requires_grad=True), torch.tensor([2.0], requires_grad=True)

        def torch_no_grad_add():
            with torch.no_grad():
                return gx + gy

        def torch_autocast_add():
            with torch.autocast("cpu"):
                return x + y
        torch_fns = {"fg.add": lambda: torch.add(x, y), "a + b": lambda: x + y, "a + 1.0": lambda: x + 1.0,
                     "a + b, grad": lambda: gx + gy,
                     "a + b, grad, no_grad()": torch_no_grad_add, "a.add_(b)": lambda: x.add_(y),
                     "a + b, autocast block": torch_autocast_add}
        cases = {name: (fns[0], torch_fns[name]) for name, fns in cases.items()}
    return cases


def mlp_step(lib, batch):
    """One eager SGD step of an MLP 784-512-512-10 with cross-entropy on fixed random data."""
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((batch, 784)).astype(np.float32)
    y_np = rng.integers(0, 10, batch)
    if lib == "flowgrad":
        fg.manual_seed(0)
        nn = fg.nn
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        opt = fg.optim.SGD(model.parameters(), lr=1e-2)
        x, y, loss_fn = fg.tensor(x_np), fg.tensor(y_np), fg.nn.functional.cross_entropy
    else:
        torch.manual_seed(0)
        nn = torch.nn
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        x, y, loss_fn = torch.tensor(x_np), torch.tensor(y_np), torch.nn.functional.cross_entropy

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return step


def interleaved(peers, rounds, timer):
    """Median over `rounds` of timer(fn) for each peer, the peers alternating within each round."""
    samples = {name: [] for name in peers}
    for _ in range(rounds):
        for name, fn in peers.items():
            time.sleep(SWITCH_GAP)  # no library's spinning threads overlap the other's timing
            samples[name].append(timer(fn))
    return {name: statistics.median(values) for name, values in samples.items()}


def step_ms(step, steps=10):
    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--save", action="store_true", help="write JSON into benchmarks/results/")
    args = parser.parse_args()
    if torch is not None:
        torch.set_num_threads(fg.get_num_threads())
    info = machine()
    print(f"machine: {info}  load average at start: {os.getloadavg()[0]:.1f}")
    payload = {"machine": info, "command": "python " + " ".join(sys.argv), "stages_us": {}, "mlp_sgd_ms": {}}
    for name, (fg_fn, torch_fn) in stage_cases().items():
        peers = {"flowgrad": fg_fn} | ({"torch": torch_fn} if torch_fn else {})
        row = interleaved(peers, args.rounds, per_call_us)
        line = f"{name:24s} flowgrad {row['flowgrad']:6.2f} us"
        if "torch" in row:
            row["ratio"] = row["flowgrad"] / row["torch"]
            line += f"  torch {row['torch']:6.2f} us  flowgrad/torch {row['ratio']:.2f}x"
        payload["stages_us"][name] = row
        print(line)
    for batch in (64, 512):
        peers = {"flowgrad": mlp_step("flowgrad", batch)} | ({"torch": mlp_step("torch", batch)} if torch else {})
        row = interleaved(peers, args.rounds, step_ms)
        line = f"MLP SGD eager batch {batch:3d}: flowgrad {row['flowgrad']:6.2f} ms"
        if "torch" in row:
            row["speedup"] = row["torch"] / row["flowgrad"]
            line += f"  torch {row['torch']:6.2f} ms  speed vs torch {row['speedup']:.2f}x"
        payload["mlp_sgd_ms"][str(batch)] = row
        print(line)
    payload["load_average_end"] = os.getloadavg()[0]
    print(f"load average at end: {payload['load_average_end']:.1f} (ratios need confirming on a quiet machine)")
    if args.save:
        print(f"saved {save('bench_eager', payload)}")


if __name__ == "__main__":
    main()
