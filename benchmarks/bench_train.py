"""Training throughput against PyTorch eager on the CPU, same data, same thread count, one run.

    python benchmarks/bench_train.py [--save]

Targets (issue 3): MLP 784-512-512-10 samples/s >= 1.0x PyTorch at batch 512 and >= 1.3x at
batch 64; tiny char transformer (4 layers, d=128, 4 heads, T=64, B=16) tokens/s >= 1.0x.
Peak RSS of each library is measured in a separate process running only that library.
"""
import argparse
import json
import subprocess
import sys
import time

import numpy as np

STEPS = {"mlp": 30, "transformer": 12}


def flowgrad_mlp_step(model, batch):
    """One Adam training step of `model` (784 -> 10) on fixed random data."""
    import flowgrad as fg
    opt = fg.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = fg.tensor(rng.standard_normal((batch, 784)).astype(np.float32))
    y = fg.tensor(rng.integers(0, 10, batch))

    def step():
        opt.zero_grad()
        fg.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def flowgrad_mlp(batch, steps):
    import flowgrad as fg
    from flowgrad import nn
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    return flowgrad_mlp_step(model, batch)


def torch_mlp(batch, steps):
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal((batch, 784)).astype(np.float32))
    y = torch.tensor(rng.integers(0, 10, batch))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def flowgrad_transformer(batch, steps, T=64, d=128, heads=4, layers=4, vocab=96):
    import flowgrad as fg
    from flowgrad import nn
    fg.manual_seed(0)
    blocks = [nn.TransformerBlock(d, heads, causal=True) for _ in range(layers)]
    emb, pos, norm, head = nn.Embedding(vocab, d), nn.Parameter(fg.randn(T, d) * 0.02), nn.LayerNorm(d), nn.Linear(d, vocab)
    params = [*emb.parameters(), pos, *(p for b in blocks for p in b.parameters()), *norm.parameters(), *head.parameters()]
    opt = fg.optim.AdamW(params, lr=1e-3)
    rng = np.random.default_rng(0)
    x = fg.tensor(rng.integers(0, vocab, (batch, T)))
    y = fg.tensor(rng.integers(0, vocab, (batch * T,)))

    def step():
        opt.zero_grad()
        h = emb(x) + pos
        for b in blocks:
            h = b(h)
        fg.nn.functional.cross_entropy(head(norm(h)).reshape(-1, vocab), y).backward()
        opt.step()
    return step


def torch_block(d, heads):
    """The same pre-norm block as flowgrad's TransformerBlock, in PyTorch."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x):
            B, L, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, -1)
            split = lambda t: t.view(B, L, heads, d // heads).transpose(1, 2)
            a = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(B, L, d))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))
    return Block()


def torch_transformer(batch, steps, T=64, d=128, heads=4, layers=4, vocab=96):
    import torch
    torch.manual_seed(0)
    blocks = torch.nn.Sequential(*[torch_block(d, heads) for _ in range(layers)])
    emb, pos, norm, head = torch.nn.Embedding(vocab, d), torch.nn.Parameter(torch.randn(T, d) * 0.02), torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)
    params = list(emb.parameters()) + [pos] + list(blocks.parameters()) + list(norm.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.integers(0, vocab, (batch, T)))
    y = torch.tensor(rng.integers(0, vocab, (batch * T,)))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(head(norm(blocks(emb(x) + pos))).reshape(-1, vocab), y).backward()
        opt.step()
    return step


def measure(make, batch, steps, rounds=3):
    step = make(batch, steps)
    for _ in range(3):
        step()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - start) / steps)
    return best


CASES = {"mlp": (flowgrad_mlp, torch_mlp), "transformer": (flowgrad_transformer, torch_transformer)}


def child(lib, case, batch):
    """Runs one library alone (for its peak RSS) and prints JSON."""
    fn = CASES[case][0 if lib == "flowgrad" else 1]
    seconds = measure(fn, batch, STEPS[case], rounds=1)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the parent process.
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM"))
    print(json.dumps({"seconds": seconds, "peak_rss_mb": int(hwm.split()[1]) / 1024}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], args.child[1], int(args.child[2]))
    import flowgrad as fg
    from common import machine, save, torch_peer
    torch = torch_peer()
    info = machine()
    print(f"machine: {info}")
    results = []
    for case, batch in (("mlp", 64), ("mlp", 512), ("transformer", 16)):
        unit, per_step = ("samples/s", batch) if case == "mlp" else ("tokens/s", batch * 64)
        row = {"case": case, "batch": batch, "unit": unit}
        row["flowgrad"] = per_step / measure(CASES[case][0], batch, STEPS[case])
        if torch is not None:
            row["torch"] = per_step / measure(CASES[case][1], batch, STEPS[case])
            row["ratio_vs_torch"] = row["flowgrad"] / row["torch"]
        for lib in ("flowgrad", "torch") if torch is not None else ("flowgrad",):
            out = subprocess.run([sys.executable, __file__, "--child", lib, case, str(batch)], capture_output=True,
                                 text=True, timeout=600)
            row[f"{lib}_peak_rss_mb"] = json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"] if out.returncode == 0 else None
        results.append(row)
        line = f"{case:12s} batch {batch:4d}: flowgrad {row['flowgrad']:9.0f} {unit}"
        if torch is not None:
            line += f"  torch {row['torch']:9.0f}  ratio {row['ratio_vs_torch']:.2f}x"
            line += f"  peak RSS {row['flowgrad_peak_rss_mb']:.0f} MB vs {row['torch_peak_rss_mb']:.0f} MB"
        print(line)
    if args.save:
        print(f"saved {save('bench_train', {'machine': info, 'command': 'python ' + ' '.join(sys.argv), 'results': results})}")


if __name__ == "__main__":
    main()
