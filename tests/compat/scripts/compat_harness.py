"""What the corpus scripts share, identical under either framework: data from NumPy's generator,
the initial weights handed from the PyTorch run to the flowgrad run (COMPAT_SAVE / COMPAT_LOAD,
an .npz of the state_dict), and the report (one JSON line) the test reads."""
import json
import os

import numpy as np


def data(*shape, seed=0, kind="normal", high=None):
    """float32 samples (kind 'normal' or 'uniform') or int64 ones in [0, high) (kind 'int')."""
    rng = np.random.default_rng(seed)
    if kind == "int":
        return rng.integers(0, high, size=shape).astype(np.int64)
    values = rng.standard_normal(shape) if kind == "normal" else rng.random(shape)
    return values.astype(np.float32)


def same_start(torch, model):
    """Saves the model's initial weights (COMPAT_SAVE) or loads those of the other run (COMPAT_LOAD).
    A tied weight PyTorch lists under two names needs only one of them here; every name of this
    model must be found in the file."""
    state = model.state_dict()
    if os.environ.get("COMPAT_SAVE"):
        np.savez(os.environ["COMPAT_SAVE"], **{k: v.detach().cpu().numpy() for k, v in state.items()})
    if os.environ.get("COMPAT_LOAD"):
        saved = np.load(os.environ["COMPAT_LOAD"])
        missing = sorted(set(state) - set(saved.files))
        if missing:
            raise KeyError(f"initial weights lack {missing}")
        model.load_state_dict({k: torch.tensor(saved[k]) for k in state})
    return model


def report(first_loss, losses):
    """first_loss: a deterministic loss from the initial weights (compared across frameworks);
    losses: the training losses (the test checks that they fall)."""
    print("COMPAT " + json.dumps({"first_loss": float(first_loss), "losses": [float(v) for v in losses]}))
