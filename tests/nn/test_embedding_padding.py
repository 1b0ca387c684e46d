"""Embedding's padding_idx (PyTorch's): the row starts at zero, positions holding it give the row's
values but send it no gradient, eagerly and in compiled steps; negative indices wrap; errors."""
import copy
import pickle

import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from conftest import assert_compiled_trains_like_eager


def test_the_padding_row_starts_at_zero_and_gets_no_gradient(device):
    emb = fg.nn.Embedding(6, 4, padding_idx=2).to(device)
    assert emb.padding_idx == 2 and emb.num_embeddings == 6 and emb.embedding_dim == 4
    w = emb.weight.detach().cpu().numpy()
    assert not w[2].any() and w[[0, 1, 3, 4, 5]].all()
    index = np.array([[2, 0, 2], [5, 2, 0]])
    out = emb(fg.tensor(index, device=device))
    np.testing.assert_array_equal(out.detach().cpu().numpy(), w[index])
    (out * fg.arange(1.0, 5.0, device=device)).sum().backward()
    grad = emb.weight.grad.cpu().numpy()
    counts = np.bincount(index.ravel(), minlength=6).astype(np.float32)
    counts[2] = 0
    np.testing.assert_array_equal(grad, counts[:, None] * np.arange(1.0, 5.0, dtype=np.float32))


def test_a_changed_padding_row_is_read_but_never_trained(device):
    """As in PyTorch: the row's values are used as they are; the optimizer never moves it."""
    emb = fg.nn.Embedding(4, 3, padding_idx=-1).to(device)  # wraps to 3
    assert emb.padding_idx == 3
    with fg.no_grad():
        emb.weight[3] = fg.full((3,), 7.0, device=device)
    row1 = emb.weight[1].detach().cpu().numpy().copy()
    opt = fg.optim.SGD(emb.parameters(), lr=0.1)
    index = fg.tensor([[3, 1], [0, 3]], device=device)
    for _ in range(3):
        opt.zero_grad()
        y = emb(index)
        assert (y[0, 0].cpu().numpy() == 7.0).all()
        y.square().sum().backward()
        opt.step()
    np.testing.assert_array_equal(emb.weight[3].detach().cpu().numpy(), [7.0, 7.0, 7.0])
    np.testing.assert_allclose(emb.weight[1].detach().cpu().numpy(), row1 * 0.8 ** 3, rtol=1e-6)  # trained


def test_functional_form_and_int32_indices(device, rng):
    w = fg.tensor(rng.standard_normal((5, 2)), dtype=fg.float64, device=device, requires_grad=True)
    index = fg.tensor(np.array([4, 1, 4, 0], np.int32), device=device)
    out = F.embedding(index, w, padding_idx=4)
    np.testing.assert_array_equal(out.detach().cpu().numpy(), w.detach().cpu().numpy()[[4, 1, 4, 0]])
    out.sum().backward()
    np.testing.assert_array_equal(w.grad.cpu().numpy(), [[1, 1], [1, 1], [0, 0], [0, 0], [0, 0]])
    assert F.embedding(index, w).shape == (4, 2)  # no padding_idx: every row trains


def test_compiled_step_matches_eager():
    def build():
        fg.manual_seed(0)
        model = fg.nn.Sequential(fg.nn.Embedding(7, 4, padding_idx=0), fg.nn.Flatten(), fg.nn.Linear(12, 3))
        return model, fg.optim.SGD(model.parameters(), lr=0.1)

    xs = [fg.tensor(np.array([[0, 3, 5], [2, 0, 0]])), fg.tensor(np.array([[6, 0, 1], [0, 4, 4]]))]
    ys = [fg.tensor(np.array([0, 2])), fg.tensor(np.array([1, 1]))]
    model = assert_compiled_trains_like_eager(build, F.cross_entropy, list(zip(xs, ys)) * 2)
    assert not model[0].weight[0].detach().numpy().any()  # the padding row stayed zero


def test_pickle_and_deepcopy_keep_padding_idx():
    emb = fg.nn.Embedding(5, 3, padding_idx=1)
    for copied in (pickle.loads(pickle.dumps(emb)), copy.deepcopy(emb)):
        assert copied.padding_idx == 1 and repr(copied).startswith("Embedding(5, 3, padding_idx=1)")
        np.testing.assert_array_equal(copied.weight.detach().numpy(), emb.weight.detach().numpy())
    assert fg.nn.Embedding(5, 3).padding_idx is None


def test_out_of_range_padding_idx_raises_naming_the_sizes():
    with pytest.raises(fg.IndexOutOfRangeError, match=r"Embedding: padding_idx 5 is out of range for 5 embeddings "
                                                      r"\(expected -5 <= padding_idx < 5\)"):
        fg.nn.Embedding(5, 3, padding_idx=5)
    with pytest.raises(fg.IndexOutOfRangeError, match=r"embedding: padding_idx -4 is out of range for 3 embeddings"):
        F.embedding(fg.tensor([0]), fg.ones(3, 2), padding_idx=-4)
