"""Elementwise ops: forward vs NumPy (tests/ops/reference.py) on awkward layouts, float64 gradchecks,
promotion, errors."""
import math

import numpy as np
import pytest

import flowgrad as fg
from conftest import ODD_SHAPES, gradcheck, make, non_contiguous, on
import reference
from reference import ALL, BINARY, BITWISE, COMPARE, GRADIENT, OTHER, UNARY

def test_every_elementwise_row_of_the_op_table_has_a_reference():
    rows = {op["name"] for op in fg._core._op_registry() if op["fusable"]}
    assert sorted(rows - set(ALL)) == [], "rows of ops.def without a reference in tests/ops/reference.py"
    assert sorted(set(ALL) - rows) == [], "references in tests/ops/reference.py without a row in ops.def"


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", ODD_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_forward(rng, name, shape, dtype, device):
    fn, ref, (lo, hi) = UNARY[name]
    a = make(rng, shape, dtype, lo, hi)
    out = fn(on(device, fg.tensor(a)))
    assert out.device == device
    assert out.dtype == fg.tensor(a).dtype
    fg.testing.assert_close(out, ref(a).astype(dtype), rtol=2e-6 if dtype == np.float32 else 1e-12, atol=1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_non_contiguous(rng, name, device):
    fn, ref, (lo, hi) = UNARY[name]
    a = make(rng, (6, 5), np.float64, lo, hi)
    fg.testing.assert_close(fn(on(device, non_contiguous(a))), ref(a), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(set(UNARY) - {"sign"}))
def test_unary_gradcheck(rng, name):
    fn, _, (lo, hi) = UNARY[name]
    a = make(rng, (3, 4), np.float64, lo, hi)
    if name in ("abs", "relu", "clamp"):  # keep away from the kinks
        a = np.where(np.abs(a) < 0.1, 0.3, a)
        a = np.where(np.abs(np.abs(a) - np.array([0.5, 0.7]).reshape(2, 1, 1)).min(0) < 0.05, 0.2, a)
    gradcheck(fn, a)


def test_sign_gradient_is_zero():
    x = fg.tensor([-1.0, 2.0], requires_grad=True)
    fg.sign(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])


def test_erfinv_tails_and_special_values(device):
    """erfinv up to the last float64 below 1 (Newton on the erfc form near +-1), +-inf at +-1,
    NaN beyond and for NaN; float32 from Giles' approximation alone."""
    tails = 1 - np.logspace(-1, -15, 15)
    y = fg.erfinv(on(device, fg.tensor(np.concatenate([tails, -tails])))).numpy()
    erfc = np.vectorize(math.erfc)
    fg.testing.assert_close(erfc(y[:15]), 1 - tails, rtol=1e-12, atol=0)  # erfc(y) = 1 - x, no cancellation
    np.testing.assert_array_equal(y[15:], -y[:15])
    x = np.array([0.0, 1e-300, -1e-8, 0.25, 0.5, -0.75])
    fg.testing.assert_close(fg.erfinv(on(device, fg.tensor(x))), reference.erfinv(x), rtol=1e-14, atol=0)
    x32 = np.array([-0.9999, -0.5, 0.1, 0.9, 0.999, 0.999999], np.float32)
    fg.testing.assert_close(fg.erfinv(on(device, fg.tensor(x32))), reference.erfinv(x32).astype(np.float32),
                            rtol=2e-6, atol=0)
    special = fg.erfinv(on(device, fg.tensor([1.0, -1.0, 1.5, -2.0, np.nan, np.inf]))).numpy()
    np.testing.assert_array_equal(special[:2], [np.inf, -np.inf])
    assert np.isnan(special[2:]).all()


def test_unary_integer_inputs_follow_numpy():
    a = np.array([[-3, 0, 4]], dtype=np.int64)
    assert fg.abs(fg.tensor(a)).dtype == fg.int64
    np.testing.assert_array_equal(fg.relu(fg.tensor(a)).numpy(), [[0, 0, 4]])
    out = fg.exp(fg.tensor(a))
    assert out.dtype == fg.float32  # the default float dtype, as in PyTorch (NumPy: float64)
    fg.testing.assert_close(out, np.exp(a))


def test_unary_on_bool_raises():
    with pytest.raises(fg.DTypeError, match="neg: not defined for bool"):
        fg.neg(fg.tensor([True, False]))


BROADCAST_PAIRS = [((45, 65), (45, 65)), ((4, 1, 3), (5, 1)), ((1,), (3, 4)), ((), (2, 3)),
                   ((0, 3), (1, 3)), ((2, 1), (2, 0))]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
