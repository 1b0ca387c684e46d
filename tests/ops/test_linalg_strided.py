"""matmul on the views a transformer feeds it: the qkv split (rows 3 * C apart), head permutes
(batch strides that are no single stride), transposed operands and broadcast batches, which BLAS
reads through leading dimensions and transposes; values against NumPy, gradients by float64 finite
differences, size-0 and size-1 dims."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, on


def qkv_views(t, heads):
    """(B, T, 3 * C) -> three (B, H, T, C / H) head views of the split, no copies."""
    b, n, width = t.shape
    return [p.reshape(b, n, heads, -1).transpose(1, 2) for p in t.chunk(3, -1)]


def numpy_views(a, heads):
    b, n, width = a.shape
    return [np.swapaxes(p.reshape(b, n, heads, -1), 1, 2) for p in np.split(a, 3, -1)]


@pytest.mark.parametrize("T", [1, 7, 64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scores_and_values_of_head_views(rng, device, T, dtype):
    a = make(rng, (2, T, 3 * 4 * 8), dtype)
    q, k, v = qkv_views(on(device, fg.tensor(a)), 4)
    nq, nk, nv = numpy_views(a, 4)
    assert not q.is_contiguous() and not k.transpose(-1, -2).is_contiguous()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    scores = q @ k.transpose(-1, -2)
    fg.testing.assert_close(scores, nq @ np.swapaxes(nk, -1, -2), rtol=tol, atol=tol)
    fg.testing.assert_close(scores @ v, (nq @ np.swapaxes(nk, -1, -2)) @ nv, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("sa,sb", [((5, 9), (9, 4)), ((2, 3, 1, 9), (3, 9, 4)), ((1, 9), (2, 9, 1)), ((0, 9), (9, 4)),
                                   ((2, 5, 0), (0, 3))])
def test_sliced_rows_and_columns(rng, device, sa, sb):
    """Operands cut out of wider ones (every row `width` apart) and transposed ones, with broadcast
    batch dims."""
    a = make(rng, sa[:-1] + (3 * sa[-1],))
    b = make(rng, sb[:-2] + (sb[-1], sb[-2] + 2))  # stored transposed, with 2 spare columns
    ta = on(device, fg.tensor(a))[..., sa[-1]:2 * sa[-1]]
    tb = on(device, fg.tensor(b))[..., 1:sb[-2] + 1].transpose(-1, -2)
    na, nb = a[..., sa[-1]:2 * sa[-1]], np.swapaxes(b[..., 1:sb[-2] + 1], -1, -2)
    fg.testing.assert_close(ta @ tb, np.matmul(na, nb), rtol=1e-12, atol=1e-12)


def test_batch_strides_of_a_permute(rng, device):
    """(B, T, H, D) permuted to (H, B, T, D): consecutive matrices are no single stride apart."""
    a, b = make(rng, (3, 5, 2, 4)), make(rng, (2, 3, 4, 6))
    ta = on(device, fg.tensor(a)).permute(2, 0, 1, 3)
    out = ta @ on(device, fg.tensor(b))
    fg.testing.assert_close(out, np.transpose(a, (2, 0, 1, 3)) @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("T", [1, 4])
def test_gradcheck_through_head_views(rng, T):
    def scores_times_values(x):
        q, k, v = qkv_views(x, 2)
        return (q @ k.transpose(-1, -2)) @ v

    gradcheck(scores_times_values, make(rng, (2, T, 3 * 2 * 3)))


def test_gradcheck_sliced_and_transposed(rng):
    def fn(a, b):
        return a[..., 1:4] @ b.transpose(-1, -2)

    gradcheck(fn, make(rng, (2, 3, 5)), make(rng, (2, 2, 3)))


def test_gradient_of_a_broadcast_batch_of_views(rng):
    """A (3, K) @ (B, K, N) weight-times-batch product: a's gradient sums over the batch."""
    a = fg.tensor(make(rng, (3, 12)), dtype=fg.float64, requires_grad=True)
    b = fg.tensor(make(rng, (2, 5, 4)), dtype=fg.float64, requires_grad=True)
    out = a[:, ::3] @ b.transpose(-1, -2)
    out.backward(fg.ones_like(out))
    expected_a = np.zeros((3, 12))
    expected_a[:, ::3] = np.ones((3, 5)) @ b.numpy().sum(0)  # summed over the batch
    np.testing.assert_allclose(a.grad.numpy(), expected_a, rtol=1e-12, atol=1e-12)
    expected_b = np.broadcast_to(np.ones((5, 3)) @ a.numpy()[:, ::3], (2, 5, 4))
    np.testing.assert_allclose(b.grad.numpy(), expected_b, rtol=1e-12, atol=1e-12)
