"""Compiled training steps (fg.compile) against our eager steps and PyTorch, one run, same data and
threads. Also the same GEMMs run alone (the physical floor of an MLP step) and the memory plan.

    python benchmarks/bench_compile.py [--save] [--device cpu|cuda]

Targets (issue 10), CPU: MLP 784-512-512-10 compiled >= 1.1x PyTorch eager with SGD at batch 64,
>= 1.05x at 512, >= 1.8x / >= 1.3x with AdamW, and within 15% of its GEMMs run alone; char
transformer (4 layers, d=128, T=64, B=16) compiled >= 1.3x PyTorch eager; arena/naive <= 0.5.
"""
import argparse
import sys

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn
from bench_train import torch_block
from common import best_time, machine, save, transformer_lm

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


def torch_steps(case, batch, opt_name, device):
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


def mlp_gemms(batch, device):
    """The MLP step's 8 GEMMs alone (3 forward, 2 input-gradient, 3 weight-gradient): time and FLOPs."""
    shapes = [(batch, 784, 512), (batch, 512, 512), (batch, 512, 10),   # forward: (M, K) @ (K, N)
              (batch, 10, 512), (batch, 512, 512),                      # input gradients
              (512, batch, 784), (512, batch, 512), (10, batch, 512)]   # weight gradients
    pairs = [(fg.randn(m, k).to(device), fg.randn(k, n).to(device)) for m, k, n in shapes]
    sync = fg.cuda.synchronize if device != "cpu" else (lambda: None)

    def run():
        for a, b in pairs:
            fg.matmul(a, b)
        sync()
    flops = sum(2 * m * k * n for m, k, n in shapes)
    return best_time(run), flops


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


def chain_per_op():
    """Microseconds per plan instruction, 100 ops on 64 floats and their backward: compiled plan vs the
    same step in our eager mode vs PyTorch eager (each time divided by the plan's instruction count)."""
    x = fg.randn(CHAIN_SIZE)
    model = Chain()
    step = fg.compile(model, example_inputs=(x,))
    ops = step.stats["instructions"]
    row = {"case": "chain", "ops": ops, "numel": CHAIN_SIZE,
           "compiled_us_per_op": best_time(lambda: step(x)) / ops * 1e6}

    def eager():
        model.scale.grad = None
        model(x).backward()
    row["eager_us_per_op"] = best_time(eager) / ops * 1e6
    try:
        import torch
        tx, scale = torch.tensor(x.numpy()), torch.ones(CHAIN_SIZE, requires_grad=True)

        def torch_eager():
            scale.grad = None
            chain(tx * scale).sum().backward()
        row["torch_us_per_op"] = best_time(torch_eager) / ops * 1e6
    except ImportError:
        row["torch_us_per_op"] = None
    # Whole steps too: the instruction count differs between builds, so per-op times alone mislead.
    for who in ("compiled", "eager", "torch"):
        per_op = row[f"{who}_us_per_op"]
        row[f"{who}_step_us"] = None if per_op is None else per_op * ops
    line = (f"chain of {ops} ops on {CHAIN_SIZE} floats: compiled {row['compiled_us_per_op']:.2f} us/op  "
            f"eager {row['eager_us_per_op']:.2f} us/op")
    if row["torch_us_per_op"] is not None:
        line += f"  torch {row['torch_us_per_op']:.2f} us/op"
    print(line, flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", choices=["chain", "transformer"], help="run one case only")
    args = parser.parse_args()
    try:
        import torch
        torch.set_num_threads(fg.get_num_threads())
    except ImportError:
        torch = None
    info = machine()
    print(f"machine: {info}")
    results = [] if args.only == "transformer" else [chain_per_op()]
    every = (("mlp", 64), ("mlp", 512), ("transformer", 16))
    cases = {"chain": (), "transformer": every[2:]}.get(args.only, every)
    for case, batch in cases:
        unit_items = batch if case == "mlp" else batch * T
        for opt_name in ("sgd", "adamw"):
            eager, compiled, step = flowgrad_steps(case, batch, opt_name, args.device)
            row = {"case": case, "batch": batch, "optimizer": opt_name,
                   "unit": "samples/s" if case == "mlp" else "tokens/s"}
            row["flowgrad_compiled_ms"] = best_time(compiled) * 1e3
            row["flowgrad_eager_ms"] = best_time(eager) * 1e3
            stats = step.stats
            row["arena_bytes"], row["naive_bytes"] = stats["arena_bytes"], stats["naive_bytes"]
            row["arena_ratio"] = stats["arena_bytes"] / stats["naive_bytes"]
            row["instructions"] = stats["instructions"]
            if torch is not None:
                t_eager, t_compiled = torch_steps(case, batch, opt_name, args.device)
                row["torch_eager_ms"] = best_time(t_eager) * 1e3
                row["torch_compile_ms"] = best_time(t_compiled) * 1e3 if t_compiled else None
                row["compiled_vs_torch_eager"] = row["torch_eager_ms"] / row["flowgrad_compiled_ms"]
                row["eager_vs_torch_eager"] = row["torch_eager_ms"] / row["flowgrad_eager_ms"]
            if case == "mlp":
                seconds, flops = mlp_gemms(batch, args.device)
                row["gemms_alone_ms"] = seconds * 1e3
                row["gemm_gflops"] = flops / seconds / 1e9
                row["step_gflops"] = flops / (row["flowgrad_compiled_ms"] / 1e3) / 1e9
                row["compiled_vs_gemms"] = row["flowgrad_compiled_ms"] / row["gemms_alone_ms"]
            results.append(row)
            line = (f"{case:11s} b{batch:<4d} {opt_name:5s}: compiled {row['flowgrad_compiled_ms']:7.3f} ms  "
                    f"eager {row['flowgrad_eager_ms']:7.3f} ms")
            if torch is not None:
                line += f"  torch {row['torch_eager_ms']:7.3f} ms -> compiled {row['compiled_vs_torch_eager']:.2f}x torch"
                if row["torch_compile_ms"]:
                    line += f" (torch.compile {row['torch_compile_ms']:.3f} ms)"
            if case == "mlp":
                line += (f"  | GEMMs alone {row['gemms_alone_ms']:.3f} ms ({row['gemm_gflops']:.0f} GFLOP/s), "
                         f"step/GEMMs {row['compiled_vs_gemms']:.2f}")
            line += f"  | arena/naive {row['arena_ratio']:.2f}"
            print(line, flush=True)
    if args.save:
        payload = {"machine": info, "device": args.device, "command": "python " + " ".join(sys.argv),
                   "results": results}
        print(f"saved {save('bench_compile', payload)}")


if __name__ == "__main__":
    main()
