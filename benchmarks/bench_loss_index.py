"""CPU side of the transformer op table (issue 12, items 2 and 3), one run:

    python benchmarks/bench_loss_index.py [--save] [--quick]

  - cross_entropy forward+backward over (N, V) logits: the fused op against the composite it
    replaced (log_softmax + gather, fg.nn.functional._cross_entropy_composite) and PyTorch;
  - embedding backward (index_select's backward): index_add reading the (N,) index against the
    former scatter_add over the index expanded to (N, D), and PyTorch;
  - the column sum (sum over dim 0 of (2048, 3072), the bias-gradient shape) against NumPy and
    PyTorch.
The GPU numbers for the same shapes come from bench_cuda.py.
"""
import argparse
import sys

import numpy as np

import flowgrad as fg
from common import best_time, machine, save

try:
    import torch
except ImportError:
    torch = None

F = fg.nn.functional


def cross_entropy_case(n, vocab):
    rng = np.random.default_rng(0)
    logits_np = rng.standard_normal((n, vocab), dtype=np.float32)
    target_np = rng.integers(0, vocab, size=n)
    target = fg.tensor(target_np)

    def step(fn):
        x = fg.tensor(logits_np, requires_grad=True)
        fn(x, target, label_smoothing=0.1).backward()
    row = {"n": n, "vocab": vocab,
           "fused_ms": best_time(lambda: step(F.cross_entropy), repeat=3) * 1e3,
           "composite_ms": best_time(lambda: step(fg._core.functional._cross_entropy_composite), repeat=3) * 1e3}
    if torch is not None:
        tt = torch.tensor(target_np)

        def tstep():
            x = torch.tensor(logits_np, requires_grad=True)
            torch.nn.functional.cross_entropy(x, tt, label_smoothing=0.1).backward()
        row["torch_ms"] = best_time(tstep, repeat=3) * 1e3
    return row


def embedding_backward_case(tokens, vocab, dim):
    rng = np.random.default_rng(1)
    idx = fg.tensor(rng.integers(0, vocab, size=tokens))
    grad = fg.tensor(rng.standard_normal((tokens, dim), dtype=np.float32))
    zeros = fg.zeros(vocab, dim)
    expanded = fg.contiguous(idx.reshape(-1, 1).expand(tokens, dim))
    row = {"tokens": tokens, "vocab": vocab, "dim": dim,
           "index_add_ms": best_time(lambda: fg.index_add(zeros, 0, idx, grad), repeat=3) * 1e3,
           "expanded_scatter_add_ms": best_time(lambda: fg.scatter_add(zeros, 0, expanded, grad), repeat=3) * 1e3}
    if torch is not None:
        tz, ti, tg = torch.zeros(vocab, dim), torch.tensor(idx.numpy()), torch.tensor(grad.numpy())
        row["torch_index_add_ms"] = best_time(lambda: tz.index_add(0, ti, tg), repeat=3) * 1e3
    return row


def column_sum_case(rows, cols):
    a = np.random.default_rng(2).standard_normal((rows, cols), dtype=np.float32)
    t = fg.from_numpy(a)
    row = {"shape": [rows, cols], "flowgrad_ms": best_time(lambda: fg.sum(t, 0), repeat=3) * 1e3,
           "numpy_ms": best_time(lambda: a.sum(0), repeat=3) * 1e3}
    if torch is not None:
        ta = torch.from_numpy(a)
        row["torch_ms"] = best_time(lambda: ta.sum(0), repeat=3) * 1e3
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--quick", action="store_true", help="the smaller cross_entropy only")
    args = parser.parse_args()
    result = {"machine": machine(), "command": "python benchmarks/bench_loss_index.py" + " --save" * args.save}
    sizes = [(512, 8192)] if args.quick else [(512, 8192), (2048, 8192)]
    result["cross_entropy"] = [cross_entropy_case(n, v) for n, v in sizes]
    for r in result["cross_entropy"]:
        print(f"cross_entropy fwd+bwd ({r['n']}, {r['vocab']}): fused {r['fused_ms']:.1f} ms, composite "
              f"{r['composite_ms']:.1f} ms" + (f", torch {r['torch_ms']:.1f} ms" if "torch_ms" in r else ""))
    result["embedding_backward"] = e = embedding_backward_case(2048, 8192, 768)
    print(f"embedding backward (2048 tokens, 8192x768): index_add {e['index_add_ms']:.2f} ms, expanded scatter_add "
          f"{e['expanded_scatter_add_ms']:.2f} ms" + (f", torch {e['torch_index_add_ms']:.2f} ms" if torch else ""))
    result["column_sum"] = c = column_sum_case(2048, 3072)
    print(f"column sum (2048, 3072) over dim 0: flowgrad {c['flowgrad_ms']:.2f} ms, numpy {c['numpy_ms']:.2f} ms"
          + (f", torch {c['torch_ms']:.2f} ms" if torch else ""))
    if args.save:
        print("saved", save("bench_loss_index", result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
