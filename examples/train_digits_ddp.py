"""Train the digits classifier data-parallel: every process takes its shard of each epoch,
gradients are averaged during backward, the logged losses are averaged over processes, and
rank 0 writes the checkpoint.

    python -m flowgrad.distributed.run --nproc 2 examples/train_digits_ddp.py [--epochs 20] [--compile]
"""
import argparse
import pathlib

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import flowgrad as fg
import flowgrad.distributed as dist
import flowgrad.nn.functional as F
from flowgrad import nn
from flowgrad.nn.parallel import DistributedDataParallel


def build_model():
    return (fg.flow(nn.Linear(64, 256)).through(nn.ReLU())
            .also(nn.Sequential(nn.LayerNorm(256), nn.Linear(256, 256), nn.ReLU()))
            .through(nn.Linear(256, 10)).tag("logits")
            .build())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--out-dir", default=".")
    parser.add_argument("--compile", action="store_true",
                        help="compile the whole step (fg.compile), the gradient all-reduce included")
    args = parser.parse_args()

    dist.init("mpi")
    rank, size = dist.rank(), dist.world_size()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.25, random_state=0,
                                                        stratify=digits.target)
    fg.manual_seed(rank)  # the wrapper broadcasts rank 0's initial weights
    model = build_model()
    ddp = DistributedDataParallel(model)
    optimizer = fg.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    sampler = fg.data.DistributedSampler(len(x_train), seed=0)
    loader = fg.data.DataLoader(x_train, y_train, batch_size=args.batch_size, sampler=sampler)
    if rank == 0:
        print(f"{size} processes, {len(loader)} steps of {args.batch_size} images each per epoch")
    # dynamic: the epoch's last batch is smaller (the same size on every rank: the shards are equal)
    step = fg.compile(ddp, F.cross_entropy, optimizer, example_inputs=next(iter(loader)), dynamic=True) \
        if args.compile else None
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if step is not None:
                loss = step(xb, yb)
            else:
                optimizer.zero_grad()
                loss = F.cross_entropy(ddp(xb), yb)
                loss.backward()  # gradients averaged over the processes during backward
                optimizer.step()
            model.record("loss", loss)
        mean = model.flush(reduce="mean")  # the same history on every rank
        if rank == 0:
            print(f"epoch {epoch}/{args.epochs}  loss {mean['loss']:.4f}")

    with fg.no_grad():
        model.eval()
        accuracy = (fg.argmax(model(fg.tensor(x_test)), dim=1) == fg.tensor(y_test)).float().mean().item()
    out = pathlib.Path(args.out_dir) / "digits_ddp.safetensors"
    fg.save_checkpoint(out, model, optimizer, graph=model, step=args.epochs)  # rank 0 writes
    if rank == 0:
        print(f"test accuracy: {accuracy:.4f}; wrote {out}")


if __name__ == "__main__":
    main()
