"""Training steps of a small CNN and of LSTM / GRU sequence models: flowgrad eager and compiled
(fg.compile) against PyTorch eager and torch.compile (where it works here; otherwise the reason is
printed), SGD with momentum, same threads, interleaved rounds (common.interleaved: a pause before
each peer, medians of the rounds), the load average and the instruction-set level printed.

    python benchmarks/bench_cnn_rnn.py [--save] [--rounds N] [--cases cnn,lstm,gru] [--no-torch-compile]
                                       [--threads N] [--tag NAME] [--min-time SECONDS]
    FLOWGRAD_ISA=avx2 python benchmarks/bench_cnn_rnn.py --save
    FLOWGRAD_ISA=generic python benchmarks/bench_cnn_rnn.py --save
(each level on one machine; a forced FLOWGRAD_ISA holds flowgrad's OpenBLAS and, through
common.PEER_LEVELS, PyTorch's kernels, MKL and oneDNN to the same level).

Cases (issue 36):
  cnn   3 x (Conv2d 3x3 pad 1 + BatchNorm2d + ReLU) with 16, 32, 32 channels, MaxPool2d(2), Linear
        to 10 classes; B=64, 3x32x32 images, cross-entropy.
  lstm  nn.LSTM(64, 256, batch_first=True) + a Linear(256, 64) head on every step, T=50, B=32,
        cross-entropy over 64 classes per step.
  gru   the same with nn.GRU.
For lstm and gru, "flowgrad_per_step" is the recurrence written per step with flowgrad ops from
Python (input projection once, then per step linear, chunk, sigmoid, tanh, mul, add): the shape of
the layers before they became one op per sequence (their loop was in C++), for a before/after.
Ratios are PyTorch's time over ours (higher is better). --save writes
results/bench_cnn_rnn-<level>[-tag]-<date>.json. --threads N sets both libraries' threads (on a
machine shared with other jobs, 1 thread each keeps the neighbours' load from deciding the ratios). The level
variables in force are recorded with the machine (common.machine).
"""
import argparse

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn
from common import add_min_time, command_line, interleaved, load_average, machine, save

RNN = dict(input_size=64, hidden_size=256, steps=50, batch=32, classes=64)
CNN = dict(batch=64, channels=(16, 32, 32), size=32, classes=10)


def build_model(case, lib):
    """The case's model from `lib`'s modules: flowgrad.nn or torch.nn (the same names and signatures)."""
    if case == "cnn":
        layers, c_in = [], 3
        for c in CNN["channels"]:
            layers += [lib.Conv2d(c_in, c, 3, padding=1), lib.BatchNorm2d(c), lib.ReLU()]
            c_in = c
        half = CNN["size"] // 2
        return lib.Sequential(*layers, lib.MaxPool2d(2), lib.Flatten(), lib.Linear(c_in * half * half, CNN["classes"]))

    class SequenceTagger(lib.Module):
        def __init__(self):
            super().__init__()
            cls = lib.LSTM if case == "lstm" else lib.GRU
            self.rnn = cls(RNN["input_size"], RNN["hidden_size"], batch_first=True)
            self.head = lib.Linear(RNN["hidden_size"], RNN["classes"])

        def forward(self, x):
            return self.head(self.rnn(x)[0]).reshape(-1, RNN["classes"])
    return SequenceTagger()


def batch_data(case):
    rng = np.random.default_rng(0)
    if case == "cnn":
        x = rng.standard_normal((CNN["batch"], 3, CNN["size"], CNN["size"])).astype(np.float32)
        y = rng.integers(0, CNN["classes"], CNN["batch"])
    else:
        x = rng.standard_normal((RNN["batch"], RNN["steps"], RNN["input_size"])).astype(np.float32)
        y = rng.integers(0, RNN["classes"], RNN["batch"] * RNN["steps"])
    return x, y.astype(np.int64)


def per_step_recurrence(case, model):
    """The recurrence as per-step flowgrad ops (the layers' former shape), on model's parameters."""
    rnn, head = model.rnn, model.head
    H = RNN["hidden_size"]

    def forward(x):
        gi = F.linear(x.transpose(0, 1), rnn.weight_ih_l0, rnn.bias_ih_l0)
        h = fg.zeros(x.shape[0], H)
        c = fg.zeros(x.shape[0], H)
        outs = []
        for t in range(x.shape[1]):
            gh = F.linear(h, rnn.weight_hh_l0, rnn.bias_hh_l0)
            if case == "lstm":
                i, f, g, o = (gi[t] + gh).chunk(4, -1)
                c = f.sigmoid() * c + i.sigmoid() * g.tanh()
                h = o.sigmoid() * c.tanh()
            else:
                a, b = gi[t].chunk(3, -1), gh.chunk(3, -1)
                r, z = (a[0] + b[0]).sigmoid(), (a[1] + b[1]).sigmoid()
                n = (a[2] + r * b[2]).tanh()
                h = (1 - z) * n + z * h
            outs.append(h)
        return head(fg.stack(outs, 1)).reshape(-1, RNN["classes"])
    return forward


