"""Long ops release the GIL: another Python thread keeps running while they compute.

The check is by event order, not by time: with a huge switch interval the interpreter never
takes the GIL from a running thread, so the counter thread can only advance between the
worker's two reads of it if the op itself let go of the GIL."""
import sys
import threading
import time

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn


def progressed_during(op):
    """How far a busy counter thread got while op() ran on another thread."""
    count, result = [0], {}
    done, started = threading.Event(), threading.Event()

    def counter():
        started.set()
        while not done.is_set():
            count[0] += 1
            time.sleep(0)  # lets the worker have the GIL between increments

    def worker():
        started.wait()
        try:
            before = count[0]
            op()
            result["progress"] = count[0] - before
        finally:
            done.set()  # the counter stops even when op raises

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)  # no forced hand-over: only a released GIL lets the counter run
    try:
        threads = [threading.Thread(target=counter), threading.Thread(target=worker)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    return result["progress"]


def _big(*shape):
    return fg.tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


def _backward():
    a = _big(600, 600).requires_grad_()
    loss = (a @ a).tanh().sum()
    return lambda: loss.backward()


CASES = {
    "matmul": lambda: (lambda a: lambda: fg.matmul(a, a))(_big(700, 700)),
    "operator @": lambda: (lambda a: lambda: a @ a)(_big(700, 700)),
    "elementwise": lambda: (lambda a: lambda: [fg.exp(a) * a + 1.0 for _ in range(5)])(_big(2_000_000)),
    "layer_norm": lambda: (lambda a: lambda: [nn.functional.layer_norm(a, 1000) for _ in range(5)])(_big(2000, 1000)),
    "cross_entropy": lambda: (lambda a, t: lambda: [nn.functional.cross_entropy(a, t) for _ in range(5)])(
        _big(4000, 500), fg.zeros(4000, dtype=fg.int64)),
    "reduction": lambda: (lambda a: lambda: [a.sum(dim=1) for _ in range(20)])(_big(2000, 1000)),
    "conv2d": lambda: (lambda x, w: lambda: nn.functional.conv2d(x, w, padding=1))(_big(8, 16, 64, 64), _big(32, 16, 3, 3)),
    "module forward": lambda: (lambda m, x: lambda: m(x))(nn.Sequential(nn.Linear(800, 800), nn.ReLU()), _big(800, 800)),
    "lstm": lambda: (lambda m, x: lambda: m(x))(nn.LSTM(64, 128), _big(50, 16, 64)),
    "backward": _backward,
}


@pytest.mark.parametrize("name", list(CASES))
def test_long_op_lets_another_thread_run(name):
    # Retried with a fresh op each time (a backward runs once): on a loaded machine the OS may be
    # slow to wake the counter thread while one op computes.
    assert any(progressed_during(CASES[name]()) > 0 for _ in range(5))


def test_python_submodule_inside_a_released_forward_takes_the_gil_back():
    class Double(nn.Module):
        def forward(self, x):
            return x * 2

    model = nn.Sequential(nn.Linear(800, 800), Double())  # C++ forward (GIL released) calls Python
    big, out = _big(800, 800), []
    assert any(progressed_during(lambda: out.append(model(big))) > 0 for _ in range(3))  # as above: retried
    np.testing.assert_allclose(out[0].numpy(), (model[0](big) * 2).numpy())
