"""Eager autograd: accumulation, grad modes, detach, retain_graph, autograd.grad, second order,
anomaly detection and deterministic order."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import run_isolated


def leaf(a):
    return fg.tensor(np.asarray(a, dtype=np.float64), dtype=fg.float64, requires_grad=True)


def test_gradients_accumulate_across_backward_calls():
    x = leaf([1.0, 2.0])
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2 + 3, 4 + 3])
    x.grad = None
    (x * 1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1])


def test_broadcast_gradients_reduce_to_input_shape():
    a = leaf(np.ones((3, 1)))
    b = leaf(np.ones(4))
    (a * b).sum().backward()
    assert a.grad.shape == (3, 1) and b.grad.shape == (4,)
    np.testing.assert_array_equal(a.grad.numpy(), np.full((3, 1), 4.0))
    np.testing.assert_array_equal(b.grad.numpy(), np.full(4, 3.0))


def test_shared_subexpression_gets_summed_gradient():
    x = leaf([3.0])
    y = x * 2
    (y * y + y).sum().backward()  # d/dx (4x^2 + 2x) = 8x + 2
    assert x.grad.item() == 26.0


def test_no_grad_enable_grad_and_decorator():
    x = leaf([1.0])
    with fg.no_grad():
        y = x * 2
        assert not y.requires_grad
        with fg.enable_grad():
            assert (x * 2).requires_grad
    assert fg.is_grad_enabled()

    @fg.no_grad()
    def f(v):
        return v * 2

    assert not f(x).requires_grad
    with fg.set_grad_enabled(False):
        assert not (x + 1).requires_grad


def test_detach_and_requires_grad_rules():
    x = leaf([1.0, 2.0])
    d = (x * 2).detach()
    assert not d.requires_grad and d.is_leaf
    with pytest.raises(fg.InvalidArgumentError, match="only leaf tensors can change requires_grad"):
        (x * 2).requires_grad_(False)
    with pytest.raises(fg.DTypeError, match="only floating tensors can require gradients"):
        fg.tensor([1, 2]).requires_grad_()
    assert not fg.argmax(x).requires_grad  # integer outputs never require grad
    with pytest.raises(fg.InvalidArgumentError, match="does not require grad and has no grad_fn"):
        fg.ones(2).sum().backward()


def test_backward_twice_needs_retain_graph():
    x = leaf([2.0])
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.item() == 8.0
    z = (x.exp()).sum()
    z.backward()
    with pytest.raises(fg.FlowgradError, match="backward through the graph of 'exp' a second time"):
        z.backward()


def test_backward_needs_explicit_gradient_for_non_scalars():
    x = leaf([1.0, 2.0])
    with pytest.raises(fg.InvalidArgumentError, match="grad can be implicitly created only for outputs with one element"):
        (x * 2).backward()
    (x * 2).backward(fg.tensor([1.0, 10.0], dtype=fg.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [2, 20])


def test_autograd_grad_leaves_dot_grad_untouched_and_handles_unused():
    x, y = leaf([1.0, 2.0]), leaf([3.0])
    z = (x * x).sum() * y
    gx, gy = fg.autograd.grad(z, [x, y])
    np.testing.assert_array_equal(gx.numpy(), [6, 12])
    np.testing.assert_array_equal(gy.numpy(), [5])
    assert x.grad is None and y.grad is None
    u = leaf([0.0])
    with pytest.raises(fg.InvalidArgumentError, match="input 1 was not used"):
        fg.autograd.grad((x * 2).sum(), [x, u])
    assert fg.autograd.grad((x * 2).sum(), [x, u], allow_unused=True)[1] is None


def test_autograd_grad_of_intermediate():
    x = leaf([1.0, 2.0])
    h = x * 3
    (g,) = fg.autograd.grad((h * h).sum(), h)
    np.testing.assert_array_equal(g.numpy(), [6, 12])


@pytest.mark.parametrize("fn,second", [
    (lambda x: x ** 3, lambda x: 6 * x),
    (lambda x: x.exp(), lambda x: np.exp(x)),
    (lambda x: x.sin(), lambda x: -np.sin(x)),
    (lambda x: x.tanh(), lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
    (lambda x: x.sigmoid(), lambda x: (s := 1 / (1 + np.exp(-x))) * (1 - s) * (1 - 2 * s)),
    (lambda x: x.log(), lambda x: -1 / x ** 2),
    (lambda x: x.sqrt(), lambda x: -0.25 * x ** -1.5),
    (lambda x: 1 / x, lambda x: 2 / x ** 3),
])
def test_second_order_elementwise(fn, second):
    a = np.array([0.5, 1.3, 2.0])
    x = leaf(a)
    (g,) = fg.autograd.grad(fn(x).sum(), x, create_graph=True)
    assert g.requires_grad
    (gg,) = fg.autograd.grad(g.sum(), x)
    fg.testing.assert_close(gg, second(a), rtol=1e-10, atol=1e-12)


def test_second_order_matmul():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    x, w = leaf(a), leaf(b)
    y = ((x @ w) ** 2).sum()
    (gx,) = fg.autograd.grad(y, x, create_graph=True)
    # d/dw of sum(gx) where gx = 2 (x w) w^T:  gradient is 2 x^T (1 w^T... ) check numerically
    (gw,) = fg.autograd.grad(gx.sum(), w)

    def f(wv):
        return (2 * (a @ wv) @ wv.T).sum()

    numeric = np.zeros_like(b)
    for i in np.ndindex(b.shape):
        p, m = b.copy(), b.copy()
        p[i] += 1e-6
        m[i] -= 1e-6
        numeric[i] = (f(p) - f(m)) / 2e-6
    fg.testing.assert_close(gw, numeric, rtol=1e-6, atol=1e-8)


def test_detect_anomaly_names_forward_op():
    x = leaf([-1.0, 4.0])
    with fg.autograd.detect_anomaly():
        with pytest.raises(fg.FlowgradError, match="op 'log' produced NaN or Inf in forward"):
            x.log()
    assert np.isnan(x.log().numpy()[0])  # off again outside the block


def test_detect_anomaly_names_backward_op():
    x = leaf([0.0, 4.0])
    y = x.sqrt().sum()  # forward is finite; d/dx sqrt at 0 is inf
    with fg.autograd.detect_anomaly():
        with pytest.raises(fg.FlowgradError, match="op 'sqrt' produced NaN or Inf in backward"):
            y.backward()


@pytest.mark.parametrize("dtype", [fg.float16, fg.bfloat16, fg.float32, fg.float64])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_detect_anomaly_scans_every_float_dtype_on_every_device(device, dtype, bad):
    """The scan runs through ops (x - x sums to NaN exactly when x holds NaN or +-inf), so it
    works on CUDA tensors and half types too; huge finite values and empty tensors pass."""
    x = fg.tensor(np.array([1.0, 60000.0, bad]), dtype=dtype).to(device).requires_grad_()
    with fg.autograd.detect_anomaly():
        with pytest.raises(fg.FlowgradError, match=r"op 'mul' produced NaN or Inf in forward \(output 0, "):
            x * 1.0
        y = fg.tensor(np.array([1.0, -30000.0, 0.0]), dtype=dtype).to(device).requires_grad_()
        (y * 2.0).sum().backward()  # all finite: no error, and the scan leaves no trace on the graph
        assert y.grad.float().numpy().tolist() == [2.0, 2.0, 2.0]
        fg.zeros(0, 3, dtype=dtype).to(device) * 1.0


def test_detect_anomaly_scan_records_nothing():
    x = leaf([1.0, 2.0])
    with fg.autograd.detect_anomaly():
        y = (x * 3.0).sum()
    assert y.grad_fn == "<SumBackward>"
    y.backward()
    assert x.grad.numpy().tolist() == [3.0, 3.0]


def test_gradient_dtype_follows_input():
    x = fg.ones(3, requires_grad=True)
    (x.double() * 2).sum().backward()
    assert x.grad.dtype == fg.float32


def test_deterministic_results_across_runs():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((20, 30))

    def run():
        x = leaf(a)
        h = (x @ x.t()).relu()
        (h.softmax(-1) if hasattr(h, "softmax") else fg.nn.functional.softmax(h, -1)).sum().backward()
        return x.grad.numpy().copy()

    np.testing.assert_array_equal(run(), run())


def test_grad_fn_names_op():
    x = leaf([1.0])
    assert (x + 1).grad_fn == "<AddBackward>"
    assert x.grad_fn is None


def test_deep_chain_has_no_recursion_limit():
    x = leaf([1.0])
    y = x
    for _ in range(5000):
        y = y * 1.0001
    y.sum().backward()
    assert abs(x.grad.item() - 1.0001 ** 5000) < 1e-9


def test_set_grad_enabled_as_a_plain_call_context_and_decorator():
    x = leaf([1.0])
    try:
        fg.set_grad_enabled(False)  # like PyTorch: off at once, until switched back
        assert not fg.is_grad_enabled() and not (x * 2).requires_grad
        fg.set_grad_enabled(True)
        assert fg.is_grad_enabled() and (x * 2).requires_grad
        with fg.set_grad_enabled(False):
            assert not fg.is_grad_enabled()
        assert fg.is_grad_enabled()

        @fg.set_grad_enabled(False)
        def f(v):
            return v * 2

        assert fg.is_grad_enabled()  # decorating does not switch the mode
        assert not f(x).requires_grad and fg.is_grad_enabled()
        with fg.no_grad():
            with fg.set_grad_enabled(True):
                assert (x * 2).requires_grad
            assert not fg.is_grad_enabled()
    finally:
        fg.set_grad_enabled(True)


def test_long_chains_are_freed_without_recursion():
    # Each used to free its graph one C++ stack frame per node and crash with a segfault.
    out = run_isolated("""
        x = fg.ones(1, requires_grad=True)
        y = x
        for _ in range(100000):
            y = y * 1.0
        y.sum().backward()  # backward through the chain is iterative too
        assert x.grad.item() == 1.0
        y = x
        for _ in range(100000):
            y = y * 1.0
        del y
        w = fg.ones(1, requires_grad=True)
        total = 0.0
        for _ in range(200000):
            total = total + w * 1.0
        del total
        kept = x
        for _ in range(100000):
            kept = kept * 1.0
        print("freed")  # `kept` and its graph die at interpreter exit
    """)
    assert out.strip() == "freed"


def test_an_exception_inside_no_grad_or_a_failing_backward_restores_the_context():
    """Grad mode, autocast and the RNG generator are the thread's execution context: a scope left
    by an exception (a no_grad block, a backward whose recomputation raises while the engine has
    suspended autocast) leaves every one of them as it was."""
    x = leaf([1.0, 2.0])
    with pytest.raises(ValueError, match="inside no_grad"):
        with fg.no_grad():
            raise ValueError("inside no_grad")
    assert fg.is_grad_enabled() and (x * 2).requires_grad

    class FailsOnRecompute(fg.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, v):
            self.calls += 1
            if self.calls == 2:
                fg.rand((4,))  # moves the replay's private generator, never the global one
                raise ValueError("recomputation failed")
            return v * 3

    fg.manual_seed(11)
    loss = fg.nn.Checkpoint(FailsOnRecompute())(fg.tensor(np.ones(3, np.float32), requires_grad=True)).sum()
    rng = fg.get_rng_state()
    with fg.autocast("cpu", fg.float16):
        with pytest.raises(ValueError, match="recomputation failed"):
            loss.backward()
        assert fg.is_autocast_enabled("cpu") and fg.get_autocast_dtype("cpu") == fg.float16
    assert not fg.is_autocast_enabled("cpu")
    assert fg.get_rng_state() == rng
    assert fg.is_grad_enabled()