def flowgrad_steps(case):
    x, y = (fg.tensor(a) for a in batch_data(case))

    def sgd(params):
        return fg.optim.SGD(params, lr=0.01, momentum=0.9)

    def eager_step(forward, opt):
        def step():
            opt.zero_grad()
            F.cross_entropy(forward(x), y).backward()
            opt.step()
        return step
    model = build_model(case, nn)
    opt = sgd(model.parameters())
    steps = {"flowgrad_eager": eager_step(model, opt)}
    cmodel = build_model(case, nn)
    compiled = fg.compile(cmodel, F.cross_entropy, sgd(cmodel.parameters()), example_inputs=(x, y))
    steps["flowgrad_compiled"] = lambda: compiled(x, y)
    if case != "cnn":
        pmodel = build_model(case, nn)
        steps["flowgrad_per_step"] = eager_step(per_step_recurrence(case, pmodel), sgd(pmodel.parameters()))
    return steps


def torch_steps(case, use_compile):
    import torch
    x, y = (torch.tensor(a) for a in batch_data(case))

    def make(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step():
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return step
    steps = {"torch_eager": make(build_model(case, torch.nn))}
    if not use_compile:
        print("  torch.compile skipped: --no-torch-compile")
        return steps
    try:  # where it works on this machine (it needs a C++ compiler for the CPU)
        compiled = make(torch.compile(build_model(case, torch.nn)))
        compiled()
        steps["torch_compile"] = compiled
    except Exception as e:  # noqa: BLE001  (reported, not hidden)
        print(f"  torch.compile unavailable: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cases", default="cnn,lstm,gru")
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--tag", default="")
    parser.add_argument("--threads", type=int, default=0, help="threads of each library (default: flowgrad's)")
    add_min_time(parser)
    args = parser.parse_args()
    if args.threads:
        fg.set_num_threads(args.threads)
    try:
        import torch
        torch.set_num_threads(fg.get_num_threads())
    except ImportError:
        torch = None
    isa = fg.build_config()["isa"]
    print(f"instruction-set level {isa} (FLOWGRAD_ISA), {fg.get_num_threads()} threads, load {load_average()}, "
          f"PyTorch {torch.__version__ if torch else 'absent'}"
          + (f" (CPU capability {torch.backends.cpu.get_cpu_capability()})" if torch else ""), flush=True)
    results = {"machine": machine(), "command": command_line(), "isa": isa,
               "torch_capability": torch.backends.cpu.get_cpu_capability() if torch else None,
               "openblas_core": fg.build_config()["blas_core"], "rounds": args.rounds, "min_time_s": args.min_time,
               "statistic": "median of interleaved rounds",
               "cnn": CNN, "rnn": RNN, "cases": {}}
    for case in args.cases.split(","):
        load_start = load_average()
        peers = flowgrad_steps(case)
        if torch is not None:
            peers.update(torch_steps(case, not args.no_torch_compile))
        times = {name: 1e3 * t["median"] for name, t in interleaved(peers, args.rounds, args.min_time).items()}
        row = {f"{name}_ms": round(ms, 3) for name, ms in times.items()}
        row["load_average"] = [load_start, load_average()]
        line = f"{case:5s} " + "  ".join(f"{name} {ms:.2f} ms" for name, ms in times.items())
        if "torch_eager" in times:
            for ours in ("flowgrad_eager", "flowgrad_compiled", "flowgrad_per_step"):
                if ours in times:
                    row[f"torch_eager_over_{ours}"] = round(times["torch_eager"] / times[ours], 3)
            if "torch_compile" in times:
                row["torch_compile_over_flowgrad_compiled"] = round(times["torch_compile"] / times["flowgrad_compiled"], 3)
            ratios = {k: v for k, v in row.items() if "_over_" in k}
            line += "\n      " + "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
        print(line + f"\n      load {row['load_average'][0]} -> {row['load_average'][1]}", flush=True)
        results["cases"][case] = row
    if args.save:
        print("saved", save(f"bench_cnn_rnn-{isa}" + (f"-{args.tag}" if args.tag else ""), results))


if __name__ == "__main__":
    main()