def test_binary_forward_broadcast(rng, name, shapes, device):
    fn, ref = BINARY[name]
    lo = 0.5 if name == "pow" else -2
    a, b = make(rng, shapes[0], low=lo), make(rng, shapes[1], low=lo)
    out = fn(on(device, fg.tensor(a, dtype=fg.float64)), on(device, fg.tensor(b, dtype=fg.float64)))
    fg.testing.assert_close(out, ref(a, b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(COMPARE))
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
def test_comparisons(rng, name, shapes, device):
    fn, ref = COMPARE[name]
    a = make(rng, shapes[0], np.int64, -2, 2)
    b = make(rng, shapes[1], np.int64, -2, 2)
    out = fn(on(device, fg.tensor(a)), on(device, fg.tensor(b)))
    assert out.dtype == fg.bool
    np.testing.assert_array_equal(out.cpu().numpy(), ref(a, b))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_non_contiguous_and_scalar(rng, name, device):
    fn, ref = BINARY[name]
    a, b = make(rng, (5, 6), low=0.5), make(rng, (5, 6), low=0.5)
    ta, tb = on(device, non_contiguous(a)), on(device, non_contiguous(b))
    fg.testing.assert_close(fn(ta, tb), ref(a, b), rtol=1e-12, atol=1e-12)
    fg.testing.assert_close(fn(ta, 1.5), ref(a, 1.5), rtol=1e-12, atol=1e-12)
    fg.testing.assert_close(fn(1.5, tb), ref(1.5, b), rtol=1e-12, atol=1e-12)
    # scalar first, tensor contiguous: the kernel's own broadcast loop (not the strided one)
    tc = on(device, fg.tensor(b))
    fg.testing.assert_close(fn(1.5, tc), ref(1.5, b), rtol=1e-12, atol=1e-12)
    fg.testing.assert_close(fn(on(device, fg.tensor(1.5, dtype=fg.float64)), tc), ref(1.5, b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradcheck_with_broadcasting(rng, name):
    fn, _ = BINARY[name]
    a, b = make(rng, (3, 1, 4), low=0.5), make(rng, (2, 1), low=0.5)
    if name in ("maximum", "minimum"):
        b = b + 0.01  # avoid exact ties
    gradcheck(fn, a, b)


def test_maximum_splits_gradient_on_ties():
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    b = fg.tensor([1.0, 3.0], requires_grad=True)
    fg.maximum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 0.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 1.0])


def test_operators_and_reflected_scalars(rng):
    a = make(rng, (3, 4))
    t = fg.tensor(a, dtype=fg.float64)
    fg.testing.assert_close(-t + 2 * t - t / 3 + t ** 2 - 1.5, -a + 2 * a - a / 3 + a ** 2 - 1.5)
    fg.testing.assert_close(2 - t, 2 - a)
    fg.testing.assert_close(2 / (t + 5), 2 / (a + 5))
    fg.testing.assert_close(abs(t), np.abs(a))
    np.testing.assert_array_equal((t > 0).numpy(), a > 0)
    fg.testing.assert_close(t + np.ones(4), a + 1)


@pytest.mark.parametrize("da,db", [(np.int32, np.float32), (np.int64, np.float32), (np.int32, np.int64),
                                   (np.bool_, np.int32), (np.float32, np.float64), (np.bool_, np.float32),
                                   (np.float16, np.float32), (np.int32, np.float16)])
def test_promotion_matches_numpy(da, db):
    a, b = np.ones(3, dtype=da), np.ones(3, dtype=db)
    out = fg.add(fg.tensor(a), fg.tensor(b)) if not (da == np.bool_ and db == np.bool_) else None
    assert np.dtype(out.numpy().dtype) == np.result_type(a, b)


def test_weak_python_scalars_follow_numpy():
    f32 = fg.ones(2)
    i32 = fg.ones(2, dtype=fg.int32)
    assert (f32 + 2.5).dtype == fg.float32
    assert (i32 + 2).dtype == fg.int32
    assert (i32 + 2.5).dtype == fg.float32  # PyTorch: a Python float with integers gives the default float
    assert (i32 / i32).dtype == fg.float32
    assert fg.promote_types(fg.int32, fg.float32) == fg.float64


def test_integer_arithmetic():
    a = np.array([7, -7, 3], dtype=np.int64)
    b = np.array([2, 2, 3], dtype=np.int64)
    np.testing.assert_array_equal((fg.tensor(a) ** fg.tensor(b)).numpy(), a ** b)
    np.testing.assert_array_equal((fg.tensor(a) * 3 - 1).numpy(), a * 3 - 1)


def test_where_and_masked_fill(rng, device):
    c = make(rng, (4, 1), np.bool_)
    a, b = make(rng, (4, 5)), make(rng, (5,))
    tc, ta, tb = (on(device, fg.tensor(v, dtype=fg.bool if v is c else fg.float64)) for v in (c, a, b))
    fg.testing.assert_close(fg.where(tc, ta, tb), np.where(c, a, b))
    fg.testing.assert_close(fg.where(tc, ta, 0.0), np.where(c, a, 0.0))
    cond = fg.tensor(make(rng, (3, 4), np.bool_))
    gradcheck(lambda x, y: fg.where(cond, x, y), make(rng, (3, 4)), make(rng, (4,)))
    with pytest.raises(fg.DTypeError, match="where: condition must be bool"):
        fg.where(fg.ones(2), fg.ones(2), fg.ones(2))


def test_cast_round_trips_and_gradient(rng):
    """The cast op behind .to(dtype), .float(), .half(), ... and its gradient."""
    a = make(rng, (3, 4))
    t = fg.tensor(a, dtype=fg.float64)
    for dt in (fg.float32, fg.float16, fg.bfloat16, fg.int32, fg.int64, fg.bool):
        back = t.to(dt).double()
        assert t.to(dt).dtype == dt
        tol = {fg.float16: 1e-3, fg.bfloat16: 8e-3}.get(dt, 1e-7)
        if dt in (fg.int32, fg.int64):
            np.testing.assert_array_equal(back.numpy(), np.trunc(a))
        elif dt == fg.bool:
            np.testing.assert_array_equal(back.numpy(), (a != 0).astype(np.float64))
        else:
            fg.testing.assert_close(back, a, rtol=tol, atol=tol)
    x = fg.tensor(a, dtype=fg.float64, requires_grad=True)
    (x.float().double() * 2).sum().backward()
    assert x.grad.dtype == fg.float64  # the gradient comes back in the input's dtype
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 4), 2.0))


