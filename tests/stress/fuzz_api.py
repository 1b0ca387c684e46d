"""Seeded fuzzer of the public API: random ops on random, often bad, arguments.

    python tests/stress/fuzz_api.py --seed 0 --calls 3000 --record /tmp/current_call

Every call must return or raise a typed error: a flowgrad error, TypeError, ValueError,
IndexError or OverflowError whose message names the op. Anything else (a pybind11 RuntimeError,
C++ text such as std::bad_alloc, an error that does not say which op failed) is reported on
stdout as one JSON line per problem, then a summary line. A crash or a hang kills the process:
before each call its description is written to the --record file, so the caller can say which
call it was. Memory is capped (RLIMIT_AS) so that a huge size fails to allocate instead of
exhausting the machine.
"""
import argparse
import json
import os
import random
import resource
import sys

import numpy as np

import flowgrad as fg
from flowgrad import nn

F = nn.functional
TYPED = (fg.FlowgradError, TypeError, ValueError, IndexError, OverflowError)
# Text that only C++ internals or pybind11 write: it must never reach a user.
LEAKS = ("std::", "Unable to cast", "C++ type", "max_size()", "bad_alloc", "pybind11")


class Values:
    """Argument pools: mostly valid values, with awkward and plainly wrong ones mixed in."""

    SIZES = [0, 1, 2, 3, 5]
    HUGE = [2**40, 2**62, 2**63 - 1, 2**64, -2**70]
    BAD = [None, "a", b"x", 1.5, float("nan"), [], [1, "x"], {}, object(), 1 + 2j, np.array([0, 1]),
           np.float64(1.5), (), ((1,),), -1, 2**64]

    def __init__(self, rng):
        self.r = rng

    def pick(self, pool):
        return pool[self.r.randrange(len(pool))]

    def bad(self, p=0.12):
        return self.r.random() < p

    def shape(self):
        rank = self.r.choice([0, 1, 1, 2, 2, 3])
        return tuple(self.pick(self.SIZES) for _ in range(rank))

    def tensor(self, allow_bad=True):
        if allow_bad and self.bad(0.05):
            return self.pick(self.BAD)
        shape = self.shape()
        kind = self.r.random()
        if kind < 0.6:
            a = np.random.default_rng(self.r.randrange(2**32)).standard_normal(shape)
            if self.r.random() < 0.1 and a.size:
                a.flat[0] = self.r.choice([np.nan, np.inf, -np.inf])
            t = fg.tensor(a, dtype=self.r.choice([fg.float32, fg.float32, fg.float64, fg.float16]))
            if self.r.random() < 0.3 and t.dtype != fg.float16:
                t.requires_grad_(True)
        elif kind < 0.85:
            t = fg.tensor(np.random.default_rng(self.r.randrange(2**32)).integers(-3, 6, size=shape),
                          dtype=self.r.choice([fg.int64, fg.int32]))
        else:
            t = fg.tensor(np.random.default_rng(self.r.randrange(2**32)).random(shape) > 0.5)
        if t.ndim >= 2 and self.r.random() < 0.3:
            t = t.transpose(0, -1)  # non-contiguous
        return t

    def int(self):
        if self.bad(0.15):
            return self.pick(self.BAD + self.HUGE)
        return self.r.choice([0, 1, 2, 3, -1, -2, 7])

    def dim(self):
        if self.bad():
            return self.pick(self.BAD + self.HUGE)
        return self.r.choice([None, 0, 1, -1, -2, 2, 3, (0,), (0, 1), (-1, 0), (0, 0), [1]])

    def dims(self):
        if self.bad():
            return self.pick(self.BAD)
        return [self.r.choice([0, 1, -1, 2, -3]) for _ in range(self.r.choice([0, 1, 2, 3]))]

    def sizes(self):
        if self.bad(0.2):
            return [self.pick(self.BAD + self.HUGE + [-1, -5])]
        return list(self.shape())

    def float(self):
        if self.bad():
            return self.pick(self.BAD)
        return self.r.choice([0.0, 0.5, -1.5, 2.0, 1e-8, float("nan"), float("inf"), 1e300])

    def scalar(self):
        return self.r.choice([self.int(), self.float(), True, self.tensor()])

    def bool(self):
        return self.pick(self.BAD) if self.bad(0.05) else self.r.random() < 0.5

    def dtype(self):
        return self.pick(self.BAD) if self.bad() else self.r.choice(
            [None, fg.float32, fg.float64, fg.int64, fg.int32, fg.bool, fg.float16, "float32", "complex"])

    def index(self):
        return self.r.choice([
            self.int(), slice(self.int(), self.int()), slice(None, None, self.r.choice([1, 2, -1, 0])), None,
            Ellipsis, (self.int(), self.int()), (Ellipsis, None, self.int()), [0, 1], np.array([0, -1]),
            np.array([True]), self.tensor(), self.pick(self.BAD), (slice(None), np.array([1, 0]))])

    def module(self):
        make = self.r.choice([
            lambda: nn.Linear(self.int(), self.int()), lambda: nn.ReLU(), lambda: nn.Identity(),
            lambda: nn.GRUCell(self.int(), self.int()), lambda: nn.LSTMCell(self.int(), self.int()),
            lambda: nn.LayerNorm(self.dim()), lambda: nn.Dropout(self.float()),
            lambda: nn.Embedding(self.int(), self.int()), lambda: nn.Softmax(self.int()),
            lambda: nn.Conv2d(self.int(), self.int(), self.int()), lambda: nn.MaxPool2d(self.int()),
            lambda: nn.MultiheadAttention(self.int(), self.int()), lambda: nn.Flatten(self.int(), self.int()),
            lambda: nn.Sequential(*[self.module() if self.r.random() < 0.5 else self.pick(self.BAD)
                                    for _ in range(self.r.choice([0, 1, 2]))]),
            lambda: self.pick(self.BAD)])
        return make()


