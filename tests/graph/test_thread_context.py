"""The branches of a parallel FlowBuilder level run on pool threads with the whole execution context
of the thread that called the graph (autocast, grad mode, anomaly mode), as they would on one thread."""
import threading

import flowgrad as fg
from flowgrad import nn


def test_autocast_reaches_every_branch_of_a_parallel_split(four_threads):
    fg.manual_seed(0)
    g = (fg.flow(nn.Linear(64, 64))
         .split(nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 64)).tag_group("branch")
         .merge(fg.flow.Cat(-1))
         .build())
    assert g.parallel
    x = fg.randn(32, 64)
    for _ in range(50):
        with fg.autocast("cpu", dtype=fg.bfloat16):
            out = g(x)
        assert out.dtype == fg.bfloat16
        assert [g.tagged(f"branch_{i}").dtype for i in range(4)] == [fg.bfloat16] * 4


class Probe(nn.Module):
    """Records the context each call runs in, and its thread. Two calls at a time meet at `both`, so
    a level of them runs on at least two threads: the caller's and a pool worker."""

    def __init__(self, seen, both):
        super().__init__()
        self.seen, self.both = seen, both

    def forward(self, x):
        self.both.wait()
        self.seen.append((fg.is_grad_enabled(), fg.is_autocast_enabled("cpu"), fg.get_autocast_dtype("cpu"),
                          fg._core.is_anomaly_enabled(), threading.get_ident()))
        return x * 2


def test_every_branch_runs_in_the_callers_context(four_threads):
    seen, both = [], threading.Barrier(2, timeout=60)
    g = fg.flow(nn.Identity()).split(*[Probe(seen, both) for _ in range(4)]).merge(fg.flow.Add()).build()
    x = fg.ones(2, 3)
    for _ in range(10):
        with fg.no_grad(), fg.autocast("cpu", dtype=fg.float16), fg.autograd.detect_anomaly():
            g(x)
    assert len(seen) == 40
    assert len({s[-1] for s in seen}) >= 2
    assert {s[:-1] for s in seen} == {(False, True, fg.float16, True)}
    seen.clear()
    g(x)  # and each branch leaves its thread as it found it
    assert {s[:-1] for s in seen} == {(True, False, fg.bfloat16, False)}
