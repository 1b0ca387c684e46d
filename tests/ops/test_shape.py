"""Shape and view ops (view, permute, expand, slice) and copies (contiguous, cat, flip, pad,
slice_backward), plus the composites built on them and __getitem__."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous


def f64(a):
    return fg.tensor(a, dtype=fg.float64)


def test_view_shares_storage_and_reshape_copies_when_needed(rng):
    a = make(rng, (4, 6))
    t = f64(a)
    v = t.view(3, 8)
    assert v.data_ptr() == t.data_ptr()
    fg.testing.assert_close(v, a.reshape(3, 8))
    fg.testing.assert_close(t.reshape(-1, 4), a.reshape(-1, 4))
    nc = non_contiguous(a)
    with pytest.raises(fg.ShapeError, match="view: shape .* is not compatible with the strides"):
        nc.view(24)
    fg.testing.assert_close(nc.reshape(24), a.reshape(24))  # reshape copies instead
    with pytest.raises(fg.ShapeError, match="reshape: shape \\(5, 5\\) is invalid for a tensor of 24"):
        t.reshape(5, 5)
    with pytest.raises(fg.ShapeError, match="only one dimension can be -1"):
        t.reshape(-1, -1)


def test_permute_transpose_t_and_T(rng):
    a = make(rng, (2, 3, 4))
    t = f64(a)
    fg.testing.assert_close(t.permute(2, 0, 1), a.transpose(2, 0, 1))
    fg.testing.assert_close(fg.transpose(t, 0, 2), np.swapaxes(a, 0, 2))
    fg.testing.assert_close(f64(a[0]).t(), a[0].T)
    fg.testing.assert_close(t.T, a.T)
    with pytest.raises(fg.ShapeError, match="permute: dim 0 repeats"):
        t.permute(0, 0, 1)
    with pytest.raises(fg.ShapeError, match="t: expects a tensor of at most 2 dims"):
        t.t()


def test_squeeze_unsqueeze_flatten_expand(rng):
    a = make(rng, (3, 1, 4, 1))
    t = f64(a)
    assert t.squeeze().shape == (3, 4)
    assert t.squeeze(1).shape == (3, 4, 1)
    assert t.unsqueeze(0).shape == (1, 3, 1, 4, 1)
    assert t.unsqueeze(-1).shape == (3, 1, 4, 1, 1)
    fg.testing.assert_close(t.flatten(), a.reshape(-1))
    fg.testing.assert_close(t.flatten(1, 2), a.reshape(3, 4, 1))
    e = t.expand(2, 3, 5, 4, 2)
    fg.testing.assert_close(e, np.broadcast_to(a, (2, 3, 5, 4, 2)))
    fg.testing.assert_close(fg.broadcast_to(t, (3, 2, 4, 1)), np.broadcast_to(a, (3, 2, 4, 1)))
    assert t.expand(-1, 2, -1, -1).shape == (3, 2, 4, 1)
    with pytest.raises(fg.ShapeError, match="expand: cannot expand"):
        t.expand(3, 1, 5, 1)


def test_slices_narrow_split_chunk(rng):
    a = make(rng, (7, 9))
    t = f64(a)
    fg.testing.assert_close(t[1:6:2, ::3], a[1:6:2, ::3])
    fg.testing.assert_close(t[-3:, :-2], a[-3:, :-2])
    fg.testing.assert_close(t[10:], a[10:])
    fg.testing.assert_close(t.narrow(1, 2, 4), a[:, 2:6])
    for got, want in zip(fg.split(t, 3, dim=1), np.split(a, [3, 6], axis=1)):
        fg.testing.assert_close(got, want)
    for got, want in zip(t.split([2, 5]), np.split(a, [2])):
        fg.testing.assert_close(got, want)
    assert [c.shape[0] for c in fg.chunk(t, 3)] == [3, 3, 1]
    with pytest.raises(fg.ShapeError, match="split: sizes .* sum to 8 but dim 0 has size 7"):
        t.split([4, 4])
    with pytest.raises(fg.IndexOutOfRangeError, match="narrow: start 5 and length 5 exceed dim 1"):
        t.narrow(1, 5, 5)


def test_slice_backward_places_gradient(rng):
    x = fg.tensor(make(rng, (5, 6)), dtype=fg.float64, requires_grad=True)
    x[1:5:2, 2:].sum().backward()
    expected = np.zeros((5, 6))
    expected[1:5:2, 2:] = 1
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    gradcheck(lambda v: v[:4:2, 1:4] * v[1:, :][::2, 2:5], make(rng, (5, 6)))
    # second order through slice_backward
    y = fg.tensor(make(rng, (4,)), dtype=fg.float64, requires_grad=True)
    (g,) = fg.autograd.grad((y[1:3] ** 2).sum(), y, create_graph=True)
    (gg,) = fg.autograd.grad(g.sum(), y)
    np.testing.assert_array_equal(gg.numpy(), [0, 2, 2, 0])


def test_contiguous_copies_only_when_needed(rng):
    a = make(rng, (3, 4))
    t = f64(a)
    assert t.contiguous().data_ptr() == t.data_ptr()
    nc = non_contiguous(a)
    c = nc.contiguous()
    assert c.is_contiguous() and c.data_ptr() != nc.data_ptr()
    fg.testing.assert_close(c, a)
    gradcheck(lambda v: v.t().contiguous() * 2, a)


def test_cat_stack(rng):
    a, b = make(rng, (2, 3)), make(rng, (4, 3))
    fg.testing.assert_close(fg.cat([f64(a), f64(b)]), np.concatenate([a, b]))
    fg.testing.assert_close(fg.cat([f64(a.T), f64(b.T)], dim=1), np.concatenate([a.T, b.T], axis=1))
    fg.testing.assert_close(fg.cat([f64(a), fg.ones(0, 3, dtype=fg.float64)]), a)
    fg.testing.assert_close(fg.stack([f64(a), f64(a)], dim=1), np.stack([a, a], axis=1))
    assert fg.cat([fg.ones(2, dtype=fg.int32), fg.ones(1)]).dtype == fg.float64
    gradcheck(lambda x, y: fg.cat([x, y, x], dim=0) * 3, a, b)
    gradcheck(lambda x, y: fg.stack([x, y], dim=-1), a, a * 2)
    with pytest.raises(fg.ShapeError, match="cat: tensor 0 has shape \\(2, 3\\) but tensor 1 has shape \\(2, 4\\)"):
        fg.cat([fg.ones(2, 3), fg.ones(2, 4)])
    with pytest.raises(fg.ShapeError, match="stack: tensor 0 has shape"):
        fg.stack([fg.ones(2), fg.ones(3)])


def test_flip_pad_repeat(rng):
    a = make(rng, (3, 4, 5))
    t = f64(a)
    fg.testing.assert_close(t.flip([0, 2]), np.flip(a, (0, 2)))
    fg.testing.assert_close(non_contiguous(a).flip(-1), np.flip(a, -1))
    fg.testing.assert_close(fg.pad(t, (1, 2)), np.pad(a, ((0, 0), (0, 0), (1, 2))))
    fg.testing.assert_close(fg.pad(t, (0, 1, 2, 0), value=-1.0), np.pad(a, ((0, 0), (2, 0), (0, 1)), constant_values=-1))
    fg.testing.assert_close(t[0].repeat(2, 3), np.tile(a[0], (2, 3)))
    fg.testing.assert_close(t[0, 0].repeat(2, 1, 2), np.tile(a[0, 0], (2, 1, 2)))
    gradcheck(lambda x: x.flip([1]) * x, a)
    gradcheck(lambda x: fg.pad(x, (1, 1, 0, 2), value=3.0) ** 2, a)
    gradcheck(lambda x: x.repeat(2, 1, 1), a)
    with pytest.raises(fg.InvalidArgumentError, match="pad: negative padding"):
        fg.pad(t, (-1, 0))


@pytest.mark.parametrize("op", ["view", "permute", "expand"])
def test_view_gradchecks(rng, op):
    a = make(rng, (2, 3, 1))
    fn = {"view": lambda x: x.view(3, 2) * x.reshape(3, 2),
          "permute": lambda x: x.permute(2, 0, 1) ** 2,
          "expand": lambda x: x.expand(4, 2, 3, 5) * 1.5}[op]
    gradcheck(fn, a)


def test_getitem_basic_and_advanced(rng):
    a = make(rng, (4, 5, 6))
    t = f64(a)
    fg.testing.assert_close(t[1], a[1])
    fg.testing.assert_close(t[-1, 2], a[-1, 2])
    fg.testing.assert_close(t[..., 3], a[..., 3])
    fg.testing.assert_close(t[None, 1:3, ..., None], a[None, 1:3, ..., None])
    idx = np.array([[3, 0], [1, 1]])
    fg.testing.assert_close(t[:, fg.tensor(idx)], a[:, idx])
    fg.testing.assert_close(t[[0, 2]], a[[0, 2]])
    mask = a[:, :, 0] > 0
    fg.testing.assert_close(t[fg.tensor(mask)], a[mask])
    fg.testing.assert_close(t[t > 0.5], a[a > 0.5])
    assert t[fg.tensor(2)].shape == (5, 6)
    gradcheck(lambda x: x[1:, fg.tensor([0, 0, 2])] * 2, make(rng, (3, 4)))
    with pytest.raises(fg.IndexOutOfRangeError, match="index 4 is out of range for dim 0 of size 4"):
        t[4]
    with pytest.raises(fg.IndexOutOfRangeError, match="too many indices"):
        t[0, 0, 0, 0]
    with pytest.raises(fg.IndexOutOfRangeError, match="index_select: index 9 is out of range"):
        t[fg.tensor([9])]


# A 0-d tensor has no dim to index: shape ops raise instead of reading past the (empty) shape.
@pytest.mark.parametrize("call", [
    lambda s: s.size(0), lambda s: s.size(-1), lambda s: fg.split(s, 1), lambda s: s.split([1]),
    lambda s: s.chunk(2), lambda s: s.narrow(0, 0, 1), lambda s: s.narrow(-1, 0, 1),
    lambda s: fg.cat([s, s], 0), lambda s: s.index_select(0, fg.tensor([0])), lambda s: s.permute(0),
], ids=["size", "size-1", "split", "split-list", "chunk", "narrow", "narrow-1", "cat", "index_select", "permute"])
def test_0d_shape_ops_raise(call):
    with pytest.raises((fg.IndexOutOfRangeError, fg.ShapeError), match="0-d|zero-dimensional|at least one dim|dims but"):
        call(fg.tensor(1.0))


def test_0d_ops_that_treat_a_scalar_as_one_element():
    s = fg.tensor(3.0)
    for d in (0, -1):  # like PyTorch: a scalar's only "dim"
        assert s.transpose(d, d).item() == 3.0 and s.transpose(d, d).shape == ()
        assert s.squeeze(d).shape == () and s.flip([d]).item() == 3.0
        assert s.sum(d).item() == 3.0 and fg.nn.functional.softmax(s, d).item() == 1.0
        values, indices = s.topk(1, d)
        assert values.item() == 3.0 and indices.item() == 0 and values.shape == ()
    with pytest.raises(fg.IndexOutOfRangeError, match="transpose: dim 1 is out of range"):
        s.transpose(0, 1)
    with pytest.raises(fg.IndexOutOfRangeError, match="topk: k = 2 is out of range for a 0-d tensor"):
        s.topk(2)


def test_split_and_chunk_of_an_empty_dim_give_one_empty_piece():
    for parts in (fg.zeros(0, 3).split(2), fg.zeros(0, 3).chunk(3)):  # as PyTorch
        assert len(parts) == 1 and parts[0].shape == (0, 3)
