"""In-place ops (add_ sub_ mul_ div_ pow_ neg_ relu_ clamp_ fill_ zero_ copy_ masked_fill_ uniform_
normal_), augmented assignment and t[idx] = value (index_put_), checked against NumPy: the same
tensor and storage are written, views see the write, and the version counter moves."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import ODD_SHAPES, gradcheck, make, non_contiguous, on


def f64(a):
    return fg.tensor(a, dtype=fg.float64)


def strided(a):
    """A non-contiguous view with a's values: every other column of a base twice as wide."""
    return f64(a) if a.ndim == 0 else f64(np.repeat(a, 2, axis=-1))[..., ::2]


def written(t, fn):
    """Runs fn(t), checks it wrote t itself (same object, same memory, version + 1), returns t's values."""
    ptr, version = t.data_ptr(), t._version
    assert fn(t) is t
    assert t.data_ptr() == ptr and t._version == version + 1
    return t.cpu().numpy()


BINARY = {"add_": np.add, "sub_": np.subtract, "mul_": np.multiply, "div_": np.divide, "pow_": np.power}


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_binary_in_place_matches_numpy(rng, device, name, shape):
    a = make(rng, shape, low=0.5, high=2.0)
    other_shapes = [shape, shape[-1:], ()]
    for other_shape in other_shapes:
        b = make(rng, other_shape, low=0.5, high=2.0)
        expected = BINARY[name](a, b)
        got = written(on(device, f64(a)), lambda t: getattr(t, name)(on(device, f64(b))))
        fg.testing.assert_close(got, expected)
    # a Python scalar and a non-contiguous target
    got = written(on(device, strided(a)), lambda t: getattr(t, name)(1.5))
    fg.testing.assert_close(got, BINARY[name](a, 1.5))


def test_add_sub_alpha(rng):
    a, b = make(rng, (4, 5)), make(rng, (5,))
    fg.testing.assert_close(written(f64(a), lambda t: t.add_(f64(b), alpha=-0.5)), a - 0.5 * b)
    fg.testing.assert_close(written(f64(a), lambda t: t.sub_(f64(b), alpha=2)), a - 2 * b)


@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_unary_in_place_matches_numpy(rng, device, shape):
    a = make(rng, shape)
    fg.testing.assert_close(written(on(device, f64(a)), lambda t: t.neg_()), -a)
    fg.testing.assert_close(written(on(device, strided(a)), lambda t: t.relu_()), np.maximum(a, 0))
    fg.testing.assert_close(written(on(device, f64(a)), lambda t: t.clamp_(-0.5, 1.0)), np.clip(a, -0.5, 1.0))
    fg.testing.assert_close(written(on(device, f64(a)), lambda t: t.clamp_(min=0.25)), np.maximum(a, 0.25))
    fg.testing.assert_close(written(on(device, f64(a)), lambda t: t.clamp_(max=0.25)), np.minimum(a, 0.25))


def test_integer_in_place_ops(rng):
    a = make(rng, (3, 4), dtype=np.int64, low=-5, high=5)
    fg.testing.assert_close(written(fg.tensor(a), lambda t: t.mul_(3)), a * 3)
    fg.testing.assert_close(written(fg.tensor(a.astype(np.int32)), lambda t: t.add_(fg.tensor(a))), a * 2)
    fg.testing.assert_close(written(fg.tensor(a), lambda t: t.clamp_(-2, 2)), np.clip(a, -2, 2))
    # a float result into a float32 tensor is cast, like NumPy's same_kind casting
    fg.testing.assert_close(written(fg.ones(3), lambda t: t.add_(f64([0.5, 1.5, 2.5]))), np.array([1.5, 2.5, 3.5]))


