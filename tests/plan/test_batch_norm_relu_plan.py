"""BatchNorm + ReLU in compiled plans: in training BatchNorm takes the batch statistics once (mean and
var) and normalises with one scale and shift per channel, x * scale + shift, so the plan's
elementwise fusion runs that multiply, the add and the ReLU after it as one fused pass over the
activation; the compiled step trains as eager mode does, and the result matches NumPy."""
import numpy as np

import flowgrad as fg
from flowgrad import nn

from conftest import assert_compiled_trains_like_eager

F = nn.functional


def conv_net():
    fg.manual_seed(3)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 8 * 8, 3))


def batches(count):
    rng = np.random.default_rng(4)
    return [(fg.tensor(rng.normal(1.0, 2.0, (6, 3, 16, 16)).astype(np.float32)), fg.tensor(rng.integers(0, 3, 6)))
            for _ in range(count)]


def test_normalisation_and_relu_run_as_one_fused_pass():
    model = conv_net()
    step = fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=batches(1)[0])
    rows = [r for r in step.explain().rows if r["phase"] == "forward"]
    relu = next(r for r in rows if r["op"] == "relu")
    assert relu["run"] >= 0, "the ReLU after BatchNorm is not in a fused run"
    fused = [(r["op"], r["module"]) for r in rows if r["run"] == relu["run"]]
    assert fused == [("mul", "1"), ("add", "1"), ("relu", "2")]


def test_compiled_conv_batch_norm_relu_trains_like_eager():
    def build():
        model = conv_net()
        return model, fg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    assert_compiled_trains_like_eager(build, F.cross_entropy, batches(3), rtol=1e-4, atol=1e-5)


def test_batch_norm_training_output_matches_numpy_for_large_means():
    """The scale-and-shift form against the textbook (x - mean) / sqrt(var + eps), with channel means
    far from zero (where x * scale + shift cancels most)."""
    rng = np.random.default_rng(5)
    x = rng.normal(0.0, 1.0, (4, 3, 5, 7)) + np.array([100.0, -50.0, 3.0]).reshape(1, 3, 1, 1)
    bn = nn.BatchNorm2d(3)
    with fg.no_grad():
        bn.weight.copy_(fg.tensor([0.5, 2.0, -1.0]))
        bn.bias.copy_(fg.tensor([0.1, -0.2, 0.3]))
    got = bn(fg.tensor(x.astype(np.float32)))
    mean, var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
    want = (x - mean) / np.sqrt(var + 1e-5) * np.array([0.5, 2.0, -1.0]).reshape(1, 3, 1, 1) + \
        np.array([0.1, -0.2, 0.3]).reshape(1, 3, 1, 1)
    fg.testing.assert_close(got, want, rtol=1e-4, atol=2e-4)
