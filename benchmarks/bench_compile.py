"""Compiled training steps (fg.compile) against our eager steps, PyTorch eager and torch.compile, in
one run with the same data and threads; also the step's own GEMMs run alone (its physical floor:
every matmul and linear product of the plan with the plan's shapes and layouts), the rest of the step (step - GEMMs),
the step's own profile (step.profile(): time in its non-GEMM instructions, as a share of the profiled step),
the same products through PyTorch's BLAS (torch.matmul, same layouts: how far the two BLAS libraries
differ on this machine, and so PyTorch eager's own rest), and the memory plan.

    python benchmarks/bench_compile.py [--rounds 7] [--only chain|mlp|transformer] [--save] [--tag NAME]
                                       [--device cpu|cuda] [--no-torch-compile] [--min-time SECONDS]

Every peer of a case is timed in interleaved rounds with a pause before each (common.interleaved:
spinning BLAS/OpenMP threads of one library must not overlap another's timing); medians and the
load average are reported.

Targets (issue 23), CPU: char transformer (4 layers, d=128, 4 heads, T=64, B=16) compiled >= 1.3x
PyTorch eager and >= 1.1x torch.compile with SGD and AdamW, its non-GEMM rest <= 20% of the step;
MLP 784-512-512-10 compiled >= 1.2x PyTorch eager at batch 512 and within 10% of its GEMMs alone;
eager MLP steps >= 1.0x PyTorch eager; arena/naive <= 0.5.
"""
import argparse
import re
import sys
import time

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn
from bench_train import torch_block
from common import SWITCH_GAP, add_min_time, command_line, interleaved, load_average, machine, save, torch_peer, transformer_lm

VOCAB, T, D, HEADS, LAYERS = 96, 64, 128, 4, 4


def flowgrad_model(case):
    fg.manual_seed(0)
    if case == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    return transformer_lm(VOCAB, T, D, HEADS, LAYERS)


def torch_model(case):
    import torch
    torch.manual_seed(0)
    if case == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                   torch.nn.ReLU(), torch.nn.Linear(512, 10))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens, self.positions = torch.nn.Embedding(VOCAB, D), torch.nn.Parameter(torch.randn(T, D) * 0.02)
            self.blocks = torch.nn.Sequential(*[torch_block(D, HEADS) for _ in range(LAYERS)])
            self.norm, self.head = torch.nn.LayerNorm(D), torch.nn.Linear(D, VOCAB)

        def forward(self, idx):
            return self.head(self.norm(self.blocks(self.tokens(idx) + self.positions))).reshape(-1, VOCAB)
    return Model()


def batch_data(case, batch):
    rng = np.random.default_rng(0)
    if case == "mlp":
        return rng.standard_normal((batch, 784)).astype(np.float32), rng.integers(0, 10, batch)
    return rng.integers(0, VOCAB, (batch, T)), rng.integers(0, VOCAB, batch * T)


def optimizer(lib, name, params):
    if lib == "torch":
        import torch
        return torch.optim.SGD(params, lr=0.01, momentum=0.9) if name == "sgd" else torch.optim.AdamW(params, lr=1e-3)
    return fg.optim.SGD(params, lr=0.01, momentum=0.9) if name == "sgd" else fg.optim.AdamW(params, lr=1e-3)


def flowgrad_steps(case, batch, opt_name, device):
    x, y = batch_data(case, batch)
    x, y = fg.tensor(x).to(device), fg.tensor(y).to(device)
    sync = fg.cuda.synchronize if device != "cpu" else (lambda: None)
    model = flowgrad_model(case).to(device)
    opt = optimizer("flowgrad", opt_name, model.parameters())

    def eager():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        sync()
    cmodel = flowgrad_model(case).to(device)
    copt = optimizer("flowgrad", opt_name, cmodel.parameters())
    step = fg.compile(cmodel, F.cross_entropy, copt, example_inputs=(x, y))

    def compiled():
        step(x, y)
        sync()
    return eager, compiled, step