def test_augmented_assignment_is_in_place(rng, device):
    a, b = make(rng, (3, 4), low=0.5), make(rng, (4,), low=0.5)
    t = on(device, f64(a))
    alias, ptr = t, t.data_ptr()
    t += on(device, f64(b))
    t -= 1.0
    t *= 2
    t /= on(device, f64(b))
    t **= 2
    assert t is alias and t.data_ptr() == ptr and t._version == 5
    fg.testing.assert_close(t.cpu().numpy(), ((a + b - 1.0) * 2 / b) ** 2)
    view = t[1]
    view += 100.0  # a basic-indexing view writes into its base
    fg.testing.assert_close(t.cpu().numpy()[1], ((a[1] + b - 1.0) * 2 / b) ** 2 + 100.0)
    n = fg.ones(2, 3)
    n += np.arange(3, dtype=np.float32)  # NumPy operands broadcast as in NumPy
    fg.testing.assert_close(n, 1.0 + np.arange(3)[None].repeat(2, 0))


def test_no_grad_update_changes_the_weights():
    """The issue's reproducer: the augmented assignment used to rebind a new tensor."""
    p = fg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (p * p).sum().backward()
    params = [p]
    with fg.no_grad():
        p -= 0.1 * p.grad
    assert params[0] is p and p.is_leaf and p.requires_grad
    fg.testing.assert_close(p, np.array([0.8, -1.6, 2.4]))
    with fg.no_grad():
        p.grad.zero_()
        p.add_(p.grad, alpha=-1.0)
    fg.testing.assert_close(p.grad, np.zeros(3))


def test_fill_zero_copy(rng, device):
    a = make(rng, (4, 3))
    fg.testing.assert_close(written(on(device, non_contiguous(a)), lambda t: t.fill_(2.5)), np.full((4, 3), 2.5))
    fg.testing.assert_close(written(on(device, f64(a)), lambda t: t.zero_()), np.zeros((4, 3)))
    fg.testing.assert_close(written(on(device, fg.zeros(0, 3)), lambda t: t.fill_(1.0)), np.zeros((0, 3)))
    fg.testing.assert_close(written(on(device, fg.zeros((), dtype=fg.int32)), lambda t: t.fill_(7)), np.array(7))
    src = make(rng, (3,))
    fg.testing.assert_close(written(on(device, non_contiguous(a)), lambda t: t.copy_(on(device, f64(src)))),
                            np.broadcast_to(src, (4, 3)))
    ints = written(on(device, fg.zeros(4, 3, dtype=fg.int32)), lambda t: t.copy_(on(device, f64(a * 3))))
    np.testing.assert_array_equal(ints, (a * 3).astype(np.int32))
    fg.testing.assert_close(written(fg.zeros(2, 3), lambda t: t.copy_(np.arange(3.0))), np.tile(np.arange(3.0), (2, 1)))
    with pytest.raises(fg.ShapeError, match=r"copy_: source \(2, 3\) cannot be broadcast to destination \(3,\)"):
        fg.zeros(3).copy_(fg.ones(2, 3))


def test_masked_fill_in_place(rng, device):
    a = make(rng, (5, 4))
    row = rng.random(4) > 0.5
    fg.testing.assert_close(written(on(device, non_contiguous(a)), lambda t: t.masked_fill_(on(device, fg.tensor(row)), -3.0)),
                            np.where(row, -3.0, a))
    with pytest.raises(fg.DTypeError, match="masked_fill_: mask must be bool, got int64"):
        f64(a).masked_fill_(fg.tensor([1, 0, 1, 0]), 0.0)
    with pytest.raises(fg.ShapeError, match=r"masked_fill_: mask \(5, 1, 4\) cannot be broadcast to the tensor's shape \(5, 4\)"):
        f64(a).masked_fill_(fg.ones(5, 1, 4, dtype=fg.bool), 0.0)


