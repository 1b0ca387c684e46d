"""Differential fuzzer: seeded random models and training set-ups, each trained for a few steps by
a compiled step (fg.compile) and by the eager loop it replaces, from identical state, in float64.
After every step the losses, parameters, optimizer state and .grad must agree.

    python tests/stress/fuzz_compiled.py --cases 200            # batches of cases in subprocesses
    python tests/stress/fuzz_compiled.py --seed 86 --verbose    # one case, in this process

The driver runs cases in batches, each batch in its own interpreter; before each case the worker
prints its seed, so a crash (a signal, a hang) is attributed to that seed and the batch goes on
from the next one. The last line is the summary: ``cases= pass= mismatch= crash= refused=``
(refused: fg.compile raised a typed flowgrad error, a construct it does not support). Grow the
generator (``Case``) whenever fg.compile learns a construct.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

RTOL, ATOL = 1e-9, 1e-12


def modules():
    """Small modules of the generator's own: views, in-place ops, a host-built constant, pooling."""
    import flowgrad as fg
    from flowgrad import nn

    class Views(nn.Module):
        def forward(self, x):
            n = x.shape[0]
            return x.reshape(n, 1, -1).transpose(1, 2).reshape(n, -1)[:, ::1] * 1.5

    class InPlace(nn.Module):
        def forward(self, x):
            h = x * 2.0
            h.mul_(0.5)
            return h.add_(0.1)

    class HostMask(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.mask = np.linspace(0.5, 1.5, width)

        def forward(self, x):
            return x * fg.tensor(self.mask)  # built from host data on every call

    class MeanTokens(nn.Module):
        def forward(self, x):
            return x.mean(1)

    return Views, InPlace, HostMask, MeanTokens


class Case:
    """One seeded set-up: a model recipe, an optimizer, data, and events between calls."""

    def __init__(self, seed):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        r = self.rng
        self.family = r.choice(["seq", "flow", "tokens"])
        self.batch, self.features, self.classes = int(r.integers(3, 7)), int(r.integers(2, 6)), int(r.integers(2, 5))
        self.layers = {"seq": self.pick_layers, "flow": self.pick_flow, "tokens": self.pick_tokens}[self.family]()
        self.opt = self.pick_optimizer()
        self.steps = int(r.integers(2, 6))
        self.events = {int(r.integers(1, self.steps)): str(e) for e in
                       r.choice(["zero_grad", "freeze", "unfreeze", "lr", "reload", "momentum", "group", "none"],
                                size=int(r.integers(0, 3)))} if self.steps > 1 else {}
        self.split_groups = "group" in self.events.values() or bool(r.integers(0, 4) == 0)
        self.data_seed = int(r.integers(0, 2 ** 31))
        self.scheduler = bool(r.integers(0, 4) == 0)
        self.clip = float(r.choice([0.05, 1.0])) if r.integers(0, 4) == 0 else None  # clip_grad_norm_ before updates
        recurrent = self.family == "flow" and "recurrent" in self.layers
        self.dynamic = not recurrent and bool(r.integers(0, 4) == 0)  # the batch size changes between calls

    def pick_layers(self):
        r, out, width = self.rng, [], self.features
        for _ in range(int(r.integers(1, 4))):
            kind = r.choice(["linear", "linear_nobias", "tanh", "relu", "gelu", "layernorm", "batchnorm", "rmsnorm",
                             "dropout", "views", "inplace", "host_mask"])
            nxt = int(r.integers(2, 7)) if kind.startswith("linear") else width
            out.append((str(kind), width, nxt, float(r.choice([0.1, 0.5])) if kind == "batchnorm" and r.integers(0, 2) else None))
            width = nxt
        out.append(("linear", width, self.classes, None))
        return out

    def pick_tokens(self):
        r = self.rng
        return [str(r.choice(["pool", "attention", "attention_causal"])), int(r.integers(5, 12))]

    def pick_flow(self):
        r = self.rng
        return [str(c) for c in r.choice(["switch_fixed", "switch_argmax", "residual", "recurrent", "input", "while"],
                                         size=int(r.integers(1, 3)), replace=False)]

    def pick_optimizer(self):
        r = self.rng
        name = str(r.choice(["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]))
        wd = float(r.choice([0.0, 0.05]))
        if name == "SGD":
            momentum = float(r.choice([0.0, 0.9]))
            return name, dict(lr=0.1, momentum=momentum, weight_decay=wd, nesterov=bool(momentum and r.integers(0, 2)))
        if name in ("Adam", "AdamW"):
            return name, dict(lr=0.05, weight_decay=wd)
        if name == "RMSprop":
            return name, dict(lr=0.01, momentum=float(r.choice([0.0, 0.5])), centered=bool(r.integers(0, 2)),
                              weight_decay=wd)
        return name, dict(lr=0.1, weight_decay=wd)

    def describe(self):
        return {"seed": self.seed, "family": self.family, "layers": self.layers, "opt": self.opt,
                "steps": self.steps, "events": self.events, "split_groups": self.split_groups,
                "scheduler": self.scheduler, "dynamic": self.dynamic, "clip": self.clip}

    # ---- building (called twice, from the same seed) ----

    def model(self, fg, nn):
        fg.manual_seed(self.seed)
        if self.family == "seq":
            mods = []
            for kind, w, nxt, momentum in self.layers:
                mods.append({"linear": lambda: nn.Linear(w, nxt), "linear_nobias": lambda: nn.Linear(w, nxt, bias=False),
                             "tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU, "layernorm": lambda: nn.LayerNorm(w),
                             "batchnorm": lambda: nn.BatchNorm1d(w, momentum=momentum),
                             "rmsnorm": lambda: nn.RMSNorm(w), "dropout": lambda: nn.Dropout(0.3),
                             "views": lambda: Views(), "inplace": lambda: InPlace(),
                             "host_mask": lambda: HostMask(w)}[kind]())
            return nn.Sequential(*mods).to(fg.float64)
        if self.family == "tokens":
            kind, vocab = self.layers
            d = 8
            body = nn.TransformerBlock(d, 2, mlp_ratio=2, causal=kind == "attention_causal") if kind != "pool" else nn.Tanh()
            return nn.Sequential(nn.Embedding(vocab, d), body, MeanTokens(), nn.Linear(d, self.classes)).to(fg.float64)
        h = 4
        b = fg.flow(nn.Linear(self.features, h))
        if "input" in self.layers:
            b = b.input("ctx").through(fg.flow.Add()).using("ctx")
        for c in self.layers:
            if c == "switch_fixed":
                b = b.switch(fg.flow.FixedSelector(self.seed % 2),
                             nn.Linear(h, h), nn.Sequential(nn.Linear(h, h), nn.Tanh()))
            elif c == "switch_argmax":
                b = b.switch(fg.flow.ArgmaxSelector(h, 2), nn.Linear(h, h), nn.Linear(h, h, bias=False))
            elif c == "residual":
                b = b.also(nn.Sequential(nn.Linear(h, h), nn.Tanh()))
            elif c == "recurrent":
                b = b.through(fg.flow.Add()).using("st").through(nn.Tanh()).tag("st")
            elif c == "while":
                b = b.loop(nn.Sequential(nn.Linear(h, h), nn.Tanh())).while_(fg.flow.ThresholdHalt(0.5), 3)
        return b.through(nn.Linear(h, self.classes)).build().to(fg.float64)

    def optimizer(self, fg, model):
        name, kw = self.opt
        params = list(model.parameters())
        groups = [{"params": params}]
        if self.split_groups and len(params) > 1:
            cut = len(params) // 2
            groups = [{"params": params[cut:]}] if "group" in self.events.values() else \
                [{"params": params[:cut]}, {"params": params[cut:], "lr": kw["lr"] / 2}]
        opt = getattr(fg.optim, name)(groups, **kw)
        return fg.optim.ClipGradNorm(opt, self.clip) if self.clip else opt

    def data(self, fg):
        r = np.random.default_rng(self.data_seed)
        out = []
        for i in range(self.steps):
            batch = self.batch + (i % 2 if self.dynamic else 0)
            if self.family == "tokens":
                out.append((fg.tensor(r.integers(0, self.layers[1], (batch, 4))), fg.tensor(r.integers(0, self.classes, batch))))
                continue
            x = fg.tensor(r.standard_normal((batch, self.features)))
            extra = (fg.tensor(r.standard_normal((batch, 4))),) if self.family == "flow" and "input" in self.layers else ()
            out.append((x,) + extra + (fg.tensor(r.integers(0, self.classes, batch)),))
        return out


def apply_event(event, model, opt):
    """A change before a call, the same on both sides (eager steps call zero_grad anyway)."""
    params = list(model.parameters())
    if event == "zero_grad":
        opt.zero_grad()
    elif event in ("freeze", "unfreeze"):
        params[0].requires_grad = event == "unfreeze"
    elif event == "lr":
        for g in opt.param_groups:
            g["lr"] *= 0.5
    elif event == "reload":
        opt.load_state_dict(opt.state_dict())  # through a ClipGradNorm too
    elif event == "momentum" and type(getattr(opt, "opt", opt)).__name__ == "SGD":
        for g in opt.param_groups:
            g["momentum"] = 0.5
    elif event == "group":
        taken = {hash(p) for g in opt.param_groups for p in g["params"]}
        rest = [p for p in params if hash(p) not in taken]
        if rest:
            opt.add_param_group({"params": rest, "lr": opt.param_groups[0]["lr"] / 2})


Views, InPlace, HostMask, MeanTokens = (None,) * 4  # made by modules() once flowgrad is imported


def compare(what, a, b, problems):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or not np.allclose(a, b, rtol=RTOL, atol=ATOL):
        diff = float(np.max(np.abs(a - b))) if a.shape == b.shape else "shape"
        problems.append(f"{what}: max diff {diff}")


def run_case(seed, verbose=False):
    """'pass', 'mismatch: ...' or 'refused: ...' for one seed."""
    import flowgrad as fg
    import flowgrad.nn.functional as F
    from flowgrad import nn

    global Views, InPlace, HostMask, MeanTokens
    Views, InPlace, HostMask, MeanTokens = modules()
    case = Case(seed)
    if verbose:
        print(json.dumps(case.describe()))
    data = case.data(fg)
    me = case.model(fg, nn)
    oe = case.optimizer(fg, me)
    eager = train(case, fg, me, oe, data, lambda batch: eager_step(case, F, me, oe, batch))
    mc = case.model(fg, nn)
    oc = case.optimizer(fg, mc)
    try:
        step = fg.compile(mc, F.cross_entropy, oc, example_inputs=data[0], dynamic=case.dynamic)
    except fg.FlowgradError as e:
        return f"refused: {type(e).__name__}: {str(e)[:200]}"
    compiled = train(case, fg, mc, oc, data, lambda batch: step(*batch).item())
    problems = []
    for i, (e, c) in enumerate(zip(eager, compiled)):
        compare(f"loss step {i}", e["loss"], c["loss"], problems)
        for what in ("params", "buffers", "state"):
            if e[what].keys() != c[what].keys():
                problems.append(f"step {i} {what}: {sorted(e[what])} vs {sorted(c[what])}")
            for name in e[what].keys() & c[what].keys():
                compare(f"step {i} {what} {name}", e[what][name], c[what][name], problems)
        for name, g in e["grads"].items():
            if c["grads"].get(name) is None:
                problems.append(f"step {i} grad {name}: eager set, compiled None")
            else:
                compare(f"step {i} grad {name}", g, c["grads"][name], problems)
        if problems:
            break
    return "pass" if not problems else "mismatch: " + "; ".join(problems[:3])


def eager_step(case, F, model, opt, batch):
    opt.zero_grad()
    loss = F.cross_entropy(model(*batch[:-1]), batch[-1])
    loss.backward()
    opt.step()
    if case.family == "flow":
        model.detach_state()
    return loss.item()


def train(case, fg, model, opt, data, step):
    """Per step: the loss and copies of parameters, buffers, optimizer state and the .grad of the
    optimizer's parameters that train (random draws start from the same seed on both sides)."""
    sched = fg.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5) if case.scheduler else None
    fg.manual_seed(case.seed + 1)
    out = []
    for i, batch in enumerate(data):
        apply_event(case.events.get(i), model, opt)
        loss = step(batch)
        if sched is not None:
            sched.step()
        optimized = {hash(p) for g in opt.param_groups for p in g["params"]}
        state = opt.state_dict()["state"]
        out.append({"loss": loss,
                    "params": {n: p.numpy().copy() for n, p in model.named_parameters()},
                    "buffers": {n: b.numpy().copy() for n, b in model.named_buffers()},
                    "state": {f"{k}.{key}": t.numpy().astype(np.float64) for k, s in state.items() for key, t in s.items()},
                    "grads": {n: None if p.grad is None else p.grad.numpy().copy() for n, p in model.named_parameters()
                              if p.requires_grad and hash(p) in optimized and p.grad is not None}})
    return out


def worker(seeds, verbose):
    for seed in seeds:
        print(json.dumps({"start": seed}), flush=True)
        print(json.dumps({"seed": seed, "result": run_case(seed, verbose)}), flush=True)


def drive(first, cases, batch, timeout):
    """Runs seeds first .. first + cases - 1 in subprocess batches; returns the counts and the failures."""
    counts = {"cases": 0, "pass": 0, "mismatch": 0, "crash": 0, "refused": 0}
    failures = []
    todo = list(range(first, first + cases))
    env = dict(os.environ, FLOWGRAD_NUM_THREADS="1")
    while todo:
        chunk, todo = todo[:batch], todo[batch:]
        try:
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", *map(str, chunk)],
                                  capture_output=True, text=True, timeout=timeout, env=env)
            out, err, rc = done.stdout, done.stderr, done.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err, rc = "", "timeout"
        finished, started = {}, []
        for line in out.splitlines():
            record = json.loads(line) if line.startswith("{") else {}
            if "start" in record:
                started.append(record["start"])
            elif "result" in record:
                finished[record["seed"]] = record["result"]
        crashed = started[-1] if started and started[-1] not in finished else None
        for seed, result in finished.items():
            kind = result.split(":")[0]
            counts[kind] += 1
            if kind != "pass":
                failures.append({"seed": seed, "result": result})
        if crashed is not None:  # it was running when the worker died
            counts["crash"] += 1
            failures.append({"seed": crashed, "result": f"crash (exit {rc}): {err.strip()[-300:]}"})
        counts["cases"] += len(finished) + (crashed is not None)
        todo = [s for s in chunk if s not in finished and s != crashed and s not in started] + todo
    return counts, failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, help="run one case in this process")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--worker", type=int, nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.verbose)
    if args.seed is not None:
        result = run_case(args.seed, verbose=True)
        print(result)
        return 0 if result.split(":")[0] in ("pass", "refused") else 1
    counts, failures = drive(args.first, args.cases, args.batch, args.timeout)
    for f in failures:
        print(json.dumps(f))
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    return 0 if counts["mismatch"] == 0 and counts["crash"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
