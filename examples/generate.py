"""Train a tiny GPT on Python's help texts for a few seconds, then stream text from it with
fg.generate: the prompt's prefill is one compiled plan and every new token one replay of the decode
plan (model, KV-cache write and sampling), over a preallocated fg.nn.KVCache.

    python examples/generate.py [--steps 150] [--tokens 200] [--temperature 0.8] [--top-k 20]

TinyGPT is also the model of benchmarks/bench_generate.py and tests/nn/test_generate.py.
"""
import argparse
import sys
import time

import numpy as np
import pydoc_data.topics

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


class Attention(nn.Module):
    def __init__(self, dim, heads, layer):
        super().__init__()
        self.heads, self.layer = heads, layer
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, cache=None):
        b, t, c = x.shape
        q, k, v = (z.reshape(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, -1))
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # writes k, v at each row's positions and attends over what the row holds
            y = cache.attend(self.layer, q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, dim, heads, layer):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, layer)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, cache=None):
        x = x + self.attn(self.norm1(x), cache)
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    """A GPT that fg.generate can drive: forward(tokens, cache=None) and kv_cache(batch, max_len)."""

    def __init__(self, vocab, dim=64, heads=4, layers=2, context=256):
        super().__init__()
        self.dim, self.heads, self.context = dim, heads, context
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, i) for i in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx, cache=None):
        t = idx.shape[-1]
        at = cache.positions(t) if cache is not None else fg.arange(t, device=idx.device).reshape(1, t)
        x = self.tokens(idx) + self.positions(at)
        for block in self.blocks:
            x = block(x, cache)
        return self.head(self.norm(x))

    def kv_cache(self, batch, max_len):
        return nn.KVCache(len(self.blocks), batch, self.heads, max_len, self.dim // self.heads,
                          device=self.head.weight.device)


def help_text(chars):
    text = "\n".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics))[:chars]
    vocab = sorted(set(text))
    return text, vocab


def train(model, data, steps, batch_size, context, seed=0):
    """AdamW on random windows of data, as one compiled training step."""
    vocab = model.head.weight.shape[0]
    rng = np.random.default_rng(seed)

    def batch():
        starts = rng.integers(0, len(data) - context - 1, size=batch_size)
        return (fg.tensor(np.stack([data[s:s + context] for s in starts])),
                fg.tensor(np.stack([data[s + 1:s + 1 + context] for s in starts])))

    def loss_fn(logits, y):
        return F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))

    step = fg.compile(model, loss_fn, fg.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01),
                      example_inputs=batch())
    for i in range(1, steps + 1):
        loss = step(*batch())
        if i == 1 or i % 50 == 0:
            print(f"step {i:4d}  loss {loss.item():.3f}")
    return loss.item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--chars", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    text, vocab = help_text(args.chars)
    encode = {c: i for i, c in enumerate(vocab)}
    data = np.array([encode[c] for c in text], dtype=np.int64)
    fg.manual_seed(args.seed)
    model = TinyGPT(len(vocab))
    start = time.perf_counter()
    train(model, data, args.steps, 16, 64, args.seed)
    print(f"trained in {time.perf_counter() - start:.1f} s")
    model.eval()
    prompt = "The "
    print("sample:\n" + prompt, end="", flush=True)
    start = time.perf_counter()
    for row in fg.generate(model, [encode[c] for c in prompt], args.tokens, temperature=args.temperature,
                           top_k=args.top_k, seed=args.seed, stream=True):
        sys.stdout.write(vocab[row[0]])
        sys.stdout.flush()
    print(f"\n{args.tokens} tokens in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
