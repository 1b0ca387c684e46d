"""bernoulli, multinomial and nn.init.trunc_normal_: their distributions (moments and frequencies
within bounds that a correct sampler misses with probability far below 1e-6 at these fixed seeds),
exact properties (zero weights never drawn, draws without replacement distinct), reproducibility
from fg.manual_seed on every device, and the documented errors."""
import math

import numpy as np
import pytest

import flowgrad as fg


def test_bernoulli_frequencies_dtype_and_edges(device):
    fg.manual_seed(1)
    p = fg.tensor(np.array([0.0, 0.3, 1.0]).repeat(100_000).reshape(3, -1), device=device)
    draws = fg.bernoulli(p)
    assert draws.dtype == fg.float64 and draws.device == device  # the probabilities' dtype
    got = draws.cpu().numpy()
    assert set(np.unique(got)) <= {0.0, 1.0}
    assert got[0].sum() == 0 and got[2].all()
    assert abs(got[1].mean() - 0.3) < 5 * math.sqrt(0.3 * 0.7 / 100_000)
    fg.manual_seed(1)
    np.testing.assert_array_equal(p.bernoulli().cpu().numpy(), got)  # the same draws from the same seed
    fg.manual_seed(1)
    np.testing.assert_array_equal(fg.bernoulli(p.cpu()).numpy(), got)  # and on the CPU


def test_multinomial_with_replacement_follows_the_weights(device):
    w = np.array([1.0, 0.0, 3.0, 6.0])
    fg.manual_seed(2)
    draws = fg.multinomial(fg.tensor(w, device=device), 60_000, replacement=True)
    assert draws.dtype == fg.int64 and draws.shape == (60_000,)
    counts = np.bincount(draws.cpu().numpy(), minlength=4)
    assert counts[1] == 0
    p = w / w.sum()
    assert (np.abs(counts / 60_000 - p) < 5 * np.sqrt(p * (1 - p) / 60_000) + 1e-12).all(), counts
    fg.manual_seed(2)
    np.testing.assert_array_equal(fg.tensor(w, device=device).multinomial(60_000, True).cpu().numpy(),
                                  draws.cpu().numpy())


def test_multinomial_without_replacement(device):
    rows = np.array([[5.0, 0.0, 1.0, 1.0, 3.0], [0.0, 0.0, 2.0, 0.0, 1.0]])
    fg.manual_seed(3)
    draws = fg.multinomial(fg.tensor(rows, device=device), 2).cpu().numpy()
    assert draws.shape == (2, 2)
    assert draws[0, 0] != draws[0, 1] and set(draws[1]) == {2, 4}  # the only positive ones
    first = np.array([fg.multinomial(fg.tensor(rows[0]), 1).item() for _ in range(4000)])
    freq = np.bincount(first, minlength=5) / 4000  # the first draw is a draw with the weights
    p = rows[0] / rows[0].sum()
    assert freq[1] == 0 and (np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / 4000) + 1e-12).all(), freq
    all_of_them = fg.multinomial(fg.tensor(rows[0]), 4).numpy()
    assert sorted(all_of_them) == [0, 2, 3, 4]


def test_multinomial_errors():
    with pytest.raises(fg.InvalidArgumentError, match=r"multinomial: cannot draw 3 samples without replacement "
                                                      r"from a row with 2 categories of positive weight"):
        fg.multinomial(fg.tensor([1.0, 0.0, 2.0]), 3)
    for bad in ([1.0, -1.0], [0.0, 0.0], [1.0, float("nan")], [float("inf"), 1.0]):
        with pytest.raises(fg.InvalidArgumentError, match=r"multinomial: weights must be finite and non-negative, "
                                                          r"with a positive sum in every row"):
            fg.multinomial(fg.tensor(bad), 1, replacement=True)
    with pytest.raises(fg.InvalidArgumentError, match=r"multinomial: cannot draw 0 samples"):
        fg.multinomial(fg.tensor([1.0]), 0, replacement=True)
    with pytest.raises(fg.ShapeError, match=r"multinomial: expected weights of shape \(n,\) or \(rows, n\) with "
                                            r"n > 0, got \(2, 2, 2\)"):
        fg.multinomial(fg.ones(2, 2, 2), 1)
    with pytest.raises(fg.DTypeError, match=r"multinomial: expected floating weights, got flowgrad.int64"):
        fg.multinomial(fg.tensor([1, 2]), 1)
    with pytest.raises(fg.DTypeError, match=r"bernoulli: expected floating probabilities, got flowgrad.int64"):
        fg.bernoulli(fg.tensor([1, 0]))


@pytest.mark.parametrize("mean, std, a, b", [(0.0, 0.02, -0.04, 0.04), (1.0, 2.0, -2.0, 2.0), (0.0, 1.0, 0.5, 3.0)])
def test_trunc_normal_moments_and_bounds(mean, std, a, b, device):
    fg.manual_seed(4)
    w = fg.nn.Parameter(fg.empty(400, 500, device=device))
    assert fg.nn.init.trunc_normal_(w, mean, std, a, b) is w
    x = w.detach().cpu().numpy().astype(np.float64)
    assert x.min() >= a and x.max() <= b
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda z: (1 + math.erf(z / math.sqrt(2))) / 2  # noqa: E731
    z = cdf(beta) - cdf(alpha)
    true_mean = mean + std * (pdf(alpha) - pdf(beta)) / z
    true_var = std ** 2 * (1 + (alpha * pdf(alpha) - beta * pdf(beta)) / z - ((pdf(alpha) - pdf(beta)) / z) ** 2)
    n = x.size
    assert abs(x.mean() - true_mean) < 6 * math.sqrt(true_var / n)
    assert abs(x.var() / true_var - 1) < 0.02
    fg.manual_seed(4)
    again = fg.nn.init.trunc_normal_(fg.empty(400, 500, device=device), mean, std, a, b)
    np.testing.assert_array_equal(again.cpu().numpy(), w.detach().cpu().numpy())


def test_trunc_normal_errors():
    with pytest.raises(fg.InvalidArgumentError, match=r"trunc_normal_: need std > 0 and a < b, got std=0.0"):
        fg.nn.init.trunc_normal_(fg.empty(3), std=0.0)
    with pytest.raises(fg.InvalidArgumentError, match=r"a=1, b=1"):
        fg.nn.init.trunc_normal_(fg.empty(3), a=1, b=1)
    with pytest.raises(TypeError, match=r"trunc_normal_: expected an fg.Tensor, got list"):
        fg.nn.init.trunc_normal_([1.0])
