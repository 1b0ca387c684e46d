"""The operator fast paths (cpp/bindings/fast_paths.cpp) against the bound methods they bypass.

`a + b` runs from Python's number slot straight to the op when the operands are fg.Tensor
objects or one is a Python scalar; `type(a).__add__(a, b)` always takes the bound method. Both
must give the same values, dtypes, errors and autograd history; NumPy is the reference for values.
"""
import operator

import numpy as np
import pytest

import flowgrad as fg
from conftest import make

OPERATORS = {"add": (operator.add, "__add__", "__radd__"), "sub": (operator.sub, "__sub__", "__rsub__"),
             "mul": (operator.mul, "__mul__", "__rmul__"), "div": (operator.truediv, "__truediv__", "__rtruediv__")}
DTYPES = [np.bool_, np.int32, np.int64, np.float32, np.float64]


def bound(name, a, b):
    """a <op> b through the bound methods only (what the slot did before the fast path)."""
    _, method, reflected = OPERATORS[name]
    if isinstance(a, fg.Tensor):
        return getattr(fg.Tensor, method)(a, b)
    return getattr(fg.Tensor, reflected)(b, a)


def outcome(fn):
    """(bytes, shape, dtype) of fn() (NaN compares equal to NaN), or (error type, message)."""
    try:
        t = fn()
    except Exception as e:  # noqa: BLE001 - the error itself is compared
        return type(e), str(e)
    assert type(t) is fg.Tensor
    return t.numpy().tobytes(), t.shape, t.dtype


def tensor_of(rng, shape, dtype, device):
    return fg.tensor(make(rng, shape, dtype, low=1, high=4), device=device)


@pytest.mark.parametrize("name", OPERATORS)
@pytest.mark.parametrize("da", DTYPES)
@pytest.mark.parametrize("db", DTYPES)
def test_tensor_operands_match_bound_methods_and_numpy(rng, device, name, da, db):
    a, b = tensor_of(rng, (3, 1), da, device), tensor_of(rng, (4,), db, device)
    fast = outcome(lambda: OPERATORS[name][0](a, b))
    assert fast == outcome(lambda: bound(name, a, b))
    if len(fast) == 3:
        with np.errstate(divide="ignore", invalid="ignore"):
            expected = OPERATORS[name][0](a.numpy().astype(np.float64), b.numpy().astype(np.float64))
        np.testing.assert_allclose(OPERATORS[name][0](a, b).numpy().astype(np.float64), expected, rtol=1e-6)


@pytest.mark.parametrize("name", OPERATORS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", [2, -3.5, True, 0])
def test_scalars_on_either_side_match_bound_methods(rng, device, name, dtype, scalar):
    t = tensor_of(rng, (2, 3), dtype, device)
    fn = OPERATORS[name][0]
    assert outcome(lambda: fn(t, scalar)) == outcome(lambda: bound(name, t, scalar))
    assert outcome(lambda: fn(scalar, t)) == outcome(lambda: bound(name, scalar, t))


def test_scalar_promotion_follows_the_weak_rules():
    i = fg.tensor([1, 2], dtype=fg.int32)
    assert (i + 2).dtype == fg.int32 and (2 + i).dtype == fg.int32
    assert (i * 0.5).dtype == fg.float32 and (0.5 * i).dtype == fg.float32
    assert (fg.tensor([1.0], dtype=fg.float64) + 1.5).dtype == fg.float64
    np.testing.assert_array_equal((3 - i).numpy(), [2, 1])
    np.testing.assert_allclose((1.0 / fg.tensor([4.0])).numpy(), [0.25])


def test_errors_match_bound_methods():
    cases = [(fg.ones(2), fg.ones(3), fg.ShapeError, "add"),
             (fg.tensor([True]), fg.tensor([False]), fg.DTypeError, "arithmetic on two bool tensors"),
             (fg.tensor([1], dtype=fg.int32), 2 ** 40, OverflowError, "out of bounds for int32"),
             (fg.tensor([1]), 2 ** 70, OverflowError, "out of bounds for int64"),
             (fg.ones(2), "x", fg.DTypeError, "unsupported NumPy dtype")]
    for a, b, error, message in cases:
        with pytest.raises(error, match=message) as fast:
            a + b
        with pytest.raises(error) as slow:
            bound("add", a, b)
        assert str(fast.value) == str(slow.value)
        assert str(fast.value).startswith("add: ")


def test_matmul_operator_matches_bound_method(rng):
    a, b = fg.tensor(make(rng, (3, 5))), fg.tensor(make(rng, (5, 2)))
    np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-12)
    with pytest.raises(fg.ShapeError) as fast:
        a @ a
    with pytest.raises(fg.ShapeError) as slow:
        fg.Tensor.__matmul__(a, a)
    assert str(fast.value) == str(slow.value) and str(fast.value).startswith("matmul")


def test_other_operands_keep_the_bound_methods(rng):
    t = fg.tensor(make(rng, (2, 3)))
    arr = make(rng, (2, 3))
    np.testing.assert_allclose((t + arr).numpy(), t.numpy() + arr)
    np.testing.assert_allclose(np.asarray(arr - t), arr - t.numpy())  # NumPy converts t
    np.testing.assert_allclose((t * [[1.0, 2.0, 3.0]]).numpy(), t.numpy() * [1, 2, 3])
    np.testing.assert_allclose(np.asarray(np.float64(2.0) * t), 2 * t.numpy())  # NumPy's scalar converts t
    np.testing.assert_allclose((t + (1.0, 2.0, 3.0)).numpy(), t.numpy() + [1, 2, 3])  # a tuple is one operand

    class Other:
        def __radd__(self, other):
            return "radd"
    with pytest.raises(fg.DTypeError) as fast:  # as before: the tensor's __add__ tries to convert it
        t + Other()
    with pytest.raises(fg.DTypeError) as slow:
        fg.Tensor.__add__(t, Other())
    assert str(fast.value) == str(slow.value)


