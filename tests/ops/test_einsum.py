"""fg.einsum against np.einsum: matrix and batched products, traces, diagonals, outer products,
ellipses with broadcasting, implicit outputs, three operands, size-0 and size-1 dims,
non-contiguous operands, inf/NaN, float64 finite differences, a compiled step, and the
documented errors."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)]),
    ("i,i->", [(7,), (7,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(3, 5)]),
    ("ij->", [(3, 5)]),
    ("ij->j", [(3, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("iij->ji", [(3, 3, 2)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("ba,ca", [(2, 3), (4, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...i,...i->...", [(3, 1, 4), (2, 4)]),
    ("i...->...", [(3, 2, 5)]),
    ("ijk,ikl,ilm->ijm", [(2, 3, 4), (2, 4, 5), (2, 5, 3)]),
    ("ab,bc,cd,de->ae", [(2, 3), (3, 4), (4, 5), (5, 2)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,kj->", [(3, 4), (5, 4)]),
    ("bi,bj,bk->bijk", [(2, 3), (2, 2), (2, 4)]),
    ("ij,jk->ik", [(0, 4), (4, 5)]),
    ("ij,jk->ik", [(3, 0), (0, 5)]),
    ("i,i->", [(0,), (0,)]),
    ("ij,jk->ik", [(1, 1), (1, 1)]),
    ("ijk->", [(1, 0, 2)]),
]


@pytest.mark.parametrize("equation, shapes", CASES, ids=[c[0] + str(i) for i, c in enumerate(CASES)])
def test_matches_numpy(equation, shapes, device, rng):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = fg.einsum(equation, *[fg.tensor(a, device=device) for a in arrays])
    expected = np.einsum(equation, *arrays)
    assert got.device == device and got.shape == expected.shape
    fg.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_broadcast_dims_missing_from_the_output_are_summed_as_in_pytorch(rng):
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 5, 4))
    got = fg.einsum("ij...,jk...->ik", fg.tensor(a), fg.tensor(b))  # NumPy refuses this one
    fg.testing.assert_close(got, np.einsum("ij...,jk...->ik...", a, b).sum(-1), rtol=1e-12, atol=1e-12)


def test_operands_as_a_list_non_contiguous_and_mixed_dtypes(rng):
    a = rng.standard_normal((5, 3))
    b = rng.standard_normal((5, 4)).astype(np.float32)
    ta = fg.tensor(a).t()  # (3, 5), a transposed view
    assert not ta.is_contiguous()
    got = fg.einsum("ij,jk->ik", [ta, fg.tensor(b)])
    assert got.dtype == fg.float64
    fg.testing.assert_close(got, a.T @ b, rtol=1e-12, atol=1e-12)


def test_inf_and_nan_stay_where_numpy_puts_them():
    a = np.array([[1.0, np.inf], [np.nan, 2.0]])
    np.testing.assert_array_equal(fg.einsum("ii->i", fg.tensor(a)).numpy(), [1.0, 2.0])  # off-diagonal ignored
    np.testing.assert_array_equal(fg.einsum("ij->j", fg.tensor(a)).numpy(), np.einsum("ij->j", a))


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 2)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]), ("ii->i", [(3, 3)]),
    ("...i,...i->...", [(2, 1, 3), (4, 3)]), ("ijk,ikl,ilm->ijm", [(2, 2, 3), (2, 3, 2), (2, 2, 2)]),
    ("i,j->ij", [(3,), (2,)]), ("iij->j", [(2, 2, 3)]),
])
def test_gradients_by_finite_differences(equation, shapes, rng):
    gradcheck(lambda *xs: fg.einsum(equation, *xs), *[rng.standard_normal(s) for s in shapes])


def test_compiles_into_a_step(rng):
    w = fg.nn.Parameter(fg.tensor(rng.standard_normal((4, 3)).astype(np.float32)))
    x = fg.tensor(rng.standard_normal((2, 5, 4)).astype(np.float32))

    def loss(x):
        return fg.einsum("btd,de->bte", x, w).square().mean()

    step = fg.compile(loss, example_inputs=(x,))
    assert step(x).item() == pytest.approx(loss(x).item(), rel=1e-6)


def test_errors_name_einsum_the_equation_and_the_sizes():
    a, b = fg.ones(2, 3), fg.ones(4, 5)
    with pytest.raises(fg.ShapeError, match=r"einsum: subscript 'j' has size 3 in an earlier operand and 4 in "
                                            r"operand 1 of 'ij,jk->ik'"):
        fg.einsum("ij,jk->ik", a, b)
    with pytest.raises(fg.ShapeError, match=r"einsum: operand 0 has 2 dims \(2, 3\) but its subscripts 'ijk' in "
                                            r"'ijk->i' name 3"):
        fg.einsum("ijk->i", a)
    with pytest.raises(fg.ShapeError, match=r"einsum: operand 0 has 2 dims \(2, 3\) but its subscripts 'i'"):
        fg.einsum("i->i", a)
    with pytest.raises(fg.ShapeError, match=r"einsum: a broadcast dim of '...' has size 2 in an earlier operand "
                                            r"and 4 in operand 1"):
        fg.einsum("...i,...i->...", fg.ones(2, 3), fg.ones(4, 3))
    with pytest.raises(fg.InvalidArgumentError, match=r"einsum: 'ij,jk->ik' names 2 operands, got 1 tensors"):
        fg.einsum("ij,jk->ik", a)
    with pytest.raises(fg.InvalidArgumentError, match=r"einsum: the output of 'ij->ii' names 'i' twice"):
        fg.einsum("ij->ii", a)
    with pytest.raises(fg.InvalidArgumentError, match=r"einsum: the output of 'ij->k' names 'k', which no operand"):
        fg.einsum("ij->k", a)
    with pytest.raises(fg.InvalidArgumentError, match=r"einsum: operand 0's subscripts 'i1' of 'i1->i' has '1': "
                                                      r"subscripts are letters"):
        fg.einsum("i1->i", a)
    with pytest.raises(fg.InvalidArgumentError, match=r"einsum: operand 0's subscripts 'i..j' .* stray '.'"):
        fg.einsum("i..j->i", a)
    with pytest.raises(fg.InvalidArgumentError, match=r"einsum: no operands"):
        fg.einsum("ij->i")
    with pytest.raises(TypeError, match=r"einsum: operand 1 must be an fg.Tensor, got ndarray"):
        fg.einsum("ij,jk->ik", a, np.ones((3, 2)))
    with pytest.raises(TypeError, match=r"einsum: the equation must be a str, got int"):
        fg.einsum(3, a)