def calls(v):
    """(name the error must mention, callable, args, kwargs) for one random call."""
    t, r = v.tensor, v.r
    method = r.random() < 0.5
    table = [
        ("sum", fg.sum, lambda: ([t()], {"dim": v.dim(), "keepdim": v.bool()})),
        ("mean", fg.mean, lambda: ([t()], {"dim": v.dim()})),
        ("max", fg.max, lambda: ([t()], {"dim": v.dim()})),
        ("var", fg.var, lambda: ([t()], {"dim": v.dim(), "correction": v.float()})),
        ("std", fg.std, lambda: ([t()], {"dim": v.dim(), "correction": v.int()})),
        ("logsumexp", fg.logsumexp, lambda: ([t()], {"dim": v.dim()})),
        ("argmax", fg.argmax, lambda: ([t()], {"dim": v.int()})),
        ("transpose", fg.transpose, lambda: ([t(), v.int(), v.int()], {})),
        ("permute", fg.permute, lambda: ([t(), *v.dims()], {})),
        ("reshape", fg.reshape, lambda: ([t(), *v.sizes()], {})),
        ("expand", fg.expand, lambda: ([t(), *v.sizes()], {})),
        ("squeeze", fg.squeeze, lambda: ([t()], {"dim": v.int()})),
        ("unsqueeze", fg.unsqueeze, lambda: ([t(), v.int()], {})),
        ("flatten", fg.flatten, lambda: ([t(), v.int(), v.int()], {})),
        ("narrow", fg.narrow, lambda: ([t(), v.int(), v.int(), v.int()], {})),
        ("split", fg.split, lambda: ([t(), r.choice([v.int(), v.sizes()])], {"dim": v.int()})),
        ("chunk", fg.chunk, lambda: ([t(), v.int()], {"dim": v.int()})),
        ("cat", fg.cat, lambda: ([[t() for _ in range(r.choice([0, 1, 2]))]], {"dim": v.int()})),
        ("stack", fg.stack, lambda: ([[t() for _ in range(r.choice([0, 1, 2]))]], {"dim": v.int()})),
        ("flip", fg.flip, lambda: ([t(), v.dims()], {})),
        ("pad", fg.pad, lambda: ([t(), v.sizes()], {"value": v.float()})),
        ("repeat", fg.repeat, lambda: ([t(), *v.sizes()], {})),
        ("topk", fg.topk, lambda: ([t(), v.int()], {"dim": v.int()})),
        ("sort", fg.sort, lambda: ([t()], {"dim": v.int(), "descending": v.bool()})),
        ("gather", fg.gather, lambda: ([t(), v.int(), t()], {})),
        ("index_select", fg.index_select, lambda: ([t(), v.int(), t()], {})),
        ("scatter_add", fg.scatter_add, lambda: ([t(), v.int(), t(), t()], {})),
        ("masked_fill", fg.masked_fill, lambda: ([t(), t(), v.float()], {})),
        ("where", fg.where, lambda: ([t(), v.scalar(), v.scalar()], {})),
        ("one_hot", fg.one_hot, lambda: ([t(), v.int()], {})),
        ("nonzero", fg.nonzero, lambda: ([t()], {})),
        ("clamp", fg.clamp, lambda: ([t()], {"min": v.float(), "max": v.float()})),
        ("matmul", fg.matmul, lambda: ([t(), t()], {})),
        ("softmax", F.softmax, lambda: ([t(), v.int()], {})),
        ("log_softmax", F.log_softmax, lambda: ([t(), v.int()], {})),
        ("layer_norm", F.layer_norm, lambda: ([t(), v.dim()], {})),
        ("dropout", F.dropout, lambda: ([t()], {"p": v.float()})),
        ("cross_entropy", F.cross_entropy, lambda: ([t(), t()], {})),
        ("mse_loss", F.mse_loss, lambda: ([t(), t()], {})),
        ("embedding", F.embedding, lambda: ([t(), t()], {})),
        ("conv2d", F.conv2d, lambda: ([t(), t()], {"stride": v.int(), "padding": v.int()})),
        ("max_pool2d", F.max_pool2d, lambda: ([t(), v.int()], {})),
        ("scaled_dot_product_attention", F.scaled_dot_product_attention, lambda: ([t(), t(), t()], {})),
        ("zeros", fg.zeros, lambda: (v.sizes(), {"dtype": v.dtype()})),
        ("ones", fg.ones, lambda: (v.sizes(), {})),
        ("empty", fg.empty, lambda: (v.sizes(), {})),
        ("full", fg.full, lambda: ([v.sizes(), v.scalar()], {"dtype": v.dtype()})),
        ("arange", fg.arange, lambda: ([v.scalar(), v.scalar()], {"step": v.scalar()})),
        ("linspace", fg.linspace, lambda: ([v.float(), v.float(), v.int()], {})),
        ("eye", fg.eye, lambda: ([v.int()], {})),
        ("randn", fg.randn, lambda: (v.sizes(), {})),
        ("randint", fg.randint, lambda: ([v.int(), v.int(), v.sizes()], {})),
        ("randperm", fg.randperm, lambda: ([v.int()], {})),
        ("tensor", fg.tensor, lambda: ([r.choice([v.scalar(), v.sizes(), [[1, 2], [3]], np.zeros((2, 0)), "x"])],
                                       {"dtype": v.dtype()})),
    ]
    binary = [("add", "__add__"), ("sub", "__rsub__"), ("mul", "__mul__"), ("div", "__truediv__"),
              ("pow", "__pow__"), ("eq", "__eq__"), ("lt", "__lt__"), ("matmul", "__matmul__")]
    name, fn, make = r.choice(table)
    args, kwargs = make()
    if method and args and isinstance(args[0], fg.Tensor) and hasattr(args[0], name):
        fn = getattr(args[0], name)  # the Tensor method form
        args = args[1:]
    choice = r.random()  # below, the receiver is always a tensor: errors are flowgrad's own
    if choice < 0.12:
        name, dunder = r.choice(binary)
        return name, (lambda a, b: getattr(a, dunder)(b)), [t(False), v.scalar()], {}
    if choice < 0.2:
        return "index", (lambda a, k: a[k]), [t(False), v.index()], {}
    if choice < 0.26:
        conv = r.choice([("int", int), ("float", float), ("bool", bool), ("item", lambda x: x.item()),
                         ("size", lambda x: x.size(v.int())), ("index", lambda x: [0, 1, 2][x])])
        return conv[0], conv[1], [t(False)], {}
    if choice < 0.32:
        return "", (lambda m, x: m(x)), [v.module(), t()], {}
    return name, fn, args, kwargs


