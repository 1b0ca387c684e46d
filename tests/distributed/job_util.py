"""Shared by the DDP job scripts (run under mpirun from this folder): the data every rank draws
and the parameter comparison."""
import numpy as np


def batches(step, rows):
    """The same (rows, 7) inputs and (rows, 3) targets on every rank for a step."""
    g = np.random.default_rng(step)
    return g.standard_normal((rows, 7)).astype(np.float32), g.standard_normal((rows, 3)).astype(np.float32)


def params(m):
    return {n: p.detach().numpy().copy() for n, p in m.named_parameters()}


def close(a, b, what):
    for name in b:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-5, err_msg=f"{what}: {name}")
