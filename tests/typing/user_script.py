"""A user's training script, type-checked by tests/test_stubs.py with mypy (it is never run):
the stubs of flowgrad._core must make every call here known and well-typed."""
import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def build_model() -> fg.Graph:
    return (fg.flow(nn.Linear(64, 32)).through(nn.ReLU()).tag("hidden")
            .split(nn.Linear(32, 16), nn.Sequential(nn.Linear(32, 16), nn.Tanh()))
            .merge(fg.flow.Cat(-1))
            .through(nn.Linear(32, 10)).tag("logits")
            .build())


def train() -> list[float]:
    fg.manual_seed(0)
    model = build_model()
    optimizer = fg.optim.AdamW(model.parameters(), lr=1e-3)
    x = fg.from_numpy(np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32))
    y = fg.tensor([1, 0, 3, 2, 9, 4, 5, 7])

    logits: fg.Tensor = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

    step = fg.compile(model, F.cross_entropy, optimizer, example_inputs=(x, y))
    value: float = step(x, y).item()
    model.collect("hidden")
    model.record("loss", value)
    means: dict[str, float] = model.flush()
    trend = model.trend("loss")
    shape: list[int] = list(model.tagged("logits").shape)
    dot: str = model.dot()
    return [means["loss"], trend.latest(), float(len(shape)), float(len(dot))]
