"""DDP's gradient all-reduce overlaps the backward: argv[1] 'order' checks that eager DDP starts a
bucket's average (all_reduce_start_) while backward still has ops to run and waits for the
buckets (all_reduce_wait_) only after the last start, that a compiled step's plan does the same
(starts among the backward's instructions, waits after the last start and before the first
update), and the start/wait ops on their own against NumPy. argv[1] 'left': the last rank leaves
the job; on the others a started all-reduce raises fg.FlowgradError from its wait (the start
returns), and DDP's backward raises it too, every time, instead of hanging."""
import sys

import numpy as np

import flowgrad as fg
import flowgrad.distributed as dist
import flowgrad.nn.functional as F
from flowgrad.nn.parallel import DistributedDataParallel as DDP

dist.init("mpi")
rank, size = dist.rank(), dist.world_size()
start_, wait_ = dist._d.all_reduce_start_, dist._d.all_reduce_wait_
COLLECTIVE = {"all_reduce_start_", "all_reduce_wait_"}
PACKING = COLLECTIVE | {"cat", "reshape", "narrow", "zeros", "fill_", "copy_"}


def mlp():
    fg.manual_seed(0)
    return fg.nn.Sequential(fg.nn.Linear(7, 16), fg.nn.Tanh(), fg.nn.Linear(16, 16), fg.nn.ReLU(), fg.nn.Linear(16, 3))


def check_order(ops, buckets, what):
    starts = [i for i, op in enumerate(ops) if op == "all_reduce_start_"]
    waits = [i for i, op in enumerate(ops) if op == "all_reduce_wait_"]
    assert len(starts) == len(waits) == buckets, (what, ops)
    computed_after = [i for i, op in enumerate(ops) if i > starts[0] and op not in PACKING]
    assert computed_after and computed_after[0] < starts[-1], (what, "no backward op between starts", ops)
    assert starts[-1] < waits[0], (what, "a wait before the last start", ops)
    return starts, waits


x = fg.tensor(np.random.default_rng(rank).standard_normal((5, 7)).astype(np.float32))
y = fg.zeros(5, 3)

if sys.argv[1] == "order":
    # eager: the ops this thread runs during backward, in order
    model = mlp()
    ddp = DDP(model, bucket_mb=1e-6)  # one bucket per parameter
    buckets = len(ddp._reducer.bucket_indices)
    loss = F.mse_loss(ddp(x), y)
    with fg._core.plan.OpLog() as log:
        loss.backward()
    check_order(list(log.ops), buckets, "eager")
    eager = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    # the average is right: the sum over ranks of each rank's own gradient, over size
    local = mlp()
    F.mse_loss(local(x), y).backward()
    mine = fg.cat([p.grad.reshape(-1) for p in local.parameters()])
    dist.all_reduce(mine, op="avg")
    np.testing.assert_allclose(np.concatenate([g.reshape(-1) for g in eager.values()]), mine.numpy(), rtol=1e-5, atol=1e-6)

    # compiled: the plan starts each bucket among the backward's instructions
    model = mlp()
    ddp = DDP(model, bucket_mb=1e-6)
    step = fg.compile(ddp, F.mse_loss, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(x, y))
    step(x, y)
    rows = step.explain().rows
    ops = [r["op"] for r in rows]
    starts, waits = check_order(ops, buckets, "compiled")
    assert any(r["phase"] == "backward" and r["op"] not in PACKING for r in rows[starts[0] + 1:starts[-1]]), ops
    updates = [i for i, op in enumerate(ops) if "_update" in op]
    assert waits[-1] < updates[0], ("a wait after an update", ops)

    # the ops on their own: the result is there after the wait; work may run in between
    t = fg.tensor(np.arange(6, dtype=np.float32) * (rank + 1))
    assert start_(t, "sum") is not None
    busy = (fg.ones(64, 64) @ fg.ones(64, 64)).sum()  # the caller computes meanwhile
    try:
        start_(t, "sum")
        raise AssertionError("a second start on a tensor in flight did not raise")
    except fg.InvalidArgumentError as e:
        assert "already in flight; call all_reduce_wait_ on it first" in str(e), e
    out = wait_(t)
    np.testing.assert_allclose(out.numpy(), np.arange(6) * size * (size + 1) / 2)
    assert float(busy) == 64 * 64 * 64
    print(f"rank {rank} overlap ok", flush=True)

elif sys.argv[1] == "left":
    model = mlp()
    ddp = DDP(model, bucket_mb=1e-6)
    dist.barrier()
    if rank == size - 1:
        dist.destroy()  # leaves after the broadcasts and the barrier
        print(f"rank {rank} left", flush=True)
        sys.exit(0)
    t = fg.ones(4)
    start_(t, "avg")  # issued: the error comes with the wait
    try:
        wait_(t)
        raise AssertionError("the wait returned although a rank left")
    except fg.FlowgradError as e:
        assert type(e) is fg.FlowgradError and f"rank {size - 1} left the job" in str(e), e
    for attempt in range(2):  # the reducer is ready again after a failed backward
        try:
            F.mse_loss(ddp(x), y).backward()
            raise AssertionError("backward returned although a rank left")
        except fg.FlowgradError as e:
            assert type(e) is fg.FlowgradError and f"rank {size - 1} left the job" in str(e), e
    print(f"rank {rank} wait raised", flush=True)
    dist.destroy()
