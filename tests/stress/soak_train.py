"""A training soak: many steps of an ordinary training loop must not grow memory.

    python tests/stress/soak_train.py --steps 5000

Trains a small MLP with Adam; records the CPU allocator's live bytes and the process's resident
set after a warm-up and at the end, and prints them as one JSON line.
"""
import argparse
import json

import flowgrad as fg
from flowgrad import nn


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--warmup", type=int, default=200)
    a = p.parse_args()
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = fg.optim.Adam(model.parameters(), lr=1e-3)
    x, y = fg.randn(64, 8), fg.randn(64, 1)
    total, losses, marks = 0.0, [], {}
    for step in range(a.steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        total = total + loss.detach()  # a running sum that must not keep graphs alive
        if step % 100 == 0:
            losses.append(loss.item())
        if step + 1 in (a.warmup, a.steps):
            marks[step + 1] = {"allocated": fg.cpu_memory_stats()["allocated"], "rss": rss_bytes()}
    print(json.dumps({"marks": {str(k): m for k, m in marks.items()}, "first_loss": losses[0],
                      "last_loss": losses[-1], "mean_loss": total.item() / a.steps}))


if __name__ == "__main__":
    main()
