"""fg.compile(model) in an ordinary eager training loop, unchanged (out = cmodel(x); loss; backward; opt.step())
against the same loop on the uncompiled model, in one run with the same data, weights and threads; PyTorch
eager's loop too when torch is installed. Also the compiled plan's fused step (fg.compile(model, loss_fn,
optimizer, example_inputs=...)) as the ceiling a rewritten loop reaches.

    python benchmarks/bench_compile_model.py [--rounds 7] [--only mlp|transformer] [--cpu-time] [--save]

Every peer is timed in interleaved rounds with a pause before each (common.interleaved); medians,
the load average and the instruction-set level are reported. --cpu-time: one thread on every side,
each round taking each peer's best process CPU time (bench_attention.cpu_time), for a machine shared
with other jobs, where wall-clock timings mostly measure the neighbours. Ratios are eager / compiled
(above 1: the compiled loop is faster).
"""
import argparse
import sys

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from bench_compile import D, HEADS, LAYERS, T, VOCAB, flowgrad_model, torch_model
from bench_attention import cpu_time
from common import command_line, interleaved, load_average, machine, save, torch_peer


def data(case, batch):
    rng = np.random.default_rng(0)
    if case == "mlp":
        return (fg.tensor(rng.standard_normal((batch, 784)).astype(np.float32)),
                fg.tensor(rng.integers(0, 10, batch)))
    return fg.tensor(rng.integers(0, VOCAB, (batch, T))), fg.tensor(rng.integers(0, VOCAB, batch * T))


def loop_step(forward, opt, x, y):
    """One step of the user's eager loop."""
    def step():
        opt.zero_grad()
        loss = F.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
    return step


def optimizer(name, params):
    return fg.optim.SGD(params, lr=0.01, momentum=0.9) if name == "sgd" else fg.optim.AdamW(params, lr=1e-3)


def torch_step(case, batch, opt_name, x, y):
    import torch
    model = torch_model(case)
    opt = (torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if opt_name == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=1e-3))
    tx, ty = torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy()).long()

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(tx), ty).backward()
        opt.step()
    return step


def timed(peers, rounds, cpu):
    """{name: median seconds per call}: wall-clock interleaved rounds, or rounds of best CPU times."""
    if not cpu:
        return {name: r["median"] for name, r in interleaved(peers, rounds).items()}
    times = {name: [] for name in peers}
    for _ in range(rounds):
        for name, step in peers.items():
            times[name].append(cpu_time(step, repeat=3, calls=2))
    return {name: float(np.median(t)) for name, t in times.items()}


def run_case(case, batch, opt_name, rounds, torch, cpu):
    x, y = data(case, batch)
    eager_model, lazy_model, step_model = flowgrad_model(case), flowgrad_model(case), flowgrad_model(case)
    compiled = fg.compile(lazy_model)
    peers = {"eager": loop_step(eager_model, optimizer(opt_name, eager_model.parameters()), x, y),
             "compile_model": loop_step(compiled, optimizer(opt_name, compiled.parameters()), x, y)}
    fused = fg.compile(step_model, F.cross_entropy, optimizer(opt_name, step_model.parameters()), example_inputs=(x, y))
    peers["compiled_step"] = lambda: fused(x, y)
    if torch is not None:
        peers["torch_eager"] = torch_step(case, batch, opt_name, x, y)
    load_start = load_average()
    times = timed(peers, rounds, cpu)
    row = {"case": case, "batch": batch, "optimizer": opt_name, "rounds": rounds,
           "statistic": "median of interleaved rounds" + (" of best process CPU times, 1 thread" if cpu else ""),
           "load_average": [load_start, load_average()], "isa": fg.build_config()["isa"],
           "threads": fg.get_num_threads()}
    for name in ("eager", "compile_model", "compiled_step", "torch_eager"):
        row[f"{name}_ms"] = times[name] * 1e3 if name in times else None
    row["compile_model_vs_eager"] = row["eager_ms"] / row["compile_model_ms"]
    row["compiled_step_vs_eager"] = row["eager_ms"] / row["compiled_step_ms"]
    if row["torch_eager_ms"]:
        row["compile_model_vs_torch_eager"] = row["torch_eager_ms"] / row["compile_model_ms"]
    (plan,) = compiled.plans()
    row["saved_tensors"] = plan[1].saved
    row["traces"] = compiled.stats["traces"]
    return row


def describe(row):
    line = (f"{row['case']:11s} b{row['batch']:<4d} {row['optimizer']:5s}: eager loop {row['eager_ms']:8.3f} ms  "
            f"fg.compile(model) loop {row['compile_model_ms']:8.3f} ms -> {row['compile_model_vs_eager']:.2f}x  "
            f"(compiled step {row['compiled_step_ms']:8.3f} ms -> {row['compiled_step_vs_eager']:.2f}x)")
    if row["torch_eager_ms"]:
        line += f"  torch eager {row['torch_eager_ms']:8.3f} ms -> {row['compile_model_vs_torch_eager']:.2f}x"
    return line + f"  | load {row['load_average'][0]}-{row['load_average'][1]}  isa {row['isa']}  threads {row['threads']}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", choices=["mlp", "transformer"], help="run one case only")
    parser.add_argument("--cpu-time", action="store_true", help="one thread, process CPU time")
    args = parser.parse_args()
    if args.cpu_time:
        fg.set_num_threads(1)
    torch = torch_peer()
    info = machine()
    print(f"machine: {info}")
    results = []
    for case, batch in (("mlp", 64), ("mlp", 512), ("transformer", 16)):
        if args.only in (None, case):
            for opt_name in ("sgd", "adamw"):
                results.append(run_case(case, batch, opt_name, args.rounds, torch, args.cpu_time))
                print(describe(results[-1]), flush=True)
    if args.save:
        payload = {"machine": info, "model": {"transformer": dict(vocab=VOCAB, seq=T, dim=D, heads=HEADS, layers=LAYERS)},
                   "command": command_line(), "results": results}
        path = save(f"bench_compile_model-{info['isa']}", payload)
        print(f"saved {path}")


if __name__ == "__main__":
    main()
