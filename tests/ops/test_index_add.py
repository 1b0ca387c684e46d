"""index_add (index_select's and embedding's backward) against np.add.at, and the index check
that runs on the device: immediate on the CPU, raised at the next host sync on CUDA."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous, on, run_isolated

F = fg.nn.functional


def np_index_add(x, dim, idx, src):
    out = np.moveaxis(x.copy(), dim, 0)
    np.add.at(out, idx, np.moveaxis(src, dim, 0))
    return np.moveaxis(out, 0, dim)


@pytest.mark.parametrize("shape,dim,n", [((7, 5), 0, 11), ((3, 6, 4), 1, 9), ((4, 5), 1, 1), ((5, 3), 0, 0),
                                         ((1, 1), 0, 3), ((0, 4), 1, 2), ((6,), 0, 13)])
def test_index_add_matches_np_add_at(rng, device, shape, dim, n):
    x = make(rng, shape)
    idx = rng.integers(-shape[dim], shape[dim], size=n) if shape[dim] else np.zeros(0, np.int64)
    src_shape = list(shape)
    src_shape[dim] = n
    src = make(rng, tuple(src_shape))
    got = fg.index_add(fg.tensor(x).to(device), dim, fg.tensor(idx).to(device), fg.tensor(src).to(device))
    np.testing.assert_allclose(got.cpu().numpy(), np_index_add(x, dim, idx % max(shape[dim], 1), src),
                               rtol=1e-12, atol=1e-12)


def test_index_add_dtypes_and_layouts(rng, device):
    idx = np.array([3, 0, 3, 3, 1], np.int32)
    x = make(rng, (4, 6), np.int64, -5, 5)
    src = make(rng, (5, 6), np.int64, -5, 5)
    got = fg.index_add(fg.tensor(x).to(device), 0, fg.tensor(idx).to(device), fg.tensor(src).to(device))
    np.testing.assert_array_equal(got.cpu().numpy(), np_index_add(x, 0, idx, src))
    xf, sf = make(rng, (6, 4)), make(rng, (6, 5))
    got = fg.index_add(on(device, non_contiguous(xf)), 1, fg.tensor(idx).to(device), on(device, non_contiguous(sf)))
    np.testing.assert_allclose(got.cpu().numpy(), np_index_add(xf, 1, idx, sf), rtol=1e-12)
    half = fg.index_add(fg.zeros(4, 2, dtype=fg.float16).to(device), 0, fg.tensor(idx).to(device),
                        fg.ones(5, 2, dtype=fg.float16).to(device))
    np.testing.assert_array_equal(half.cpu().float().numpy()[:, 0], [1, 1, 0, 3])


def test_index_add_is_deterministic_and_sequential(device):
    """Each row sums its sources in index order: the bits of a sequential float32 loop."""
    rng = np.random.default_rng(0)
    src = rng.normal(size=(4000, 3)).astype(np.float32) * 1000
    idx = rng.integers(0, 5, size=4000)
    expected = np.zeros((5, 3), np.float32)
    for i in range(4000):
        expected[idx[i]] += src[i]
    got = fg.index_add(fg.zeros(5, 3).to(device), 0, fg.tensor(idx).to(device), fg.tensor(src).to(device))
    np.testing.assert_array_equal(got.cpu().numpy(), expected)


def test_index_add_gradients(rng):
    idx = np.array([2, 0, 2, 1, 2])
    gradcheck(lambda x, s: fg.index_add(x, 0, fg.tensor(idx), s) ** 2, make(rng, (3, 4)), make(rng, (5, 4)))
    gradcheck(lambda x, s: fg.index_add(x, 1, fg.tensor(idx), s).sin(), make(rng, (2, 3)), make(rng, (2, 5)))


def test_index_select_and_embedding_backward_use_index_add(rng, device):
    weight = fg.tensor(make(rng, (10, 4)), requires_grad=True)
    tokens = np.array([[1, 9, 1], [0, 3, -1]])
    out = F.embedding(fg.tensor(tokens).to(device), weight.to(device))
    upstream = make(rng, (2, 3, 4))
    (out * fg.tensor(upstream).to(device)).sum().backward()
    expected = np.zeros((10, 4))
    np.add.at(expected, tokens.reshape(-1) % 10, upstream.reshape(-1, 4))
    np.testing.assert_allclose(weight.grad.numpy(), expected, rtol=1e-12)
    gradcheck(lambda w: F.embedding(fg.tensor(tokens), w) ** 2, make(rng, (10, 4)))
    gradcheck(lambda x: fg.index_select(x, 1, fg.tensor([2, 2, 0])) ** 2, make(rng, (3, 4, 2)))


def test_index_add_errors():
    x = fg.zeros(4, 3)
    with pytest.raises(fg.ShapeError, match=r"index_add: src \(2, 2\) must be the input \(4, 3\) with dim 0 of the "
                                            r"index's size \(\(2, 3\)\)"):
        fg.index_add(x, 0, fg.tensor([0, 1]), fg.ones(2, 2))
    with pytest.raises(fg.ShapeError, match="index_add: index must be 1-D"):
        fg.index_add(x, 0, fg.tensor([[0]]), fg.ones(1, 3))
    with pytest.raises(fg.DTypeError, match="index_add: index must be int32 or int64, got float32"):
        fg.index_add(x, 0, fg.tensor([0.0]), fg.ones(1, 3))
    with pytest.raises(fg.IndexOutOfRangeError, match="index_add: index 4 is out of range for dimension 0 of size 4"):
        fg.index_add(x, 0, fg.tensor([4]), fg.ones(1, 3))


def test_bad_index_raises_on_cpu_at_once_and_on_cuda_at_the_next_sync(device):
    message = "index_select: index 7 is out of range for dimension 0 of size 4"
    if device == "cpu":
        with pytest.raises(fg.IndexOutOfRangeError, match=message):
            fg.index_select(fg.ones(4, 3), 0, fg.tensor([0, 7]))
        with pytest.raises(fg.IndexOutOfRangeError, match="cross_entropy: .*5.* out of range"):
            F.cross_entropy(fg.zeros(2, 3), fg.tensor([0, 5]))
        return
    # In a fresh interpreter: a device error record the host misreads is a crash, not a raise.
    run_isolated(f"""
        import re
        F = fg.nn.functional
        def raises_at_sync(pattern, sync):
            try:
                sync()
            except fg.IndexOutOfRangeError as e:
                assert re.search(pattern, str(e)), str(e)
            else:
                raise AssertionError("no IndexOutOfRangeError for " + pattern)
        x = fg.ones(4, 3).to("cuda")
        y = fg.index_select(x, 0, fg.tensor([0, 7]).to("cuda"))  # no host sync inside the op
        raises_at_sync({message!r}, y.cpu)
        fg.index_select(x, 0, fg.tensor([-9]).to("cuda"))
        raises_at_sync("index -9 is out of range", fg.cuda.synchronize)
        ok = fg.index_select(x, 0, fg.tensor([3]).to("cuda"))  # the record was cleared
        np.testing.assert_array_equal(ok.cpu().numpy(), np.ones((1, 3), np.float32))
        F.cross_entropy(fg.zeros(2, 3).to("cuda"), fg.tensor([0, 5]).to("cuda"))
        raises_at_sync("cross_entropy: index 5 is out of range for dimension 1 of size 3", fg.cuda.synchronize)
        fg.one_hot(fg.tensor([1, 4]).to("cuda"), 3)
        raises_at_sync("one_hot: index 4 is out of range for dimension 1 of size 3", fg.cuda.synchronize)
        print("ok")
    """)
