"""BatchNorm + ReLU in compiled plans: in training on the CPU BatchNorm is one batch_norm op (the
batch statistics and the normalisation in passes over each channel), and the plan folds the ReLU
after it into it (the normalised values written once, already rectified) and the ReLU's gradient
into batch_norm_backward (the mask applied in its own passes); elsewhere the statistics are taken
once and x * scale + shift runs with the ReLU as one fused elementwise pass. The compiled step
trains as eager mode does, and the result matches NumPy."""
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
    forward = [r["op"] for r in step.explain().rows if r["phase"] == "forward"]
    backward = [r["op"] for r in step.explain().rows if r["phase"] == "backward"]
    assert "batch_norm" in forward and "relu" not in forward, forward
    assert "batch_norm_backward" in backward and "relu_backward" not in backward, backward


def test_a_batch_norm_output_read_elsewhere_keeps_its_relu():
    bn = nn.BatchNorm2d(3)
    x = batches(1)[0][0]

    def loss(v):
        y = bn(v)
        return (F.relu(y) + 0.5 * y).sum()
    step = fg.compile(loss, example_inputs=(x,))
    ops = [r["op"] for r in step.explain().rows]
    assert "batch_norm" in ops and "relu" in ops, ops
    assert step(x).item() == loss(x).item()


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
