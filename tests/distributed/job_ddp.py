"""DistributedDataParallel against one process training on the concatenated batches, computed
on every rank with a local copy of the model; no_sync; unused switch branches; rank-0
checkpoints; flush(reduce="mean"). argv[1]: a folder shared by the ranks."""
import sys

import numpy as np

import flowgrad as fg
import flowgrad.distributed as dist
import flowgrad.nn.functional as F
from flowgrad.nn.parallel import DistributedDataParallel as DDP
import job_util
from job_util import close, params

dist.init("mpi")
rank, size = dist.rank(), dist.world_size()
B, STEPS = 5, 3


class MLP(fg.nn.Module):  # a Python-subclassed module
    def __init__(self):
        super().__init__()
        self.fc1 = fg.nn.Linear(7, 16)
        self.fc2 = fg.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).tanh())


def graph():
    return (fg.FlowBuilder(fg.nn.Linear(7, 8)).split(fg.nn.Linear(8, 8), fg.nn.Sequential(fg.nn.Linear(8, 8), fg.nn.ReLU()))
            .merge(fg.flow.Add()).also(fg.nn.Linear(8, 8)).through(fg.nn.Linear(8, 3)).build())


def batches(step):
    return job_util.batches(step, size * B)


def train_equivalence(make, what, bucket_mb):
    fg.manual_seed(0)
    reference = make()  # rank 0's initial weights: what DDP broadcasts
    fg.manual_seed(rank)  # every rank starts elsewhere; rank 0 where the reference does
    model = make()
    ddp = DDP(model, bucket_mb=bucket_mb)
    close(params(model), params(reference), f"{what}: broadcast at wrap time")
    opt, ref_opt = fg.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9), fg.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        x, y = batches(step)
        mine = slice(rank * B, (rank + 1) * B)
        opt.zero_grad()
        F.mse_loss(ddp(fg.tensor(x[mine])), fg.tensor(y[mine])).backward()
        opt.step()
        ref_opt.zero_grad()
        F.mse_loss(reference(fg.tensor(x)), fg.tensor(y)).backward()
        ref_opt.step()
    close(params(model), params(reference), what)
    return ddp


ddp = train_equivalence(MLP, "MLP", bucket_mb=25)
tiny = train_equivalence(MLP, "MLP, one bucket per parameter", bucket_mb=1e-6)
assert len(tiny._reducer.bucket_indices) == 4 and tiny._reducer.bucket_indices[0] == [3], tiny._reducer.bucket_indices
assert len(ddp._reducer.bucket_indices) == 1
train_equivalence(graph, "FlowBuilder graph", bucket_mb=1e-4)

# no_sync: two local backward passes, averaged once by the second
fg.manual_seed(0)
reference = MLP()
ddp = DDP(MLP(), bucket_mb=1e-4)
ddp.module.load_state_dict(reference.state_dict())
for k in range(2):
    x, y = batches(10 + k)
    mine = slice(rank * B, (rank + 1) * B)
    F.mse_loss(reference(fg.tensor(x)), fg.tensor(y)).backward()
    if k == 0:
        with ddp.no_sync():
            F.mse_loss(ddp(fg.tensor(x[mine])), fg.tensor(y[mine])).backward()
        local = {n: p.grad.numpy().copy() for n, p in ddp.module.named_parameters()}
        everyone = {n: fg.zeros(size, *g.shape) for n, g in local.items()}
        for n, g in local.items():
            dist.all_gather(everyone[n], fg.tensor(g[None]))
        assert any(not np.allclose(everyone[n].numpy()[0], everyone[n].numpy()[-1]) for n in local), "no_sync averaged"
    else:
        F.mse_loss(ddp(fg.tensor(x[mine])), fg.tensor(y[mine])).backward()
close({n: p.grad.numpy() for n, p in ddp.module.named_parameters()},
      {n: p.grad.numpy() for n, p in reference.named_parameters()}, "no_sync accumulation")

# a switch whose branch differs per rank: the untaken branch's parameters average in zeros
fg.manual_seed(0)
switch = fg.FlowBuilder(fg.nn.Linear(7, 8)).switch(fg.flow.FixedSelector(rank % 2), fg.nn.Linear(8, 8), fg.nn.Linear(8, 8)).through(fg.nn.Linear(8, 3)).build()
ddp = DDP(switch, bucket_mb=1e-4, find_unused_parameters=True)
x, y = batches(20)
mine = slice(rank * B, (rank + 1) * B)
with ddp.no_sync():  # local gradients first
    F.mse_loss(ddp(fg.tensor(x[mine])), fg.tensor(y[mine])).backward()
local = {n: (p.grad.numpy().copy() if p.grad is not None else np.zeros(p.shape, np.float32)) for n, p in switch.named_parameters()}
for p in switch.parameters():
    p.grad = None
everyone = {}
for n, g in local.items():
    everyone[n] = fg.zeros(size, *g.shape)
    dist.all_gather(everyone[n], fg.tensor(g[None]))
for _ in range(2):  # twice: the second forward must not find the first reduction unfinished
    for p in switch.parameters():
        p.grad = None
    F.mse_loss(ddp(fg.tensor(x[mine])), fg.tensor(y[mine])).backward()
close({n: p.grad.numpy() for n, p in switch.named_parameters()},
      {n: everyone[n].numpy().mean(0) for n in local}, "switch with unused branch")

# checkpoints: rank 0 writes, every rank reads
folder = sys.argv[1]
fg.manual_seed(5 + rank)
model = MLP()
ddp = DDP(model)
opt = fg.optim.Adam(model.parameters(), lr=0.01)
x, y = batches(30)
F.mse_loss(ddp(fg.tensor(x[rank * B:(rank + 1) * B])), fg.tensor(y[rank * B:(rank + 1) * B])).backward()
opt.step()
fg.save_checkpoint(f"{folder}/ckpt.safetensors", model, opt, step=7, metadata={"writer": str(rank)})
fg.manual_seed(99)
restored = MLP()
meta = fg.load_checkpoint(f"{folder}/ckpt.safetensors", restored, fg.optim.Adam(restored.parameters(), lr=0.01))
assert meta["writer"] == "0" and meta["step"] == 7, meta
close(params(restored), params(model), "checkpoint resume")

# observation averaged over ranks
g = graph()
g.record("loss", float(rank), float(rank) + 1)
flushed = g.flush(reduce="mean")
want = np.mean([r + 0.5 for r in range(size)])
assert abs(flushed["loss"] - want) < 1e-9 and abs(g.trend("loss").latest() - want) < 1e-9, (flushed, want)
print(f"rank {rank}/{size} ddp ok")