def torch_steps(case, batch, opt_name, device, with_compile=True):
    import torch
    x, y = batch_data(case, batch)
    x, y = torch.tensor(x).to(device), torch.tensor(y).to(device)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    model = torch_model(case).to(device)
    opt = optimizer("torch", opt_name, model.parameters())

    def eager():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sync()

    if not with_compile:
        print("  torch.compile skipped: --no-torch-compile")
        return eager, None
    compiled = None
    try:  # torch.compile where it works on this machine (it needs a C++ compiler for the CPU)
        cmodel = torch.compile(torch_model(case).to(device))
        copt = optimizer("torch", opt_name, cmodel.parameters())

        def compiled():
            copt.zero_grad()
            torch.nn.functional.cross_entropy(cmodel(x), y).backward()
            copt.step()
            sync()
        compiled()
    except Exception as e:  # noqa: BLE001  (reported, not hidden)
        print(f"  torch.compile unavailable: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        compiled = None
    return eager, compiled


def plan_gemms(step, device, torch=None):
    """The GEMMs of a compiled step run alone (the physical floor of the step): every matmul of its
    plan (both products of a matmul_pair, one after the other) with the plan's shapes and operand
    layouts (a transposed view stays a transposed view), and
    the product of every linear (linear_<act>) as x @ W^T over its flattened rows, on fresh random
    operands. Returns a function running them all, their FLOPs, and (with torch given) a function
    running the same products, same layouts, with torch.matmul: PyTorch's BLAS on this step's GEMMs."""
    specs = []  # per product: ((shape, transposed) of a, (shape, transposed) of b)
    for row in step._plan.ir():
        shapes = row["input_shapes"]
        if row["op"].startswith("linear"):
            (*lead, k), (n, _) = shapes[0], shapes[1]
            specs.append((((int(np.prod(lead, dtype=np.int64)), k), False), ((k, n), True)))
        elif row["op"] in ("matmul", "matmul_pair"):  # a pair: two products, (a1, b1, a2, b2)
            operands = [(tuple(shape), bool(re.search(r"strides \(1, \d+\)", name)) and len(shape) == 2)
                        for name, shape in zip(row["inputs"], shapes)]
            specs += [tuple(operands[first:first + 2]) for first in range(0, len(operands), 2)]
    flops = sum(2 * int(np.prod(a, dtype=np.int64)) * b[-1] for (a, _), (b, _) in specs)  # (..., m, k) @ (k, n)
    rng = np.random.default_rng(0)

    def operand(shape, transposed, make):
        value = make(rng.standard_normal(shape[::-1] if transposed else shape).astype(np.float32))
        return value.t() if transposed else value

    def runner(make, matmul, sync):
        operands = [(operand(*a, make), operand(*b, make)) for a, b in specs]

        def run():
            for a, b in operands:
                matmul(a, b)
            sync()
        return run
    ours = runner(lambda v: fg.tensor(v).to(device), fg.matmul,
                  fg.cuda.synchronize if device != "cpu" else (lambda: None))
    theirs = None
    if torch is not None:
        theirs = runner(lambda v: torch.from_numpy(v).to(device), torch.matmul,
                        torch.cuda.synchronize if device != "cpu" else (lambda: None))
    return ours, flops, theirs


CHAIN_OPS, CHAIN_SIZE = 100, 64


class Chain(nn.Module):
    """100 small elementwise ops and a sum (and their backward): a plan's per-instruction overhead."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(fg.ones(CHAIN_SIZE))

    def forward(self, x):
        return chain(x * self.scale).sum()


def chain(x):
    for i in range(CHAIN_OPS // 4):
        x = (x * 1.0001 + 0.001).tanh().neg() if i % 2 else (x * 0.9999 - 0.001).tanh().neg()
    return x


def chain_per_op(rounds, min_time):
    """Microseconds per plan instruction, 100 ops on 64 floats and their backward: compiled plan vs the
    same step in our eager mode vs PyTorch eager (each time divided by the plan's instruction count)."""
    x = fg.randn(CHAIN_SIZE)
    model = Chain()
    step = fg.compile(model, example_inputs=(x,))

    def eager():
        model.scale.grad = None
        model(x).backward()
    peers = {"compiled": lambda: step(x), "eager": eager}
    try:
        import torch
        tx, scale = torch.tensor(x.numpy()), torch.ones(CHAIN_SIZE, requires_grad=True)

        def torch_eager():
            scale.grad = None
            chain(tx * scale).sum().backward()
        peers["torch"] = torch_eager
    except ImportError:
        pass
    times = interleaved(peers, rounds, min_time)
    ops = step.stats["instructions"]
    row = {"case": "chain", "ops": ops, "numel": CHAIN_SIZE}
    # Whole steps too: the instruction count differs between builds, so per-op times alone mislead.
    for who in ("compiled", "eager", "torch"):
        seconds = times[who]["median"] if who in times else None
        row[f"{who}_step_us"] = None if seconds is None else seconds * 1e6
        row[f"{who}_us_per_op"] = None if seconds is None else seconds / ops * 1e6
    line = (f"chain of {ops} ops on {CHAIN_SIZE} floats: compiled {row['compiled_us_per_op']:.2f} us/op  "
            f"eager {row['eager_us_per_op']:.2f} us/op")
    if row["torch_us_per_op"] is not None:
        line += f"  torch {row['torch_us_per_op']:.2f} us/op"
    print(line, flush=True)
    return row


GEMM_OPS = ("matmul", "matmul_pair")  # and every linear / linear_<act> (its bias and activation ride in the GEMM)


def profiled_split(step, case, batch, device, steps=10):
    """The step's own account of where its time goes (step.profile(), `steps` steps averaged): the
    milliseconds of its GEMM instructions (matmul, matmul_pair, linear and linear_<act>, whose
    bias and activation the CPU GEMM applies as it stores) and of every other instruction. Unlike
    step - GEMMs alone, which also counts what the GEMMs lose in the step (operands arriving cold
    from memory, a pair sharing the cores), this counts only time outside the GEMM instructions."""
    x, y = (fg.tensor(v).to(device) for v in batch_data(case, batch))
    time.sleep(SWITCH_GAP)  # the last round's last peer may be PyTorch, whose threads still spin
    step.profile(x, y)  # untimed: wakes the threads the pause put to sleep
    gemm = other = 0.0
    for _ in range(steps):
        for record in step.profile(x, y):
            if record["op"] in GEMM_OPS or record["op"].startswith("linear"):
                gemm += record["ms"] / steps
            else:
                other += record["ms"] / steps
    return gemm, other


def run_case(case, batch, opt_name, device, rounds, torch, min_time, with_compile=True):
    """One case: our compiled and eager steps, PyTorch eager and torch.compile, and the step's GEMMs
    alone, timed in interleaved rounds (medians, milliseconds)."""
    eager, compiled, step = flowgrad_steps(case, batch, opt_name, device)
    gemms, flops, torch_gemms = plan_gemms(step, device, torch)
    peers = {"flowgrad_compiled": compiled, "flowgrad_eager": eager, "gemms_alone": gemms}
    if torch is not None:
        peers["torch_gemms_alone"] = torch_gemms
        peers["torch_eager"], t_compiled = torch_steps(case, batch, opt_name, device, with_compile)
        if t_compiled:
            peers["torch_compile"] = t_compiled
    load_start = load_average()
    times = interleaved(peers, rounds, min_time)
    row = {"case": case, "batch": batch, "optimizer": opt_name,
           "unit": "samples/s" if case == "mlp" else "tokens/s", "rounds": rounds, "min_time_s": min_time,
           "statistic": "median of interleaved rounds", "load_average": [load_start, load_average()]}
    for name in ("flowgrad_compiled", "flowgrad_eager", "gemms_alone", "torch_eager", "torch_compile", "torch_gemms_alone"):
        row[f"{name}_ms"] = times[name]["median"] * 1e3 if name in times else None
    step_ms, gemm_ms = row["flowgrad_compiled_ms"], row["gemms_alone_ms"]
    row["gemm_gflops"] = flops / (gemm_ms / 1e3) / 1e9
    row["compiled_vs_gemms"] = step_ms / gemm_ms
    row["rest_ms"] = step_ms - gemm_ms  # everything of the step that is not a GEMM
    row["rest_share"] = row["rest_ms"] / step_ms
    if row["torch_eager_ms"]:
        row["compiled_vs_torch_eager"] = row["torch_eager_ms"] / step_ms
        row["eager_vs_torch_eager"] = row["torch_eager_ms"] / row["flowgrad_eager_ms"]
    if row["torch_compile_ms"]:
        row["compiled_vs_torch_compile"] = row["torch_compile_ms"] / step_ms
    if row["torch_gemms_alone_ms"]:  # the same products through PyTorch's BLAS, and its step's rest
        row["torch_gemm_gflops"] = flops / (row["torch_gemms_alone_ms"] / 1e3) / 1e9
        row["torch_rest_ms"] = row["torch_eager_ms"] - row["torch_gemms_alone_ms"]
    row["profile_gemm_ms"], row["profile_other_ms"] = profiled_split(step, case, batch, device)
    row["profile_other_share"] = row["profile_other_ms"] / (row["profile_gemm_ms"] + row["profile_other_ms"])
    stats = step.stats
    row["arena_bytes"], row["naive_bytes"] = stats["arena_bytes"], stats["naive_bytes"]
    row["arena_ratio"] = stats["arena_bytes"] / stats["naive_bytes"]
    row["instructions"] = stats["instructions"]
    return row


def describe(row):
    line = (f"{row['case']:11s} b{row['batch']:<4d} {row['optimizer']:5s}: compiled {row['flowgrad_compiled_ms']:7.3f} ms  "
            f"eager {row['flowgrad_eager_ms']:7.3f} ms")
    if row["torch_eager_ms"]:
        line += (f"  torch {row['torch_eager_ms']:7.3f} ms -> compiled {row['compiled_vs_torch_eager']:.2f}x, "
                 f"eager {row['eager_vs_torch_eager']:.2f}x torch")
    if row["torch_compile_ms"]:
        line += f" (torch.compile {row['torch_compile_ms']:.3f} ms -> {row['compiled_vs_torch_compile']:.2f}x)"
    line += (f"  | GEMMs alone {row['gemms_alone_ms']:.3f} ms ({row['gemm_gflops']:.0f} GFLOP/s), "
             f"step/GEMMs {row['compiled_vs_gemms']:.2f}, rest {row['rest_ms']:.3f} ms = {100 * row['rest_share']:.0f}%"
             f"  | profile: non-GEMM instructions {row['profile_other_ms']:.3f} ms = {100 * row['profile_other_share']:.0f}%")
    if row.get("torch_gemms_alone_ms"):
        line += (f"  | torch GEMMs alone {row['torch_gemms_alone_ms']:.3f} ms ({row['torch_gemm_gflops']:.0f} GFLOP/s), "
                 f"torch eager rest {row['torch_rest_ms']:.3f} ms")
    line += (f"  | arena/naive {row['arena_ratio']:.2f}  | load {row['load_average'][0]}-{row['load_average'][1]}")
    return line


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--tag", help="added to the saved file's name: results/bench_compile-<level>-<tag>-<date>.json")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=7)
    add_min_time(parser)
    parser.add_argument("--only", choices=["chain", "mlp", "transformer"], help="run one case only")
    parser.add_argument("--no-torch-compile", action="store_true",
                        help="skip torch.compile (its inductor build aborts the process at AVX-512 on some AMD CPUs)")
    args = parser.parse_args()
    torch = torch_peer()
    info = machine()
    print(f"machine: {info}")
    results = [chain_per_op(args.rounds, args.min_time)] if args.only in (None, "chain") else []
    every = (("mlp", 64), ("mlp", 512), ("transformer", 16))
    for case, batch in every if args.only != "chain" else ():
        if args.only in (None, case):
            for opt_name in ("sgd", "adamw"):
                results.append(run_case(case, batch, opt_name, args.device, args.rounds, torch, args.min_time,
                                        not args.no_torch_compile))
                print(describe(results[-1]), flush=True)
    if args.save:
        payload = {"machine": info, "device": args.device, "command": command_line(),
                   "results": results}
        path = save(f"bench_compile-{info['isa']}" + (f"-{args.tag}" if args.tag else ""), payload)
        print(f"saved {path}")


if __name__ == "__main__":
    main()