def test_uniform_normal_in_place(device):
    fg.manual_seed(3)
    expected = (fg.rand(200, 5, dtype=fg.float64, device=device) * 4.0 - 1.0).cpu().numpy()
    fg.manual_seed(3)
    got = written(fg.zeros(200, 5, dtype=fg.float64, device=device), lambda t: t.uniform_(-1.0, 3.0))
    np.testing.assert_array_equal(got, expected)
    fg.manual_seed(4)
    expected = (fg.randn(200, 5, device=device) * 0.5 + 2.0).cpu().numpy()
    fg.manual_seed(4)
    np.testing.assert_array_equal(written(fg.zeros(200, 5, device=device), lambda t: t.normal_(2.0, 0.5)), expected)
    with pytest.raises(fg.DTypeError, match="uniform_: expected a floating tensor, got int64"):
        fg.zeros(3, dtype=fg.int64).uniform_()


def test_inputs_sharing_memory_with_the_target_are_read_before_the_write(rng):
    a = make(rng, (6, 3))
    t = f64(a)
    t[1:] += t[:-1]
    expected = a.copy()
    expected[1:] += expected[:-1]  # NumPy reads overlapping operands as if copied first
    fg.testing.assert_close(t, expected)
    t = f64(a)
    t.mul_(t)
    fg.testing.assert_close(t, a * a)
    t = f64(a)
    t[1::2] = t[::2]
    expected = a.copy()
    expected[1::2] = expected[::2]
    fg.testing.assert_close(t, expected)


def test_in_place_errors_name_the_op(rng):
    with pytest.raises(fg.DTypeError, match="add_: the result type float64 cannot be written in place into int64"):
        fg.zeros(3, dtype=fg.int64).add_(1.5)
    with pytest.raises(fg.DTypeError, match=r"div_: the result type float\d+ cannot be written in place into int32"):
        t = fg.ones(3, dtype=fg.int32)
        t /= 2
    with pytest.raises(fg.ShapeError, match=r"mul_: the result has shape \(2, 3\) but the tensor written in place has shape \(3,\)"):
        fg.ones(3).mul_(fg.ones(2, 3))
    with pytest.raises(fg.InvalidArgumentError, match="fill_: cannot write in place into float32 \\(4, 3\\).*dim 0 is expanded"):
        fg.ones(3).expand(4, 3).fill_(0.0)


# ---- t[idx] = value (index_put_) ----

def setitem_cases():
    """(index, value shape) pairs over a (5, 6, 4) tensor: every form that t[idx] reads."""
    return [
        (2, (6, 4)), (-1, ()), ((1, -2), (4,)), ((0, 1, 2), ()),
        (slice(1, 4), (1, 4)), (slice(None, None, 2), ()), ((slice(1, None, 3), 2), (2, 4)),
        ((Ellipsis, 1), (5, 6)), ((None, 1), (6, 4)), ((slice(None), None, 3), (5, 1, 4)), (Ellipsis, (4,)),
        ([0, 3, 1], (3, 6, 4)), (np.array([4, -5]), (6, 4)), ((slice(None), np.array([[4, 0], [1, 2]])), (5, 2, 2, 4)),
        ((slice(None), 1, np.array([3, 0], dtype=np.int32)), (5, 2)),
        ((Ellipsis, [True, False, True, True]), (5, 6, 3)), (slice(2, 2), ()),
        # PyTorch's (and NumPy's) leading size-1 dims beyond the indexed rank are dropped
        (2, (1, 6, 4)), ((1, -2), (1, 1, 4)), (slice(1, 4), (1, 1, 1, 4)),
        ([0, 3, 1], (1, 3, 1, 4)), ((Ellipsis, 1), (1, 1, 6)),
    ]


def as_operand(value, kind, device):
    if kind == "tensor":
        return on(device, f64(value))
    return np.asarray(value).tolist() if kind == "list" else value


@pytest.mark.parametrize("value_kind", ["scalar", "tensor", "numpy", "list"])
def test_setitem_matches_numpy(rng, device, value_kind):
    a = make(rng, (5, 6, 4))
    for index, value_shape in setitem_cases():
        value = float(rng.uniform(-9, 9)) if value_kind == "scalar" else make(rng, value_shape)
        expected = a.copy()
        expected[index] = value
        # NumPy arrays inside a tuple become index tensors; a bare one stays a NumPy array
        fg_index = tuple(on(device, fg.tensor(i)) if isinstance(i, np.ndarray) else i for i in index) \
            if isinstance(index, tuple) else index
        for target in (f64(a), non_contiguous(a)):
            t = on(device, target)
            t[fg_index] = as_operand(value, value_kind, device)
            fg.testing.assert_close(t.cpu(), expected)


