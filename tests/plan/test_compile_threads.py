"""fg.compile traces only the thread that compiles: eager ops that other threads run meanwhile (a data
loader, a logging thread) compute as usual and stay out of the plan, and a trace started inside
another one (or ended out of order) leaves the outer one as it was."""
import threading
import time

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


class WaitsFor(nn.Module):
    """A model whose forward, while it is traced, waits until `other` has run `rounds` more rounds."""

    def __init__(self, other, rounds=20):
        super().__init__()
        self.fc, self.other, self.rounds = nn.Linear(8, 3), other, rounds

    def forward(self, x):
        if self.other is not None:
            target = self.other.count + self.rounds
            deadline = time.monotonic() + 30
            while self.other.count < target and self.other.alive() and time.monotonic() < deadline:
                time.sleep(0.001)  # releases the interpreter: the other thread computes during the trace
            assert self.other.count >= target, "the other thread stopped or stalled during the trace"
        return self.fc(x).relu()


class Busy:
    """Runs round() on a thread of its own until stopped; keeps every exception it raised."""

    def __init__(self, round):
        self.round, self.count, self.errors, self.stop = round, 0, [], False
        self.thread = threading.Thread(target=self.loop)

    def loop(self):
        while not self.stop:
            try:
                self.round()
            except Exception as e:  # noqa: BLE001 - any failure on this thread is the defect
                self.errors.append(f"{type(e).__name__}: {e}")
                return
            self.count += 1

    def alive(self):
        return self.thread.is_alive()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()


def compiled(other):
    fg.manual_seed(0)
    model = WaitsFor(other)
    opt = fg.optim.AdamW(model.parameters())
    x, y = fg.randn(4, 8), fg.tensor(np.array([0, 1, 2, 0]))
    return fg.compile(model, F.cross_entropy, opt, example_inputs=(x, y)), (x, y)


def test_eager_ops_on_another_thread_compute_while_a_compile_traces():
    alone, _ = compiled(None)
    a, b = fg.randn(1000), fg.randn(1000)
    want = float((a.numpy() + b.numpy()).sum())

    def round():
        assert abs(float((a + b).sum()) - want) <= 1e-3 * max(1.0, abs(want))
        assert fg.randn(10).numpy().shape == (10,)

    with Busy(round) as busy:
        steps = [compiled(busy)[0] for _ in range(3)]
    assert busy.errors == []
    assert busy.count >= 60
    for step in steps:  # the other thread's calls are not in the trace
        assert step.stats["traced"] == alone.stats["traced"]
        assert step.stats["instructions"] == alone.stats["instructions"]


def test_a_dataloader_on_another_thread_gives_data_while_a_compile_traces():
    rows = np.arange(60, dtype=np.float32).reshape(30, 2)
    loader = fg.data.DataLoader(rows, batch_size=4, shuffle=True, seed=3)
    epoch = np.concatenate([b.numpy() for b, in loader])
    assert sorted(epoch[:, 0]) == list(rows[:, 0])

    def round():
        got = np.concatenate([b.numpy() for b, in loader])
        np.testing.assert_array_equal(np.sort(got[:, 0]), rows[:, 0])

    with Busy(round) as busy:
        compiled(busy)
    assert busy.errors == []


def test_a_compile_inside_a_traced_step_leaves_the_outer_trace_as_it_was():
    inner = {}

    class CompilesInside(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            h = self.fc(x)
            z = fg.ones(2, 3)  # made during the outer trace: real memory
            inner["step"] = fg.compile(lambda v: (v * 3).sum(), example_inputs=(z,))
            before = fg._core.plan.kernel_calls()
            out = (h * h).sum()  # still traced on shapes only: no kernel runs
            inner["kernels"] = fg._core.plan.kernel_calls() - before
            return out

    model = CompilesInside()
    x = fg.randn(4, 3)
    step = fg.compile(model, None, None, example_inputs=(x,))
    assert inner["kernels"] == 0
    np.testing.assert_allclose(step(x).item(), float((model.fc(x).numpy() ** 2).sum()), rtol=1e-5)
    np.testing.assert_allclose(inner["step"](fg.ones(2, 3)).item(), 18.0)
