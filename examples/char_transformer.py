"""Train a tiny character-level transformer on the help texts Python ships
(pydoc_data.topics: on every machine, nothing copied into the repository) and sample from it.

    python examples/char_transformer.py [--steps 400] [--layers 2] [--dim 64]
"""
import argparse
import time

import numpy as np
import pydoc_data.topics

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


class CharTransformer(nn.Module):
    def __init__(self, vocab, dim, heads, layers, context):
        super().__init__()
        self.context = context
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Parameter(fg.randn(context, dim) * 0.02)
        self.blocks = nn.ModuleList([nn.TransformerBlock(dim, heads, causal=True) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        t = idx.shape[-1]
        x = self.tokens(idx) + self.positions[:t]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


@fg.no_grad()
def sample(model, prompt_ids, length, temperature=0.8):
    model.eval()
    ids = list(prompt_ids)
    for _ in range(length):
        window = fg.tensor([ids[-model.context:]])
        probs = F.softmax(model(window)[0, -1] / temperature, -1)
        ids.append(fg.multinomial(probs, 1).item())
    model.train()
    return ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--chars", type=int, default=300_000, help="how much of the help text to train on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    text = "\n".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics))[: args.chars]
    vocab = sorted(set(text))
    encode = {c: i for i, c in enumerate(vocab)}
    data = np.array([encode[c] for c in text], dtype=np.int64)
    fg.manual_seed(args.seed)
    model = CharTransformer(len(vocab), args.dim, args.heads, args.layers, args.context)
    optimizer = fg.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warmup = max(1, args.steps // 10)  # a linear warm-up, then a cosine decay (per step)
    schedule = fg.optim.lr_scheduler
    scheduler = schedule.SequentialLR(optimizer, [schedule.LinearLR(optimizer, 0.1, 1.0, warmup),
                                                  schedule.CosineAnnealingLR(optimizer, max(1, args.steps - warmup),
                                                                             eta_min=3e-4)],
                                      milestones=[warmup])
    print(f"{len(text)} characters, vocabulary {len(vocab)}, model with {model.num_parameters()} parameters")
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        starts = rng.integers(0, len(data) - args.context - 1, size=args.batch_size)
        xb = fg.tensor(np.stack([data[s:s + args.context] for s in starts]))
        yb = fg.tensor(np.stack([data[s + 1:s + 1 + args.context] for s in starts]))
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb).reshape(-1, len(vocab)), yb.reshape(-1))
        loss.backward()
        fg.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step == 1 or step % 50 == 0:
            tokens = step * args.batch_size * args.context
            print(f"step {step:4d}  loss {loss.item():.3f}  ({tokens / (time.perf_counter() - start):.0f} tokens/s)")
    prompt = "The "
    out = sample(model, [encode[c] for c in prompt], 200)
    print("sample:\n" + "".join(vocab[i] for i in out))


if __name__ == "__main__":
    main()
