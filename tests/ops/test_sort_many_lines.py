"""sort/topk over many lines (issue 18, F4): on CUDA the lines are sorted by two stable radix
passes without a host synchronisation, so the results must match NumPy's stable sort exactly
(ties in input order, NaN largest, -0.0 equal to +0.0, descending as the reverse key order with
ties still in input order) and a compiled step that calls topk must be captured."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def awkward(rng, shape, dtype):
    """Values with ties, both zeros and (for floats) NaN and infinities."""
    a = rng.integers(-20, 20, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        flat = a.reshape(-1)
        picks = rng.choice(flat.size, size=4 * (flat.size // 50 + 1), replace=False)
        flat[picks[0::4]] = np.nan
        flat[picks[1::4]] = -0.0
        flat[picks[2::4]] = np.inf
        flat[picks[3::4]] = -np.inf
    return a


def stable_order(a, axis, descending):
    """NumPy's stable order with the library's rules: NaN largest, -0.0 == +0.0, and descending
    as an ascending sort of reversed keys (ties keep their input order)."""
    key = np.where(a == 0, 0, a) if np.issubdtype(a.dtype, np.floating) else a
    if descending:  # the reversed order of the distinct values, ties stable
        dense = np.unique(key, equal_nan=True, return_inverse=True)[1].reshape(key.shape)
        return np.argsort(-dense, axis=axis, kind="stable")
    return np.argsort(key, axis=axis, kind="stable")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("descending", [False, True])
def test_topk_over_512_lines_matches_numpy(device, dtype, descending):
    rng = np.random.default_rng(5)
    a = awkward(rng, (512, 1000), dtype)
    t = fg.tensor(a).to(device)
    values, indices = fg.topk(t, 7, dim=-1, largest=descending)
    order = stable_order(a, -1, descending)[:, :7]
    np.testing.assert_array_equal(indices.cpu().numpy(), order)
    np.testing.assert_array_equal(values.cpu().numpy(), np.take_along_axis(a, order, -1))


@pytest.mark.parametrize("shape,dim", [((3, 700, 130), 1), ((1, 100_003), 1), ((4000, 3), 1), ((5, 1), 0)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_along_any_dim_matches_numpy(device, shape, dim, descending):
    """Inner dims (lines that are not contiguous), one long line, many short ones, size 1."""
    rng = np.random.default_rng(6)
    a = awkward(rng, shape, np.float32)
    values, indices = fg.sort(fg.tensor(a).to(device), dim=dim, descending=descending)
    order = stable_order(a, dim, descending)
    np.testing.assert_array_equal(indices.cpu().numpy(), order)
    np.testing.assert_array_equal(values.cpu().numpy(), np.take_along_axis(a, order, dim))


def test_compiled_step_with_topk_over_512_rows_is_captured(device):
    if device == "cpu":
        pytest.skip("CUDA graph capture exists only on CUDA")
    fg.manual_seed(0)
    model = nn.Linear(20, 1000).to(device)
    opt = fg.optim.SGD(model.parameters(), lr=0.1)

    def loss_fn(out, y):  # topk over 512 lines: past the ~300 lines where DeviceSegmentedSort synced
        return F.cross_entropy(out, y) - 0.01 * fg.topk(out, 5, dim=-1)[0].mean()

    rng = np.random.default_rng(2)
    xs = [fg.tensor(rng.standard_normal((512, 20)).astype(np.float32), device=device) for _ in range(4)]
    ys = [fg.tensor(rng.integers(0, 1000, 512), device=device) for _ in range(4)]
    step = fg.compile(model, loss_fn, opt, example_inputs=(xs[0], ys[0]))
    eager = nn.Linear(20, 1000).to(device)
    eager.load_state_dict(model.state_dict())
    eager_opt = fg.optim.SGD(eager.parameters(), lr=0.1)
    for x, y in zip(xs, ys):
        got = step(x, y).item()
        eager_opt.zero_grad()
        want = loss_fn(eager(x), y)
        want.backward()
        eager_opt.step()
        np.testing.assert_allclose(got, want.item(), rtol=1e-5)
    assert step.stats["cuda_graph"].startswith("captured: one CUDA graph of"), step.stats["cuda_graph"]
    assert step.stats["cuda_graph_replays"] == 3
