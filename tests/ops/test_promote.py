"""Promote (ops/decompose.h): a mixed-dtype call runs as cast ops on the inputs that need its
compute dtype, then the op, so kernels convert nothing, the op log and the compile trace see the
casts, and each cast input's gradient comes back in its own dtype. Half matmul/linear/attention
on the CPU (whose GEMMs multiply float32) are widened the same way (kHalfWidenedOnCpu)."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from conftest import gradcheck

OpLog = fg._core.plan.OpLog


def logged(fn, *args):
    with OpLog() as log:
        out = fn(*args)
    return out, log.ops


def test_an_int_tensor_added_to_a_float_one_is_cast_first():
    i = fg.tensor(np.arange(6, dtype=np.int16).reshape(2, 3))  # int16 + float32 -> float32 (NumPy's rule)
    x = fg.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    out, ops = logged(lambda: i + x)
    assert ops == ["cast", "add"] and out.dtype == fg.float32
    np.testing.assert_array_equal(out.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3) + x.numpy())
    _, ops = logged(lambda: x + x)
    assert ops == ["add"]  # all inputs of the compute dtype: no cast


def test_a_comparison_casts_to_the_promoted_dtype_not_to_bool():
    i = fg.tensor(np.array([0, 1, 2], np.int16))
    x = fg.tensor(np.array([0.5, 1.0, 1.5], np.float32))
    out, ops = logged(fg.eq, i, x)
    assert ops == ["cast", "eq"] and out.dtype == fg.bool
    assert out.tolist() == [False, True, False]


def test_a_float_only_function_of_an_int_tensor_is_cast_first():
    out, ops = logged(fg.exp, fg.tensor(np.array([0, 1, 2])))
    assert ops == ["cast", "exp"] and out.dtype == fg.float32
    np.testing.assert_allclose(out.numpy(), np.exp([0.0, 1.0, 2.0]), rtol=1e-6)


def test_an_int_tensor_added_to_a_half_one_widens_then_promotes():
    i = fg.tensor(np.arange(4, dtype=np.uint8))  # uint8 + half -> half
    h = fg.tensor(np.array([0.5, 1.5, -2.0, 3.25], np.float32)).to(fg.bfloat16)
    out, ops = logged(lambda: i + h)
    assert ops == ["cast", "cast", "add", "cast"] and out.dtype == fg.bfloat16
    np.testing.assert_array_equal(out.float().numpy(), np.arange(4) + np.array([0.5, 1.5, -2.0, 3.25]))


def test_an_in_place_op_casts_its_source_never_its_target():
    t = fg.zeros(3)
    _, ops = logged(lambda: t.add_(fg.tensor(np.array([1, 2, 3], np.int16))))
    assert ops[-2:] == ["cast", "add_"] and t.dtype == fg.float32 and t.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("dtype", [fg.bfloat16, fg.float16])
def test_half_matmul_and_linear_on_the_cpu_are_widened_into_ops(dtype):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
    ha, hb = fg.tensor(a).to(dtype), fg.tensor(b).to(dtype)
    out, ops = logged(fg.matmul, ha, hb)
    assert ops == ["cast", "cast", "matmul", "cast"] and out.dtype == dtype
    want = ha.float().numpy() @ hb.float().numpy()  # exact products of the halves, float32 sums
    np.testing.assert_array_equal(out.float().numpy(), fg.tensor(want).to(dtype).float().numpy())
    w, bias = fg.tensor(b.T.copy()).to(dtype), fg.zeros(3).to(dtype)
    out, ops = logged(F.linear, ha, w, bias)
    assert ops == ["cast", "cast", "cast", "linear", "cast"] and out.dtype == dtype


def test_float64_gradients_through_the_casts_of_mixed_dtype_ops():
    idx = fg.tensor(np.array([[1, 0, 2]]))
    gradcheck(lambda x: (x * idx + idx).sum(), np.linspace(-1, 1, 6).reshape(2, 3))
    gradcheck(lambda x: fg.where(x > 0, x, idx) * 2.0, np.linspace(-1, 1, 6).reshape(2, 3))
    src32 = fg.tensor(np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3))
    gradcheck(lambda x: fg.scatter_add(x, 0, fg.tensor(np.array([[1, 0, 1], [0, 1, 0]])), src32),
              np.linspace(-1, 1, 6).reshape(2, 3))
    w32 = fg.tensor(np.array([0.5, 2.0, -1.0], np.float32))
    gradcheck(lambda x: F.layer_norm(x, (3,), w32, None), np.array([[0.1, -0.7, 1.3], [2.0, 0.5, -0.2]]))


def test_a_cast_input_gets_its_gradient_in_its_own_dtype():
    x64 = fg.tensor(np.array([[0.1, -0.7, 1.3], [2.0, 0.5, -0.2]]), requires_grad=True)
    w32 = fg.tensor(np.array([0.5, 2.0, -1.0], np.float32), requires_grad=True)
    b32 = fg.tensor(np.array([0.0, 1.0, 0.5], np.float32), requires_grad=True)
    y, ops = logged(lambda: F.layer_norm(x64, (3,), w32, b32))
    assert ops == ["cast", "cast", "layer_norm"] and y.dtype == fg.float64
    (y * fg.tensor(np.array([1.0, -2.0, 3.0]))).sum().backward()
    assert w32.grad.dtype == fg.float32 and b32.grad.dtype == fg.float32 and x64.grad.dtype == fg.float64
    x = x64.numpy()
    xhat = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(w32.grad.numpy(), (xhat * [1.0, -2.0, 3.0]).sum(0), rtol=1e-6)
    np.testing.assert_allclose(b32.grad.numpy(), [2.0, -4.0, 6.0], rtol=1e-6)


def test_scatter_and_index_add_take_a_source_of_another_dtype():
    x = fg.zeros(2, 3, dtype=fg.float64)
    src = fg.tensor(np.array([[1.5, 2.5, 3.5]], np.float32))
    index = fg.tensor(np.array([[1, 0, 1]]))
    out, ops = logged(fg.scatter_add, x, 0, index, src)
    assert ops == ["cast", "scatter_add"] and out.dtype == fg.float64
    np.testing.assert_array_equal(out.numpy(), [[0, 2.5, 0], [1.5, 0, 3.5]])
    out, ops = logged(fg.index_add, x, 1, fg.tensor(np.array([2])), fg.tensor(np.array([[7], [8]], np.float32)))
    assert ops == ["cast", "index_add"]
    np.testing.assert_array_equal(out.numpy(), [[0, 0, 7], [0, 0, 8]])


def test_a_float64_additive_mask_is_cast_to_the_scores_dtype():
    rng = np.random.default_rng(1)
    q, k, v = (fg.tensor(rng.standard_normal((2, 4, 8)).astype(np.float32)) for _ in range(3))
    mask = fg.tensor(np.triu(np.full((4, 4), -1e9), 1))  # float64
    out, ops = logged(F.scaled_dot_product_attention, q, k, v, mask)
    assert "cast" in ops and out.dtype == fg.float32
    want = F.scaled_dot_product_attention(q, k, v, mask.float())
    np.testing.assert_array_equal(out.numpy(), want.numpy())


def test_a_compiled_plan_holds_the_casts_and_equals_eager():
    i = fg.tensor(np.arange(12, dtype=np.int16).reshape(3, 4))
    x = fg.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    plan = fg.compile(lambda a, b: (a + b) * b, example_inputs=(i, x))
    assert [r["op"] for r in plan.ir()] == ["cast", "add", "mul"]
    np.testing.assert_array_equal(plan(i, x).numpy(), ((i + x) * x).numpy())
