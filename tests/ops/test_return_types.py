"""max/min with a dim, sort, topk and kthvalue return named tuples (values, indices), as in
PyTorch's torch.return_types; max/min without a dim or with a tuple of dims return values."""
import copy
import pickle

import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous, on


@pytest.mark.parametrize("name,np_values,np_index", [("max", np.max, np.argmax), ("min", np.min, np.argmin)])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_max_min_dim_return_values_and_indices(rng, device, name, np_values, np_index, dim):
    a = make(rng, (45, 65))
    for t in (fg.tensor(a), non_contiguous(a)):
        out = getattr(fg, name)(on(device, t), dim=dim)
        assert type(out).__name__ == name and out._fields == ("values", "indices")
        v, i = out  # unpacks like PyTorch, not row by row
        np.testing.assert_array_equal(v.cpu().numpy(), np_values(a, axis=dim))
        np.testing.assert_array_equal(i.cpu().numpy(), np_index(a, axis=dim))
        assert out.values is out[0] and out.indices is out[1] and i.dtype == fg.int64
    method = getattr(on(device, fg.tensor(a)), name)(dim, keepdim=True)
    assert method.values.shape == method.indices.shape == tuple(1 if d == dim % 2 else s for d, s in enumerate(a.shape))


def test_max_without_int_dim_stays_a_tensor(rng):
    a = make(rng, (3, 4, 5))
    t = fg.tensor(a)
    assert isinstance(fg.max(t), fg.Tensor) and isinstance(t.min(), fg.Tensor)
    np.testing.assert_array_equal(fg.max(t, dim=(0, 2)).numpy(), a.max(axis=(0, 2)))
    np.testing.assert_array_equal(t.min(dim=(1,), keepdim=True).numpy(), a.min(axis=1, keepdims=True))
    np.testing.assert_array_equal(t.max(fg.tensor(-a)).numpy(), np.maximum(a, -a))  # torch.max(a, b)
    np.testing.assert_array_equal(fg.min(t, fg.zeros(5, dtype=fg.float64)).numpy(), np.minimum(a, 0))


def test_max_dim_gradient_goes_to_the_chosen_index():
    x = fg.tensor([[1.0, 3.0, 3.0], [5.0, 2.0, 5.0]], requires_grad=True)
    v, i = x.max(dim=1)
    (v * fg.tensor([1.0, 10.0])).sum().backward()
    np.testing.assert_array_equal(i.numpy(), [1, 0])  # the first maximum, like NumPy
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [10, 0, 0]])
    gradcheck(lambda t: fg.max(t, dim=0).values * 1.5 + fg.min(t, dim=-1, keepdim=True).values.sum(), make(
        np.random.default_rng(3), (4, 5)))


def test_max_dim_edge_cases():
    nan = fg.tensor([[1.0, np.nan, 3.0]])
    v, i = nan.max(1)
    assert np.isnan(v.item()) and i.item() == 1  # NaN wins, as in NumPy and PyTorch
    s = fg.tensor(2.5)
    v, i = s.max(0)
    assert v.item() == 2.5 and i.item() == 0 and i.shape == ()
    v, i = fg.zeros(0, 3).max(dim=1)
    assert v.shape == (0,) and i.shape == (0,)
    with pytest.raises(fg.InvalidArgumentError, match="argmax: cannot reduce over dim 0 of size 0"):
        fg.zeros(0, 3).max(dim=0)
    with pytest.raises(fg.IndexOutOfRangeError, match="max"):
        s.max(1)
    ints = fg.tensor(np.array([[3, 9, 1]], dtype=np.int16)).max(1)
    assert ints.values.dtype == fg.int16 and ints.values.item() == 9 and ints.indices.item() == 1


@pytest.mark.parametrize("name", ["sort", "topk"])
def test_sort_and_topk_are_named_tuples(rng, name):
    a = make(rng, (6, 7))
    t = fg.tensor(a)
    out = t.sort(dim=1) if name == "sort" else fg.topk(t, 3, dim=1, largest=False)
    assert type(out).__name__ == name and type(out).__module__ == "flowgrad.return_types"
    expected = np.sort(a, axis=1)[:, : 7 if name == "sort" else 3]
    np.testing.assert_array_equal(out.values.numpy(), expected)
    np.testing.assert_array_equal(np.take_along_axis(a, out.indices.numpy(), 1), expected)
    assert "values=" in repr(out) and "indices=" in repr(out)


def test_kthvalue_matches_numpy(rng, device):
    a = make(rng, (5, 9))
    for k, dim in ((1, 1), (4, 1), (9, -1), (3, 0)):
        v, i = fg.kthvalue(on(device, non_contiguous(a)), k, dim)
        expected = np.sort(a, axis=dim).take(k - 1, axis=dim)
        np.testing.assert_array_equal(v.cpu().numpy(), expected)
        np.testing.assert_array_equal(np.take_along_axis(a, np.expand_dims(i.cpu().numpy(), dim), dim).squeeze(dim),
                                      expected)
    kept = fg.tensor(a).kthvalue(2, dim=0, keepdim=True)
    assert type(kept).__name__ == "kthvalue" and kept.values.shape == (1, 9) and kept.indices.shape == (1, 9)
    gradcheck(lambda x: fg.kthvalue(x, 2, 1).values * 2.0, make(rng, (3, 4)))
    with pytest.raises(fg.IndexOutOfRangeError, match=r"kthvalue: k = 10 is out of range for dim 1 of size 9"):
        fg.kthvalue(fg.tensor(a), 10, 1)
    with pytest.raises(fg.IndexOutOfRangeError, match="k counts from 1"):
        fg.kthvalue(fg.tensor(a), 0)


def test_return_types_pickle_and_copy():
    out = fg.tensor([[1.0, 4.0, 2.0]]).max(dim=1)
    assert pickle.loads(pickle.dumps(type(out))) is type(out)  # importable as flowgrad.return_types.max
    dup = copy.copy(out)
    assert type(dup) is type(out) and dup.values is out.values
    assert fg.return_types.max is type(out)
