"""The max_pool2d op (CPU, float32/float64; the first maximum's index kept) and its gradient op
max_pool2d_backward: against NumPy at odd shapes and overlapping windows, PyTorch's tie rule (the
gradient goes to the first maximum), NaN, float64 finite differences (first order, and second
order through max_pool2d_backward's gather), non-contiguous input, compiled == eager."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous

F = fg.nn.functional


def np_max_pool(x, k, stride):
    oh, ow = (x.shape[2] - k) // stride + 1, (x.shape[3] - k) // stride + 1
    out = np.empty(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = x[:, :, i * stride:i * stride + k, j * stride:j * stride + k].max(axis=(2, 3))
    return out


@pytest.mark.parametrize("shape,k,stride", [((2, 3, 6, 7), 2, 2), ((1, 1, 5, 7), 3, 1), ((3, 2, 9, 8), 3, 2),
                                            ((2, 4, 4, 4), 4, 4), ((1, 2, 7, 5), 2, 3)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool2d_op_matches_numpy(rng, shape, k, stride, dtype):
    x = make(rng, shape).astype(dtype)
    fg.testing.assert_close(F.max_pool2d(fg.tensor(x), k, stride), np_max_pool(x, k, stride), rtol=0, atol=0)
    fg.testing.assert_close(F.max_pool2d(non_contiguous(x), k, stride), np_max_pool(x, k, stride), rtol=0, atol=0)
    gradcheck(lambda v: F.max_pool2d(v, k, stride) * fg.arange(1.0, 1.0 + np.prod(np_max_pool(x, k, stride).shape),
                                                                dtype=fg.float64).reshape(
                                                                    np_max_pool(x, k, stride).shape), x)


def test_max_pool2d_gradient_goes_to_the_first_maximum_and_overlaps_add():
    x = fg.tensor([[[[1.0, 3.0, 3.0], [3.0, 0.0, 2.0], [1.0, 3.0, 1.0]]]], requires_grad=True)
    F.max_pool2d(x, 2, 1).sum().backward()
    # windows: (0,0) first max at (0,1); (0,1) at (0,1); (1,0) at (1,0); (1,1) at (2,1)
    assert x.grad.numpy()[0, 0].tolist() == [[0, 2, 0], [1, 0, 0], [0, 1, 0]]


def test_max_pool2d_propagates_nan():
    x = fg.tensor([[[[1.0, float("nan")], [3.0, 2.0]]]])
    assert np.isnan(F.max_pool2d(x, 2).item())


def test_max_pool2d_backward_second_order(rng):
    # max_pool2d_backward is linear in the gradient; its own gradient gathers at the indices
    x = fg.tensor(make(rng, (2, 2, 5, 4)))
    proj = fg.tensor(make(rng, (2, 2, 5, 4)))

    def through_backward(v):
        xr = x.detach().requires_grad_()
        with fg.enable_grad():
            (gx,) = fg.autograd.grad((F.max_pool2d(xr, 2, 1) * v).sum(), [xr], create_graph=True)
        return gx * proj
    gradcheck(through_backward, make(rng, (2, 2, 4, 3)))


def test_max_pool2d_runs_as_one_op_in_a_compiled_step(rng):
    x = fg.tensor(make(rng, (2, 3, 6, 6)).astype(np.float32), requires_grad=True)
    step = fg.compile(lambda v: F.max_pool2d(v, 2).pow(2).sum(), example_inputs=(x,))
    ops = [r["op"] for r in step.explain().rows]
    assert "max_pool2d" in ops and "im2col" not in ops, ops
    assert step(x).item() == F.max_pool2d(x, 2).pow(2).sum().item()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_two_by_two_windows_keep_the_first_maximum_and_the_first_nan(dtype):
    """2x2 windows at stride 2 run branch-free over whole vectors (kernels/nn/nn_cpu.cpp:
    pool_row_2x2), then the last windows one by one: every window over {0, 1, NaN} (81, side by
    side, so both parts run at every level), its value and the element its gradient reaches
    against the rule written out here."""
    values = (0.0, 1.0, np.nan)
    windows = [(a, b, c, d) for a in values for b in values for c in values for d in values]
    x = np.empty((1, 1, 2, 2 * len(windows)), dtype)
    for i, (a, b, c, d) in enumerate(windows):
        x[0, 0, :, 2 * i:2 * i + 2] = [[a, b], [c, d]]
    xt = fg.tensor(x, requires_grad=True)
    y = F.max_pool2d(xt, 2)
    y.sum().backward()
    got, grad = y.numpy()[0, 0, 0], xt.grad.numpy()[0, 0]
    for i, window in enumerate(windows):
        best, at = window[0], 0
        for k in range(1, 4):  # the first larger value, or the first NaN, which then stays
            if not window[k] <= best and best == best:
                best, at = window[k], k
        assert (np.isnan(got[i]) and np.isnan(best)) or got[i] == best, (window, got[i])
        want = np.zeros((2, 2))
        want[at // 2, at % 2] = 1
        np.testing.assert_array_equal(grad[:, 2 * i:2 * i + 2], want, err_msg=str(window))
