"""fg.compile of a DistributedDataParallel step: the gradient all-reduce is recorded as plan
instructions (per bucket one all_reduce_start_ and one all_reduce_wait_, every wait before the
optimizer update; job_overlap.py checks where the starts go) and
the compiled step trains like eager DDP and like one process on the concatenated batches; a step
compiled inside ddp.no_sync() traces no all-reduce and traces again with it once called outside."""
import numpy as np

import flowgrad as fg
import flowgrad.distributed as dist
import flowgrad.nn.functional as F
from flowgrad.nn.parallel import DistributedDataParallel as DDP
import job_util
from job_util import close, params

dist.init("mpi")
rank, size = dist.rank(), dist.world_size()
B, STEPS = 5, 4


class MLP(fg.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = fg.nn.Linear(7, 16)
        self.fc2 = fg.nn.Linear(16, 16)
        self.fc3 = fg.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc3(self.fc2(self.fc1(x).tanh()).relu())


def batches(step):
    return job_util.batches(step, size * B)


def train(make_opt, bucket_mb, how):
    """Parameters after STEPS steps: 'compiled' or 'eager' DDP on this rank's rows, or 'one' process on all rows."""
    fg.manual_seed(0)
    model = MLP()
    net = DDP(model, bucket_mb=bucket_mb) if how != "one" else model
    opt = make_opt(model.parameters())
    mine = slice(rank * B, (rank + 1) * B) if how != "one" else slice(None)
    x0, y0 = batches(0)
    step = fg.compile(net, F.mse_loss, opt, example_inputs=(fg.tensor(x0[mine]), fg.tensor(y0[mine]))) \
        if how == "compiled" else None
    for k in range(STEPS):
        x, y = (fg.tensor(a[mine]) for a in batches(k))
        if step is not None:
            step(x, y)
        else:
            opt.zero_grad()
            F.mse_loss(net(x), y).backward()
            opt.step()
    return params(model), step, net


for make_opt, label in ((lambda ps: fg.optim.SGD(ps, lr=0.1, momentum=0.9), "SGD"),
                        (lambda ps: fg.optim.Adam(ps, lr=0.01), "Adam")):
    one, _, _ = train(make_opt, 25, "one")
    for bucket_mb in (25, 1e-4):  # one bucket; a bucket per layer
        eager, _, _ = train(make_opt, bucket_mb, "eager")
        compiled, step, ddp = train(make_opt, bucket_mb, "compiled")
        what = f"{label}, bucket_mb={bucket_mb}"
        close(eager, one, f"eager DDP vs one process ({what})")
        close(compiled, one, f"compiled DDP vs one process ({what})")
        close(compiled, eager, f"compiled vs eager DDP ({what})")
        ops = [ins["op"] for ins in step.ir()]
        starts = [i for i, op in enumerate(ops) if op == "all_reduce_start_"]
        waits = [i for i, op in enumerate(ops) if op == "all_reduce_wait_"]
        updates = [i for i, op in enumerate(ops) if "_update" in op]  # per parameter or multi-tensor
        assert len(starts) == len(waits) == len(ddp._reducer.bucket_indices), (what, ops)
        assert waits[-1] < updates[0], (what, ops)  # every gradient averaged before any update



def grads(m):
    return {n: p.grad.numpy().copy() for n, p in m.named_parameters()}


def eager_grads(net, model, x, y):
    for p in model.parameters():
        p.grad = None
    F.mse_loss(net(x), y).backward()
    return grads(model)


# compiled inside ddp.no_sync(): no all-reduce is traced and each rank keeps its own gradients;
# called outside it, the step traces again and averages like eager DDP
fg.manual_seed(0)
model = MLP()
ddp = DDP(model)
mine = slice(rank * B, (rank + 1) * B)
x, y = (fg.tensor(a[mine]) for a in batches(0))
with ddp.no_sync():
    step = fg.compile(ddp, F.mse_loss, example_inputs=(x, y))
    step(x, y)
    assert not {"all_reduce_start_", "all_reduce_wait_"} & {ins["op"] for ins in step.ir()}
    local = grads(model)
close(local, eager_grads(model, model, x, y), "compiled in no_sync vs this rank's own gradients")
step(x, y)
assert [ins["op"] for ins in step.ir()].count("all_reduce_start_") == len(ddp._reducer.bucket_indices)
synced = grads(model)
close(synced, eager_grads(ddp, model, x, y), "compiled after no_sync vs eager DDP")
assert any(not np.allclose(local[n], synced[n]) for n in local)  # the ranks' batches differ

# the op on its own, eager: in place on a strided view, with avg
base = fg.tensor(np.arange(24, dtype=np.float32).reshape(4, 6) * (rank + 1))
view = base[:, 1:5:2]
out = dist._d.all_reduce_(view, "avg")
want = np.arange(24, dtype=np.float32).reshape(4, 6) * (size + 1) / 2
np.testing.assert_allclose(out.numpy(), want[:, 1:5:2], rtol=1e-6)
np.testing.assert_allclose(base.numpy()[:, 0], np.arange(0, 24, 6) * (rank + 1))  # untouched columns
print(f"rank {rank}/{size} compiled ddp ok")
