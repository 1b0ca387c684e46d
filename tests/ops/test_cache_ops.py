"""index_copy_/index_copy, scatter_/scatter and narrow with a tensor start (python/flowgrad/_cache_ops.py)
against NumPy, finite differences, their errors, and inside a compiled plan writing a buffer in place."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous, on


def np_index_copy(x, dim, idx, src):
    out = np.moveaxis(x.copy(), dim, 0)
    out[idx] = np.moveaxis(src, dim, 0)
    return np.moveaxis(out, 0, dim)


def np_scatter(x, dim, idx, src):
    out = x.copy()
    for pos in np.ndindex(*idx.shape):
        at = list(pos)
        at[dim] = idx[pos]
        out[tuple(at)] = src[pos]
    return out


@pytest.mark.parametrize("shape,dim,idx", [((7, 5), 0, [3, 0, 6]), ((3, 6, 4), 1, [5, -1, 2]), ((4, 5), 1, [2]),
                                          ((5, 3), 0, []), ((2, 9, 3, 4), 2, [1, 0, 2]), ((6,), 0, [4, 1])])
def test_index_copy_matches_numpy(rng, device, shape, dim, idx):
    x = make(rng, shape)
    idx = np.array(idx, dtype=np.int64)
    src_shape = list(shape)
    src_shape[dim] = len(idx)
    src = make(rng, tuple(src_shape))
    want = np_index_copy(x, dim, idx % shape[dim], src)
    got = fg.index_copy(fg.tensor(x).to(device), dim, fg.tensor(idx).to(device), fg.tensor(src).to(device))
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    target = fg.tensor(x).to(device)
    out = target.index_copy_(dim - len(shape), fg.tensor(idx.astype(np.int32)).to(device), fg.tensor(src).to(device))
    assert out is target
    np.testing.assert_array_equal(target.cpu().numpy(), want)


def test_index_copy_reads_strided_sources_and_integer_tensors(rng, device):
    x, src = make(rng, (5, 4)), make(rng, (5, 2))
    got = fg.index_copy(on(device, non_contiguous(x)), 1, fg.tensor([3, 0]).to(device), on(device, non_contiguous(src)))
    np.testing.assert_array_equal(got.cpu().numpy(), np_index_copy(x, 1, np.array([3, 0]), src))
    ints = fg.zeros(3, 2, dtype=fg.int64).to(device)
    ints.index_copy_(0, fg.tensor([2]).to(device), fg.tensor([[7, 8]]).to(device))
    assert ints.cpu().tolist() == [[0, 0], [0, 0], [7, 8]]


@pytest.mark.parametrize("shape,dim,idx_shape,src_shape", [((4, 6), 1, (4, 3), (4, 3)), ((5, 3), 0, (2, 3), (2, 3)),
                                                           ((3, 4, 5), 2, (2, 4, 2), (3, 4, 5)),
                                                           ((3, 4, 5), 1, (3, 1, 5), (3, 2, 5)), ((7,), 0, (3,), (4,))])
def test_scatter_matches_numpy(rng, device, shape, dim, idx_shape, src_shape):
    x, src = make(rng, shape), make(rng, src_shape)
    # distinct positions along dim within each line, so the result does not depend on the write order
    idx = np.argsort(rng.random(idx_shape[:dim] + (shape[dim],) + idx_shape[dim + 1:]), axis=dim)
    idx = np.take(idx, np.arange(idx_shape[dim]), axis=dim)
    want = np_scatter(x, dim, idx, src)
    got = fg.scatter(fg.tensor(x).to(device), dim, fg.tensor(idx).to(device), fg.tensor(src).to(device))
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    target = fg.tensor(x).to(device)
    assert target.scatter_(dim, fg.tensor(idx).to(device), fg.tensor(src).to(device)) is target
    np.testing.assert_array_equal(target.cpu().numpy(), want)


def test_scatter_value_and_negative_index(device):
    x = fg.zeros(2, 4).to(device)
    x.scatter_(1, fg.tensor([[0, -1], [2, 1]]).to(device), value=5.0)
    assert x.cpu().tolist() == [[5, 0, 0, 5], [0, 5, 5, 0]]
    y = fg.scatter(fg.ones(2, 4).to(device), 0, fg.tensor([[1, 0, 1, 0]]).to(device), value=-2.0)
    assert y.cpu().tolist() == [[1, -2, 1, -2], [-2, 1, -2, 1]]


@pytest.mark.parametrize("start,length", [(0, 3), (4, 2), (-3, 3), (2, 0), (5, 1)])
def test_narrow_with_a_tensor_start(rng, device, start, length):
    x = make(rng, (3, 6, 2))
    got = fg.tensor(x).to(device).narrow(1, fg.tensor(start).to(device), length)
    want = fg.tensor(x).narrow(1, start % 6, length).numpy()
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    np.testing.assert_array_equal(fg.narrow(fg.tensor(x).to(device), -2, fg.tensor([start]).to(device), length).cpu().numpy(),
                                  want)
    assert fg.tensor(x).narrow(1, start % 6, length).numpy().shape == got.shape  # the int form is unchanged


def test_gradients_against_finite_differences(rng):
    idx = fg.tensor([2, 0])
    gradcheck(lambda x, s: fg.index_copy(x, 1, idx, s) ** 2, make(rng, (3, 4)), make(rng, (3, 2)))
    index = fg.tensor([[1, 3], [0, 2], [2, 1]])
    gradcheck(lambda x, s: fg.scatter(x, 1, index, s).sin(), make(rng, (3, 4)), make(rng, (3, 3)))
    gradcheck(lambda x: fg.scatter(x, 1, index, value=0.5).exp(), make(rng, (3, 4)))
    gradcheck(lambda x: x.narrow(0, fg.tensor(1), 2) * 3, make(rng, (4, 2)))


def test_gradients_by_hand(rng):
    x = fg.tensor(make(rng, (4, 3)), requires_grad=True)
    s = fg.tensor(make(rng, (2, 3)), requires_grad=True)
    w = make(rng, (4, 3))
    (fg.index_copy(x, 0, fg.tensor([3, 1]), s) * fg.tensor(w)).sum().backward()
    expected = w.copy()
    expected[[3, 1]] = 0
    np.testing.assert_allclose(x.grad.numpy(), expected)
    np.testing.assert_allclose(s.grad.numpy(), w[[3, 1]])


def test_errors():
    x = fg.zeros(4, 3)
    with pytest.raises(fg.ShapeError, match=r"index_copy_: source \(2, 2\) must be the input \(4, 3\) with dim 0 of "
                                            r"the index's length \(\(2, 3\)\)"):
        x.index_copy_(0, fg.tensor([0, 1]), fg.ones(2, 2))
    with pytest.raises(fg.ShapeError, match="index_copy: index must be 1-D"):
        fg.index_copy(x, 0, fg.tensor([[0]]), fg.ones(1, 3))
    with pytest.raises(fg.DTypeError, match="index_copy_: index must be int32 or int64, got float32"):
        x.index_copy_(0, fg.tensor([0.0]), fg.ones(1, 3))
    with pytest.raises(fg.DTypeError, match="index_copy_: source is float64, the input float32"):
        x.index_copy_(0, fg.tensor([0]), fg.ones(1, 3, dtype=fg.float64))
    with pytest.raises(fg.IndexOutOfRangeError, match="index_copy_: index 4 is out of range for dimension 0 of size 4"):
        x.index_copy_(0, fg.tensor([4]), fg.ones(1, 3))
    with pytest.raises(fg.IndexOutOfRangeError, match="index_copy_: dim 2 is out of range"):
        x.index_copy_(2, fg.tensor([0]), fg.ones(4, 1))
    with pytest.raises(fg.ShapeError, match=r"scatter_: index \(5, 1\) must have the input's 2 dims and be no larger "
                                            r"than the input \(4, 3\) in every dim except 1"):
        x.scatter_(1, fg.zeros(5, 1, dtype=fg.int64), fg.ones(5, 1))
    with pytest.raises(fg.ShapeError, match=r"scatter: index \(2, 2\) must be no larger than src \(2, 1\)"):
        fg.scatter(x, 1, fg.zeros(2, 2, dtype=fg.int64), fg.ones(2, 1))
    with pytest.raises(fg.IndexOutOfRangeError, match="scatter_: index -4 is out of range for dimension 1 of size 3"):
        x.scatter_(1, fg.tensor([[-4]]), value=1.0)
    with pytest.raises(TypeError, match="scatter_: give exactly one of src"):
        x.scatter_(1, fg.tensor([[0]]))
    with pytest.raises(fg.IndexOutOfRangeError, match="narrow: start 3 with length 2 is out of range for dim 0 of size 4"):
        x.narrow(0, fg.tensor(3), 2)
    with pytest.raises(fg.IndexOutOfRangeError, match="narrow: start -5 with length 1 is out of range"):
        x.narrow(0, fg.tensor(-5), 1)
    with pytest.raises(fg.DTypeError, match="narrow: a tensor start must be a 0-d integer tensor, got float32"):
        x.narrow(0, fg.tensor(1.0), 1)
    with pytest.raises(fg.IndexOutOfRangeError, match="narrow: length 5 is out of range for dim 0 of size 4"):
        x.narrow(0, fg.tensor(0), 5)
    assert np.all(x.numpy() == 0)  # nothing was written by the refused calls


class Ring(fg.nn.Module):
    """Writes each input row into a buffer at a position it keeps on the device, and returns the
    window of the last two rows and the position (a step with device-side state)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("rows", fg.zeros(6, 3))
        self.register_buffer("at", fg.zeros(1, dtype=fg.int64))

    def forward(self, x):
        self.rows.index_copy_(0, self.at, x.reshape(1, 3))
        window = self.rows.narrow(0, (self.at - 1).clamp(0, 4), 2)
        marks = fg.scatter(fg.zeros(1, 6), 1, self.at.reshape(1, 1), value=1.0)
        self.at.add_(1)
        return {"window": window, "marks": marks}


def test_a_compiled_step_writes_its_buffers_at_device_positions():
    eager, compiled = Ring(), Ring()
    xs = [fg.tensor(np.full((3,), i + 1.0, np.float32)) for i in range(5)]
    with fg.no_grad():
        plan = fg.compile(compiled, example_inputs=(xs[0],))
    assert isinstance(plan, fg.ForwardPlan)
    assert compiled.at.tolist() == [0] and np.all(compiled.rows.numpy() == 0)  # compiling wrote nothing
    for x in xs:
        want, got = eager(x), plan(x)
        assert set(got) == {"window", "marks"}
        np.testing.assert_array_equal(got["window"].numpy(), want["window"].numpy())
        np.testing.assert_array_equal(got["marks"].numpy(), want["marks"].numpy())
    np.testing.assert_array_equal(compiled.rows.numpy(), eager.rows.numpy())
    assert compiled.at.tolist() == [5]
    ops = {r["op"] for r in plan.explain().rows}
    assert "index_put_" in ops and "index_select" in ops
