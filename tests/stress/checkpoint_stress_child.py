"""Child processes for test_checkpoint_stress.py (run as scripts, never imported by pytest).

  load DIR         loads every file in DIR as a checkpoint, printing one line per file:
                   "<name>\\tCheckpointError", "<name>\\tloaded" or "<name>\\t<other exception>";
                   a crash ends the output early, and the test names the file it stopped at.
  save DIR         waits for a line on stdin, then saves DIR/ckpt.safetensors in a loop, the
                   model's weights all equal to the step; prints each step once its save is done.
"""
import os
import sys

import numpy as np

import flowgrad as fg


def model(width):
    return fg.nn.Linear(width, width // 2)


def objects():
    """The objects test_checkpoint_stress.py's valid checkpoint was saved from (fresh ones)."""
    m = model(8)
    opt = fg.optim.Adam(m.parameters(), lr=0.01)
    sched = fg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, warmup=2)
    loader = fg.data.DataLoader(np.zeros((12, 3), np.float32), batch_size=5, shuffle=True)
    return m, opt, sched, loader


def load_all(folder):
    m, opt, sched, loader = objects()
    before = [p.numpy().copy() for p in m.parameters()]
    for name in sorted(os.listdir(folder)):
        print(name, end="\t", flush=True)
        try:
            fg.load_checkpoint(os.path.join(folder, name), m, opt, scheduler=sched, loader=loader)
            print("loaded", flush=True)
            before = [p.numpy().copy() for p in m.parameters()]
        except fg.CheckpointError:
            unchanged = all(np.array_equal(a, p.numpy()) for a, p in zip(before, m.parameters()))
            print("CheckpointError" if unchanged else "CheckpointError-but-model-changed", flush=True)
        except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
            print(type(e).__name__, str(e)[:200].replace("\n", " "), flush=True)


def save_loop(folder):
    m = model(1024)  # 2 MB of weights: a save takes long enough to be killed inside it
    path = os.path.join(folder, "ckpt.safetensors")
    if not sys.stdin.readline():  # the test ended without starting this child
        return
    step = 0
    while True:
        step += 1
        m.load_state_dict({"weight": fg.full((512, 1024), float(step)), "bias": fg.full((512,), float(step))})
        fg.save_checkpoint(path, m, step=step)
        print(step, flush=True)


if __name__ == "__main__":
    {"load": load_all, "save": save_loop}[sys.argv[1]](sys.argv[2])