def test_half_tensors_compute_through_float32(rng):
    a = make(rng, (5, 7), np.float32)
    for dt in (fg.float16, fg.bfloat16):
        t = fg.tensor(a).to(dt)
        out = (t * 2 + 1).exp()
        assert out.dtype == dt
        fg.testing.assert_close(out.float(), np.exp(t.float().numpy() * 2 + 1), rtol=2e-2, atol=1e-3)


def test_float_to_int_cast_saturates_instead_of_undefined():
    t = fg.tensor([np.nan, np.inf, -np.inf, 3.7], dtype=fg.float64).to(fg.int32)
    np.testing.assert_array_equal(t.numpy(), [0, 2**31 - 1, -2**31, 3])


def test_broadcast_error_names_op_and_shapes():
    with pytest.raises(fg.ShapeError, match=r"add: shapes \(2, 3\) and \(4,\) cannot be broadcast"):
        fg.ones(2, 3) + fg.ones(4)


def test_bool_arithmetic_raises():
    with pytest.raises(fg.DTypeError, match="sub: arithmetic on two bool tensors"):
        fg.tensor([True]) - fg.tensor([False])


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(fg.InvalidArgumentError, match="approximate must be 'none' or 'tanh'"):
        fg.gelu(fg.ones(2), approximate="fast")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_fused_gelu_backward_matches_the_composite_rule(rng, approximate):
    """gelu_backward / gelu_tanh_backward: the fused first-order gradient kernels."""
    a = make(rng, (7, 9), low=-4, high=4)
    for dtype, tol in ((fg.float64, 1e-12), (fg.float32, 2e-6)):
        x = fg.tensor(a, dtype=dtype, requires_grad=True)
        g = fg.tensor(make(rng, (7, 9)), dtype=dtype)
        (fused,) = fg.autograd.grad(fg.gelu(x, approximate=approximate), x, g)  # first order: fused kernel
        (composite,) = fg.autograd.grad(fg.gelu(x, approximate=approximate), x, g, create_graph=True)
        fg.testing.assert_close(fused, composite.detach(), rtol=tol, atol=tol)
    gradcheck(lambda v: fg.gelu(v, approximate=approximate), a)


@pytest.mark.parametrize("dtype", [fg.float16, fg.bfloat16, fg.int32, fg.bool, fg.float64])
def test_cast_on_device(rng, dtype, device):
    a = make(rng, (7, 3), np.float32, -3, 3)
    out = on(device, fg.tensor(a)).to(dtype)
    assert out.device == device and out.dtype == dtype
    readable = (lambda t: t.float()) if dtype == fg.bfloat16 else (lambda t: t)
    np.testing.assert_array_equal(readable(out.cpu()).numpy(), readable(fg.tensor(a).to(dtype)).numpy())