def test_setitem_repeated_index_keeps_the_last_value_on_cpu():
    t = fg.zeros(3)
    t[[1, 1, 2, 1]] = fg.tensor([1.0, 2.0, 3.0, 4.0])
    assert t.tolist() == [0.0, 4.0, 3.0]


def test_numpy_array_index_reads_and_writes(rng):
    a = make(rng, (5, 3))
    idx = np.array([4, 0, 4])
    fg.testing.assert_close(f64(a)[idx], a[idx])
    t = f64(a)
    t[np.array([1, 3])] = np.array([9.0, 8.0, 7.0])
    expected = a.copy()
    expected[[1, 3]] = [9.0, 8.0, 7.0]
    fg.testing.assert_close(t, expected)


def test_setitem_with_masks(rng, device):
    a = make(rng, (4, 5))
    mask = a > 0.3
    expected = a.copy()
    expected[mask] = -1.0
    t = on(device, f64(a))
    t[on(device, fg.tensor(mask))] = -1.0
    fg.testing.assert_close(t.cpu(), expected)
    values = make(rng, (int(mask.sum()),))
    expected[mask] = values
    t[t.cpu() == -1.0] = values  # a mask computed from the tensor, values from NumPy
    fg.testing.assert_close(t.cpu(), expected)
    nothing = np.zeros((4, 5), dtype=bool)
    t[nothing] = 5.0  # an all-false mask writes nothing
    fg.testing.assert_close(t.cpu(), expected)
    rows = np.array([True, False, False, True])
    expected[rows, 1:3] = 0.5
    t[fg.tensor(rows), 1:3] = 0.5
    fg.testing.assert_close(t.cpu(), expected)


def test_setitem_odd_targets():
    t = fg.tensor(3.0)
    t[...] = 5.0  # 0-d
    assert t.item() == 5.0
    t[None] = 6.0
    assert t.item() == 6.0
    e = fg.zeros(0, 3)
    e[:, 1] = 2.0
    assert e.shape == (0, 3)
    i = fg.zeros(4, dtype=fg.int32)
    i[1:3] = 2.7  # NumPy's unsafe cast for assignment
    np.testing.assert_array_equal(i.numpy(), np.array([0, 2, 2, 0], dtype=np.int32))
    b = fg.zeros(3, dtype=fg.bool)
    b[1] = True
    assert b.tolist() == [False, True, False]
    h = fg.zeros(3, dtype=fg.float16)
    h[::2] = 1.5
    assert h.tolist() == [1.5, 0.0, 1.5]


def test_setitem_errors():
    t = fg.zeros(2, 4)
    with pytest.raises(fg.ShapeError, match=r"index_put_ \(t\[index\] = value\): value of shape \(3,\) cannot be "
                                            r"broadcast to the indexed shape \(2, 4\)"):
        t[:] = fg.ones(3)
    with pytest.raises(fg.IndexOutOfRangeError, match="out of range"):
        t[2] = 1.0
    with pytest.raises(fg.IndexOutOfRangeError, match="index 4 is out of range"):
        t[:, [0, 4]] = 1.0
    with pytest.raises(fg.ShapeError, match="bool mask"):
        t[fg.ones(3, dtype=fg.bool)] = 1.0
    assert t._version == 0 and not t.numpy().any()  # nothing was written


def test_setitem_of_one_element_takes_a_value_of_size_one_ones():
    t = fg.zeros(2, 3)
    t[1, 2] = fg.full((1, 1), 7.0)  # PyTorch takes it; NumPy refuses a (1, 1) array for an element
    t[0, 0] = fg.full((1,), 5.0)
    assert t.tolist() == [[5.0, 0.0, 0.0], [0.0, 0.0, 7.0]]


