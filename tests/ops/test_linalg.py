"""matmul: NumPy semantics for 1-D, 2-D and batched operands with broadcasting."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous, on

CASES = [((45, 65), (65, 33)), ((7,), (7,)), ((7,), (7, 3)), ((4, 7), (7,)), ((2, 3, 4), (4, 5)),
         ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)), ((0, 3), (3, 4)), ((3, 0), (0, 4)), ((1, 1), (1, 1))]


@pytest.mark.parametrize("sa,sb", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_forward(rng, sa, sb, dtype, device):
    a, b = make(rng, sa, dtype), make(rng, sb, dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    out = on(device, fg.tensor(a)) @ on(device, fg.tensor(b))
    assert out.device == device
    fg.testing.assert_close(out, np.matmul(a, b), rtol=tol, atol=tol)


def test_matmul_transposed_operands_on_device(rng, device):
    a, b = make(rng, (33, 17)), make(rng, (17, 29))
    fg.testing.assert_close(on(device, non_contiguous(a)) @ on(device, non_contiguous(b)), a @ b, rtol=1e-12, atol=1e-12)
    fg.testing.assert_close(on(device, fg.tensor(a)) @ on(device, non_contiguous(b)), a @ b, rtol=1e-12, atol=1e-12)


def test_tf32_flag_round_trips():
    assert fg.cuda.allow_tf32() is False  # full float32 precision unless asked
    fg.cuda.set_allow_tf32(True)
    assert fg.cuda.allow_tf32() is True
    fg.cuda.set_allow_tf32(False)


def test_matmul_transposed_and_strided_operands(rng):
    a, b = make(rng, (33, 17)), make(rng, (17, 29))
    fg.testing.assert_close(non_contiguous(a) @ non_contiguous(b), a @ b, rtol=1e-12, atol=1e-12)
    big = fg.tensor(make(rng, (10, 40)), dtype=fg.float64)
    sliced = big[:, ::2]  # column stride 2: neither layout BLAS reads, so it is copied
    fg.testing.assert_close(sliced @ big[:, :20].t(), sliced.numpy() @ big.numpy()[:, :20].T, rtol=1e-12, atol=1e-12)
    expanded = fg.tensor(make(rng, (1, 4, 5)), dtype=fg.float64).expand(3, 4, 5)
    fg.testing.assert_close(expanded @ fg.ones(5, 2, dtype=fg.float64), np.matmul(expanded.numpy(), np.ones((5, 2))))


def test_matmul_integers_use_the_blocked_kernel(rng):
    a = make(rng, (45, 65), np.int64, -5, 5)
    b = make(rng, (65, 33), np.int64, -5, 5)
    out = fg.tensor(a) @ fg.tensor(b)
    assert out.dtype == fg.int64
    np.testing.assert_array_equal(out.numpy(), a @ b)
    a32 = a.astype(np.int32)
    np.testing.assert_array_equal((fg.tensor(a32) @ fg.tensor(a32.T)).numpy(), a32 @ a32.T)


def test_matmul_mixed_dtypes_promote(rng):
    a, b = make(rng, (3, 4), np.float32), make(rng, (4, 2), np.float64)
    out = fg.tensor(a) @ fg.tensor(b)
    assert out.dtype == fg.float64
    fg.testing.assert_close(out, a.astype(np.float64) @ b)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 2)), ((2, 3, 4), (4,)), ((2, 1, 3, 4), (3, 4, 2)), ((5,), (5,)),
                                   ((2, 3, 4), (4, 5))])
def test_matmul_gradcheck(rng, sa, sb):
    gradcheck(fg.matmul, make(rng, sa), make(rng, sb))


def test_matmul_errors():
    with pytest.raises(fg.ShapeError, match=r"matmul: \(2, 3\) @ \(4, 5\): inner dimensions 3 and 4 differ"):
        fg.ones(2, 3) @ fg.ones(4, 5)
    with pytest.raises(fg.ShapeError, match=r"matmul: \(2, 3, 4\) @ \(5, 6\): inner dimensions 4 and 5 differ"):
        fg.ones(2, 3, 4) @ fg.ones(5, 6)  # the flattened (batch*M, K) path keeps the original shapes in the message
    with pytest.raises(fg.ShapeError, match="operands must have at least one dim"):
        fg.matmul(fg.tensor(2.0), fg.ones(2))
    with pytest.raises(fg.DTypeError, match="matmul: not defined for bool"):
        fg.tensor([[True]]) @ fg.tensor([[True]])
    with pytest.raises(fg.ShapeError, match="cannot be broadcast"):
        fg.ones(2, 3, 4) @ fg.ones(3, 4, 5)