def describe(name, fn, args, kwargs):
    def short(x):
        if isinstance(x, fg.Tensor):
            return f"Tensor{tuple(x.shape)}:{x.dtype}"
        s = repr(x)
        return s if len(s) < 60 else s[:57] + "..."
    return f"{name}({', '.join([short(a) for a in args] + [f'{k}={short(x)}' for k, x in kwargs.items()])})"


def judge(name, e):
    """None when `e` is a typed error that names the op, else why not."""
    text = str(e)
    if not isinstance(e, TYPED):
        return f"untyped {type(e).__name__}"
    if any(leak in text for leak in LEAKS):
        return "C++ internals in the message"
    if name and name not in text:
        return "message does not name the op"
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--record", default=None, help="file that holds the call being made")
    a = p.parse_args()
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
    rng = random.Random(a.seed)
    fg.manual_seed(a.seed)
    record = os.open(a.record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if a.record else None
    counts = {"ok": 0, "typed": 0, "problems": 0}
    def report(i, text, why, e):
        counts["problems"] += 1
        print(json.dumps({"call": i, "what": text, "problem": why,
                          "error": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)

    for i in range(a.calls):
        v = Values(rng)
        try:
            name, fn, args, kwargs = calls(v)
        except Exception as e:  # noqa: BLE001 (building a module argument with bad sizes)
            if not isinstance(e, TYPED) or any(leak in str(e) for leak in LEAKS):
                report(i, "building arguments", "untyped or C++ text", e)
            continue
        text = describe(name, fn, args, kwargs)
        if record is not None:
            os.pwrite(record, f"call {i} (seed {a.seed}): {text}".ljust(300).encode(), 0)
        try:
            out = fn(*args, **kwargs)
            if isinstance(out, fg.Tensor) and out.requires_grad and 0 < out.numel() < 10**6 and rng.random() < 0.5:
                out.sum().backward()
            counts["ok"] += 1
        except Exception as e:  # noqa: BLE001 (the point is to look at every exception)
            why = judge(name, e)
            if why:
                report(i, text, why, e)
            else:
                counts["typed"] += 1
    print(json.dumps({"summary": counts, "seed": a.seed, "calls": a.calls}), flush=True)
    return 0 if counts["problems"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