def test_views_and_large_operands(rng):
    base = fg.tensor(make(rng, (200, 300)))
    view = base.transpose(0, 1)[::2]  # strided, not contiguous
    other = fg.tensor(make(rng, (150, 200)))
    np.testing.assert_allclose((view + other).numpy(), base.numpy().T[::2] + other.numpy())
    np.testing.assert_allclose((view * 3).numpy(), base.numpy().T[::2] * 3)
    np.testing.assert_allclose((base - base).numpy(), np.zeros((200, 300)))


def test_autograd_records_through_the_fast_path(rng):
    x, y = make(rng, (3, 4)), make(rng, (4,), low=0.5, high=2.0)
    a = fg.tensor(x, requires_grad=True)
    b = fg.tensor(y, requires_grad=True)
    out = (a + b) * 2.0 - 1 / b + a * a / 3
    assert out.grad_fn == "<AddBackward>"
    out.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 2.0 + 2 * x / 3, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), 3 * 2.0 + 3 / y ** 2, rtol=1e-12)
    with fg.no_grad():
        assert (a + b).grad_fn is None and not (a + b).requires_grad
    assert (a.detach() + 1.0).grad_fn is None


def test_gradcheck_operators(rng):
    from conftest import gradcheck
    gradcheck(lambda a, b: (a + b) * a - b / (a * a + 1.0) + 2.0 * a, make(rng, (3, 1)), make(rng, (1, 4)))


def test_in_place_on_leaf_requiring_grad_still_raises():
    a = fg.tensor([1.0], requires_grad=True)
    with pytest.raises(fg.InvalidArgumentError, match="leaf tensor that requires grad"):
        a += 1.0
    with pytest.raises(fg.InvalidArgumentError, match="leaf tensor that requires grad"):
        a.add_(fg.tensor([1.0]))


FUNCTIONS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_match_numpy_with_any_call_form(rng, device, name):
    x, y = make(rng, (3, 4)), make(rng, (4,), low=0.5, high=2.0)
    a, b = fg.tensor(x, device=device), fg.tensor(y, device=device)
    fn, expected = getattr(fg, name), FUNCTIONS[name](x, y)
    for result in (fn(a, b), fn(input=a, other=b), fn(a, other=b),
                   getattr(a, name)(b)):
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(fn(a, 2).numpy(), FUNCTIONS[name](x, 2), rtol=1e-12)
    np.testing.assert_allclose(fn(2.5, b).numpy(), FUNCTIONS[name](2.5, y), rtol=1e-12)
    np.testing.assert_allclose(fn(x, b).numpy(), expected, rtol=1e-12)  # an array: the bound function
    with pytest.raises(fg.ShapeError, match=f"^{name}: "):
        fn(a, fg.ones(5, device=device))
    with pytest.raises(TypeError):
        fn(a)


def test_function_docs_and_names_are_kept():
    assert fg.add.__name__ == "add" and fg.add.__doc__.startswith("add(")
    assert "Operands broadcast as in NumPy." in fg.add.__doc__
    assert fg.Tensor.add_.__doc__.startswith("add_(") and "alpha" in fg.Tensor.add_.__doc__
    assert fg.Tensor.mul_.__name__ == "mul_"


IN_PLACE = {"add_": np.add, "sub_": np.subtract, "mul_": np.multiply, "div_": np.divide}


@pytest.mark.parametrize("name", IN_PLACE)
def test_in_place_methods_write_self_and_return_it(rng, device, name):
    x, y = make(rng, (3, 4)), make(rng, (4,), low=0.5, high=2.0)
    t = fg.tensor(x, device=device)
    version = t._version
    assert getattr(t, name)(fg.tensor(y, device=device)) is t
    assert t._version == version + 1
    np.testing.assert_allclose(t.numpy(), IN_PLACE[name](x, y), rtol=1e-12)
    assert getattr(t, name)(3) is t
    np.testing.assert_allclose(t.numpy(), IN_PLACE[name](IN_PLACE[name](x, y), 3), rtol=1e-12)
    before = t.numpy().copy()  # numpy() shares the memory
    view = t[:, 1]  # a strided view: writes through to t
    assert getattr(view, name)(2.0) is view
    expected = before.copy()
    expected[:, 1] = IN_PLACE[name](before[:, 1], 2.0)
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-12)
    bad = fg.ones(5, device=device)
    with pytest.raises(fg.ShapeError, match=f"^{name[:-1]}: shapes") as fast:
        getattr(t, name)(bad)
    with pytest.raises(fg.ShapeError) as slow:  # a keyword argument takes the bound method
        getattr(t, name)(other=bad)
    assert str(fast.value) == str(slow.value)


def test_in_place_alpha_and_errors_match_the_bound_method():
    t = fg.tensor([1.0, 2.0])
    assert t.add_(fg.tensor([1.0, 1.0]), alpha=2.0) is t and t.numpy().tolist() == [3.0, 4.0]
    assert t.sub_(other=fg.tensor([1.0, 1.0])) is t and t.numpy().tolist() == [2.0, 3.0]
    i = fg.tensor([1], dtype=fg.int32)
    with pytest.raises(OverflowError, match="out of bounds for int32"):
        i.add_(2 ** 40)
    with pytest.raises(fg.DTypeError, match="add_"):
        i.add_(fg.tensor([0.5]))
    with pytest.raises(TypeError):
        fg.Tensor.add_(1.0, i)
