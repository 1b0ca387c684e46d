"""How long fg.compile takes for a GPT-2-small-sized language model, beside the steps it makes.

    python benchmarks/bench_compile_time.py [--layers 12 20] [--save] [--profile]

The model (issue 21): token embedding (vocabulary 50304) + learned positions, `layers` causal
nn.TransformerBlock(768, 12 heads), LayerNorm, an untied Linear head (about 162M parameters at 12
layers); batch 1, T=64, AdamW. For each size it prints the compile time (tracing on shape-only
tensors, then the plan's build with milliseconds per pass), the first compiled step (it makes the
first update), a steady compiled step and an eager step. Goal: compile <= 2 s on a 2-core CPU and
no more than one eager step; compile time grows in proportion to the layers. `--profile` prints
where the 12-layer compile's time goes (cProfile). `--save` writes
benchmarks/results/bench_compile_time-<date>.json with the machine.
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from common import machine, save, transformer_lm

VOCAB, T, D, HEADS, BATCH = 50304, 64, 768, 12, 1


def seconds(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def measure(layers, profile=False):
    fg.manual_seed(0)
    model = transformer_lm(VOCAB, T, D, HEADS, layers)
    opt = fg.optim.AdamW(model.parameters(), lr=3e-4)
    rng = np.random.default_rng(0)
    x, y = fg.tensor(rng.integers(0, VOCAB, (BATCH, T))), fg.tensor(rng.integers(0, VOCAB, BATCH * T))
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    compile_s, step = seconds(lambda: fg.compile(model, F.cross_entropy, opt, example_inputs=(x, y)))
    if profiler:
        profiler.disable()
    first_s, _ = seconds(lambda: step(x, y).item())
    steady_s = min(seconds(lambda: step(x, y).item())[0] for _ in range(2))

    def eager():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    eager_s = min(seconds(eager)[0] for _ in range(2))
    plan = step.plan
    row = {"layers": layers, "parameters": sum(p.numel() for p in model.parameters()),
           "instructions": step.stats["instructions"], "compile_s": compile_s,
           "compile_phases_s": getattr(step, "compile_seconds", None),
           "pass_ms": plan.pass_ms() if hasattr(plan, "pass_ms") else None,
           "first_step_s": first_s, "steady_step_s": steady_s, "eager_step_s": eager_s}
    return row, profiler


def report(row):
    print(f"{row['layers']} layers, {row['parameters'] / 1e6:.1f}M parameters, {row['instructions']} instructions")
    phases = row["compile_phases_s"]
    detail = f" (trace {phases['trace']:.2f} s, plan {phases['plan']:.2f} s)" if phases else ""
    print(f"  compile        {row['compile_s']:7.2f} s{detail}")
    if row["pass_ms"]:
        print("  plan build     " + ", ".join(f"{name} {ms:.1f} ms" for name, ms in row["pass_ms"]))
    print(f"  first step     {row['first_step_s']:7.2f} s (the first update)")
    print(f"  steady step    {row['steady_step_s']:7.2f} s")
    print(f"  eager step     {row['eager_step_s']:7.2f} s")
    print(f"  compile / eager step: {row['compile_s'] / row['eager_step_s']:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="+", default=[12, 20])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile the first size's compile")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (numbers need a quiet machine)")
    rows = []
    for i, layers in enumerate(args.layers):
        row, profiler = measure(layers, profile=args.profile and i == 0)
        report(row)
        rows.append(row)
        if profiler:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
            print(out.getvalue())
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(f"compile time per layer: {a['compile_s'] / a['layers']:.3f} s ({a['layers']} layers), "
              f"{b['compile_s'] / b['layers']:.3f} s ({b['layers']} layers)")
    if args.save:
        print("saved", save("bench_compile_time", {"machine": machine(), "load_average": load,
                                                   "command": "python benchmarks/bench_compile_time.py " + " ".join(sys.argv[1:]),
                                                   "batch": BATCH, "T": T, "d": D, "heads": HEADS,
                                                   "vocab": VOCAB, "results": rows}))


if __name__ == "__main__":
    main()