def test_integer_negative_power_raises_like_numpy():
    with pytest.raises(fg.InvalidArgumentError, match="pow: integers to negative integer powers are not allowed"):
        fg.tensor([2]) ** -1
    with pytest.raises(fg.InvalidArgumentError, match="negative integer powers"):
        fg.pow(fg.tensor([2, 3], dtype=fg.int32), fg.tensor([1, -2]))
    np.testing.assert_array_equal((fg.tensor([2, 3]) ** fg.tensor([0, 2])).numpy(), [1, 9])
    np.testing.assert_array_equal((fg.tensor([2.0]) ** -1).numpy(), [0.5])  # a float base is fine
    assert (fg.tensor([2]) ** fg.zeros(0, dtype=fg.int64)).shape == (0,)


def test_python_ints_out_of_range_for_the_dtype_raise_like_numpy2():
    with pytest.raises(OverflowError, match="add: Python integer 1099511627776 is out of bounds for int32"):
        fg.tensor([1], dtype=fg.int32) + 2**40
    with pytest.raises(OverflowError, match="mul: Python integer -2147483649 is out of bounds for int32"):
        fg.tensor([1], dtype=fg.int32) * (-2**31 - 1)
    with pytest.raises(OverflowError, match="sub: Python integer 18446744073709551616 is out of bounds for int64"):
        2**64 - fg.tensor([1])
    assert (fg.tensor([1], dtype=fg.int32) + (2**31 - 1)).dtype == fg.int32
    np.testing.assert_array_equal((fg.zeros(3) + 2**64).numpy(), np.zeros(3, np.float32) + 2**64)  # as NumPy
    with pytest.raises(OverflowError, match="add: scalar = int 1000000000000"):
        fg.zeros(3) + 10**400


def test_pow_gradient_with_bool_and_integer_exponents():
    for e, expected in ((fg.tensor(True), [1.0, 1.0]), (fg.tensor([2, 3]), [4.0, 27.0])):
        x = fg.tensor([2.0, 3.0], dtype=fg.float64, requires_grad=True)
        (x ** e).sum().backward()  # d/dx x^e = e x^(e-1)
        np.testing.assert_allclose(x.grad.numpy(), expected)
    e = fg.tensor([1.0, 2.0], dtype=fg.float64, requires_grad=True)
    (fg.tensor([True, False]) ** e).sum().backward()  # d/de b^e = b^e log b, 0 where b == 0
    np.testing.assert_allclose(e.grad.numpy(), [0.0, 0.0])
    (fg.tensor([3, 1]) ** e).sum().backward()
    np.testing.assert_allclose(e.grad.numpy(), [3.0 * np.log(3.0), 0.0])


@pytest.mark.parametrize("name", sorted(BITWISE))
@pytest.mark.parametrize("npdt", [np.bool_, np.uint8, np.int32, np.int64])
def test_bitwise_references(rng, name, npdt, device):
    fn, ref = BITWISE[name]
    a, b = make(rng, (45, 65), npdt, 0, 100), make(rng, (45, 65), npdt, 0, 100)
    args = (a,) if name == "bitwise_not" else (a, b)
    out = fn(*(on(device, fg.tensor(x)) for x in args))
    np.testing.assert_array_equal(out.cpu().numpy(), ref(*args))


@pytest.mark.parametrize("name", sorted(GRADIENT))
def test_gradient_kernel_references(rng, name, device):
    fn, ref = GRADIENT[name]
    x, g = make(rng, (45, 65), low=-4, high=4), make(rng, (45, 65))
    out = fn(on(device, fg.tensor(x, requires_grad=True)), on(device, fg.tensor(g)))
    fg.testing.assert_close(out, ref(x, g), rtol=1e-12, atol=1e-12)


def test_where_and_cast_references(rng, device):
    cond, a, b = make(rng, (4, 1, 3)) > 0, make(rng, (5, 1)), make(rng, (3,))
    fn, ref = OTHER["where"]
    out = fn(on(device, fg.tensor(cond)), on(device, fg.tensor(a)), on(device, fg.tensor(b)))
    fg.testing.assert_close(out, ref(cond, a, b), rtol=0, atol=0)
    fn, ref = OTHER["cast"]
    fg.testing.assert_close(fn(on(device, fg.tensor(a))), ref(a), rtol=0, atol=0)