def test_setitem_broadcast_errors_name_both_shapes():
    t = fg.zeros(3, 4)
    cases = [(1, (2, 4), r"\(2, 4\)", r"\(4,\)"), (1, (2, 1, 4), r"\(2, 1, 4\)", r"\(4,\)"),
             (slice(0, 2), (3, 4), r"\(3, 4\)", r"\(2, 4\)"), ((slice(None), 0), (1, 2), r"\(2,\)", r"\(3,\)"),
             (slice(0, 2), (1, 4, 4), r"\(4, 4\)", r"\(2, 4\)")]
    for index, shape, value, indexed in cases:
        with pytest.raises(fg.ShapeError, match=rf"index_put_ \(t\[index\] = value\): value of shape {value} "
                                                rf"cannot be broadcast to the indexed shape {indexed}"):
            t[index] = fg.ones(*shape)
    assert t._version == 0 and not t.numpy().any()


def test_setitem_with_leading_ones_in_a_compiled_plan(rng):
    a, row = make(rng, (3, 4)).astype(np.float32), make(rng, (1, 4)).astype(np.float32)

    def step(x, v):
        buf = x * 1.0
        buf[1] = v  # a (1, 4) value into a (4,) row
        buf[0:2, None] = v[None] * 2.0  # (1, 1, 4) into (2, 1, 4)
        return buf

    expected = a.copy()
    expected[1] = row[0]
    expected[0:2] = row * 2.0
    plan = fg.compile(step, example_inputs=(fg.tensor(a), fg.tensor(row)))
    fg.testing.assert_close(plan(fg.tensor(a), fg.tensor(row)), expected)
    fg.testing.assert_close(step(fg.tensor(a), fg.tensor(row)), expected)


# ---- autograd through in-place ops on non-leaf tensors ----

def through(op):
    """fn(x, y): y written into a non-leaf copy of x by `op`."""
    def fn(x, y):
        z = x * 1.0
        op(z, y)
        return z * z
    return fn


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_in_place_gradients(rng, name):
    a, b = make(rng, (3, 4), low=0.5), make(rng, (4,), low=0.5)
    gradcheck(through(lambda z, y: getattr(z, name)(y)), a, b)


def test_other_in_place_gradients(rng):
    a, b = make(rng, (3, 4)), make(rng, (4,))
    mask = fg.tensor(a > 0)
    gradcheck(through(lambda z, y: (z.neg_(), z.mul_(y))), a, b)
    gradcheck(through(lambda z, y: (z.mul_(y), z.relu_())), a, b)
    gradcheck(through(lambda z, y: (z.add_(y), z.clamp_(-0.5, 0.7))), a, b)
    gradcheck(through(lambda z, y: (z.fill_(2.0), z.add_(y))), a, b)
    gradcheck(through(lambda z, y: z.copy_(y)), a, b)
    gradcheck(through(lambda z, y: (z.masked_fill_(mask, 1.5), z.mul_(y))), a, b)
    gradcheck(through(lambda z, y: z.__setitem__((slice(None), [3, 0]), y[1:3] * 2)), a, b)
    gradcheck(through(lambda z, y: z.__setitem__(fg.tensor(a > 0.5), 3.0)), a, b)
    gradcheck(through(lambda z, y: z.__setitem__(1, y)), a, b)
    gradcheck(through(lambda z, y: z.__setitem__(slice(0, 2), y.reshape(1, 1, 4))), a, b)


def test_in_place_on_a_plain_tensor_records_the_written_value(rng):
    w = fg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    buf = fg.zeros(2, 3)
    buf[1] = w * 2  # buf did not require grad: it now has history through index_put_
    assert buf.requires_grad and not buf.is_leaf
    (buf * buf).sum().backward()
    fg.testing.assert_close(w.grad, 8 * w.detach().numpy())
