"""Python-composed nn pieces: leaky_relu/elu/mish/Softplus(beta, threshold), normalize,
cosine_similarity, kl_div against NumPy formulas (and finite gradients at extreme inputs);
ModuleDict and ParameterList registering their entries; the documented errors."""
import copy
import pickle

import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from conftest import gradcheck

X = np.array([-1e4, -30.0, -2.0, -0.5, 0.0, 0.5, 3.0, 30.0, 1e4])


def np_softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


@pytest.mark.parametrize("make, reference", [
    (lambda: fg.nn.LeakyReLU(0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    (lambda: fg.nn.ELU(1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(np.minimum(x, 0)))),
    (lambda: fg.nn.Mish(), lambda x: x * np.tanh(np_softplus(x))),
    (lambda: fg.nn.Softplus(), np_softplus),
    (lambda: fg.nn.Softplus(beta=2.0, threshold=5.0), lambda x: np.where(2 * x > 5, x, np_softplus(2 * x) / 2)),
])
def test_activation_modules_match_numpy_with_finite_gradients(make, reference, device):
    m = make()
    x = fg.tensor(X, device=device, requires_grad=True)
    y = m(x)
    np.testing.assert_allclose(y.detach().cpu().numpy(), reference(X), rtol=1e-12, atol=1e-12)
    y.sum().backward()
    assert np.isfinite(x.grad.cpu().numpy()).all()
    gradcheck(lambda t: m(t), np.array([-2.0, -0.3, 0.4, 1.7, 3.1]))  # off Softplus(2, 5)'s switch at 2.5
    assert type(m).__name__ in repr(m)


def test_functional_leaky_relu_and_elu_defaults():
    x = fg.tensor(X)
    np.testing.assert_allclose(F.leaky_relu(x).numpy(), np.where(X > 0, X, 0.01 * X))
    np.testing.assert_allclose(F.elu(x).numpy(), np.where(X > 0, X, np.expm1(np.minimum(X, 0))))


def test_normalize_and_cosine_similarity(device, rng):
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    a[2] = 0  # a zero row: divided by eps, not NaN
    ta, tb = fg.tensor(a, device=device), fg.tensor(b, device=device)
    n = np.linalg.norm(a, axis=1, keepdims=True)
    np.testing.assert_allclose(F.normalize(ta).cpu().numpy(), a / np.maximum(n, 1e-12), rtol=1e-12)
    np.testing.assert_allclose(F.normalize(ta, p=1, dim=0).cpu().numpy(),
                               a / np.maximum(np.abs(a).sum(0, keepdims=True), 1e-12), rtol=1e-12)
    expected = (a * b).sum(1) / (np.maximum(np.linalg.norm(a, axis=1), 1e-8) * np.maximum(np.linalg.norm(b, axis=1), 1e-8))
    np.testing.assert_allclose(F.cosine_similarity(ta, tb).cpu().numpy(), expected, rtol=1e-12)
    gradcheck(lambda p, q: F.cosine_similarity(p, q, dim=0), a[:, :2] + 0.5, b[:, :2])


@pytest.mark.parametrize("reduction", ["mean", "sum", "batchmean", "none"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_the_formula(reduction, log_target, rng):
    logits = rng.standard_normal((3, 4))
    inp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    target = rng.dirichlet(np.ones(4), size=3)
    target[0, 1] = 0.0  # 0 * log 0 counts as 0
    t = np.log(np.where(target > 0, target, 1e-300)) if log_target else target
    if log_target:
        loss = np.exp(t) * (t - inp)
    else:
        loss = np.where(target > 0, target * (np.log(np.where(target > 0, target, 1)) - inp), 0)
    expected = {"none": loss, "sum": loss.sum(), "mean": loss.mean(), "batchmean": loss.sum() / 3}[reduction]
    tt = fg.tensor(t, requires_grad=True)
    ti = fg.tensor(inp, requires_grad=True)
    got = F.kl_div(ti, tt, reduction=reduction, log_target=log_target)
    np.testing.assert_allclose(got.detach().numpy(), expected, rtol=1e-10, atol=1e-12)
    got.sum().backward()
    assert np.isfinite(tt.grad.numpy()).all() and np.isfinite(ti.grad.numpy()).all()


def test_module_dict_registers_its_modules():
    d = fg.nn.ModuleDict({"enc": fg.nn.Linear(3, 4), "act": fg.nn.ReLU()})
    d["dec"] = fg.nn.Linear(4, 2)
    assert list(d) == ["enc", "act", "dec"] and len(d) == 3 and "act" in d and "x" not in d
    assert [k for k in d.state_dict()] == ["enc.weight", "enc.bias", "dec.weight", "dec.bias"]
    assert len(list(d.parameters())) == 4
    y = d["dec"](d["act"](d["enc"](fg.ones(2, 3))))
    assert y.shape == (2, 2)
    del d["act"]
    assert d.keys() == ["enc", "dec"] and [type(m).__name__ for m in d.values()] == ["Linear", "Linear"]
    copied = copy.deepcopy(d)
    np.testing.assert_array_equal(copied["enc"].weight.numpy(), d["enc"].weight.numpy())
    assert pickle.loads(pickle.dumps(d)).keys() == ["enc", "dec"]
    with pytest.raises(KeyError):
        d["missing"]
    with pytest.raises(fg.InvalidArgumentError, match=r"ModuleDict: keys must be non-empty strings without '.', "
                                                      r"got 'a.b'"):
        d["a.b"] = fg.nn.ReLU()
    with pytest.raises(TypeError, match=r"ModuleDict: values must be fg.nn.Module instances, got int"):
        d["x"] = 3


def test_parameter_list_registers_its_parameters():
    pl = fg.nn.ParameterList([fg.nn.Parameter(fg.ones(2)), fg.nn.Parameter(fg.zeros(3))])
    pl.append(fg.nn.Parameter(fg.full((1,), 5.0)))
    assert len(pl) == 3 and [p.shape for p in pl] == [(2,), (3,), (1,)]
    assert pl[-1].item() == 5.0 and list(pl.state_dict()) == ["0", "1", "2"]
    opt = fg.optim.SGD(pl.parameters(), lr=1.0)
    (pl[0].sum() + pl[2].sum()).backward()
    opt.step()
    np.testing.assert_array_equal(pl[0].detach().numpy(), [0, 0])
    pl[1] = fg.nn.Parameter(fg.ones(4))
    assert pl[1].shape == (4,)
    with pytest.raises(IndexError, match=r"ParameterList: index 3 is out of range for 3 parameters"):
        pl[3]
    with pytest.raises(TypeError, match=r"ParameterList: values must be tensors, got float"):
        pl.append(1.0)
