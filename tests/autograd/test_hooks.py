"""Tensor.register_hook (PyTorch's): a hook sees a tensor's gradient once per backward pass (a
leaf's summed over the pass, before it reaches .grad), may replace it, chains in order, comes off
with remove(); in autograd.grad, with create_graph, in compiled steps; and the documented errors."""
import numpy as np
import pytest

import flowgrad as fg


def test_a_leaf_hook_sees_the_pass_sum_and_replaces_it(device):
    x = fg.ones(3, device=device, requires_grad=True)
    seen = []

    def double(g):
        seen.append(g.cpu().numpy().copy())
        return g * 2

    x.register_hook(double)
    (x * 3 + x).sum().backward()  # two contributions, 3 and 1: the hook sees 4 once
    np.testing.assert_array_equal(seen[0], [4, 4, 4])
    np.testing.assert_array_equal(x.grad.cpu().numpy(), [8, 8, 8])
    (x * x).sum().backward()  # a second pass: its own call, accumulated after
    np.testing.assert_array_equal(seen[1], [2, 2, 2])
    np.testing.assert_array_equal(x.grad.cpu().numpy(), [12, 12, 12])
    assert len(seen) == 2


def test_a_non_leaf_hook_changes_what_flows_below(device):
    x = fg.tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    y = x * x
    y.register_hook(lambda g: g * fg.tensor([1.0, 0.0, -1.0], device=device))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.cpu().numpy(), [2.0, 0.0, -6.0])  # 2x times the new gradient


def test_hooks_chain_in_order_none_keeps_and_remove_takes_one_off():
    x = fg.ones(2, requires_grad=True)
    order = []
    a = x.register_hook(lambda g: order.append("a") or g + 1)
    x.register_hook(lambda g: order.append("b"))  # None: the gradient stays
    x.register_hook(lambda g: order.append("c") or g * 10)
    x.sum().backward()
    assert order == ["a", "b", "c"]
    np.testing.assert_array_equal(x.grad.numpy(), [20, 20])
    a.remove()
    a.remove()  # again: nothing happens
    x.grad = None
    x.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [10, 10])


def test_a_with_block_removes_the_hook_and_a_hook_may_remove_itself():
    x = fg.ones(2, requires_grad=True)
    with x.register_hook(lambda g: g * 0):
        x.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0])
    calls = []

    def once(g):
        calls.append(1)
        handle.remove()
        return g * 5

    handle = x.register_hook(once)
    x.grad = None
    x.sum().backward()
    x.sum().backward()
    assert len(calls) == 1
    np.testing.assert_array_equal(x.grad.numpy(), [6, 6])


def test_autograd_grad_returns_hooked_gradients_and_leaves_grad_alone():
    x = fg.tensor([1.0, 2.0], dtype=fg.float64, requires_grad=True)
    y = x * 3
    x.register_hook(lambda g: g + 100)
    y.register_hook(lambda g: g * 2)
    other = fg.ones(2, dtype=fg.float64, requires_grad=True)
    calls = []
    other.register_hook(lambda g: calls.append(1))
    fg.autograd.grad([(y * y * other).sum()], [y], retain_graph=True)
    assert calls == []  # a leaf autograd.grad does not return runs no hooks (PyTorch's rule)
    gx, gy = fg.autograd.grad([(y * y).sum()], [x, y])
    # PyTorch's rule: a non-leaf's gradient is returned before its hooks, a leaf's after them
    np.testing.assert_array_equal(gy.numpy(), 2 * y.detach().numpy())
    np.testing.assert_array_equal(gx.numpy(), 3 * 2 * 2 * y.detach().numpy() + 100)
    assert x.grad is None


def test_hooks_are_differentiated_with_create_graph():
    x = fg.tensor([1.0, 2.0], dtype=fg.float64, requires_grad=True)
    y = x * x
    y.register_hook(lambda g: g * y)  # the new gradient depends on x
    (gx,) = fg.autograd.grad([y.sum()], [x], create_graph=True)
    np.testing.assert_array_equal(gx.detach().numpy(), 2 * x.detach().numpy() ** 3)  # 2x * x^2
    (hx,) = fg.autograd.grad([gx.sum()], [x])
    # PyTorch's numbers (6, 72): the hook also multiplies the second pass's gradient through y, so
    # d/dx sum(2x * y) = 2y + (2x * y) * 2x = 2x^2 + 4x^4
    v = x.detach().numpy()
    np.testing.assert_array_equal(hx.numpy(), 2 * v ** 2 + 4 * v ** 4)


def test_a_parameter_hook_runs_inside_a_compiled_step():
    def build():
        fg.manual_seed(1)
        model = fg.nn.Linear(4, 2)
        model.weight.register_hook(lambda g: g * 0.5)  # traced as an op of the step
        return model, fg.optim.SGD(model.parameters(), lr=0.1)

    x, y = fg.randn(8, 4), fg.randn(8, 2)
    eager, eager_opt = build()
    model, opt = build()
    step = fg.compile(model, fg.nn.functional.mse_loss, opt, example_inputs=(x, y))
    for _ in range(3):
        eager_opt.zero_grad()
        fg.nn.functional.mse_loss(eager(x), y).backward()
        eager_opt.step()
        step(x, y)
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_errors_name_register_hook():
    with pytest.raises(fg.InvalidArgumentError, match=r"register_hook: cannot register a hook on a tensor that "
                                                      r"does not require grad \(float32 \(2,\) on cpu\)"):
        fg.ones(2).register_hook(lambda g: g)
    x = fg.ones(2, requires_grad=True)
    h = x.register_hook(lambda g: fg.ones(3))
    with pytest.raises(fg.ShapeError, match=r"register_hook: a hook returned a gradient of shape \(3,\) for a "
                                            r"tensor of shape \(2,\)"):
        x.sum().backward()
    h.remove()
    h = x.register_hook(lambda g: 1.0)
    with pytest.raises(TypeError, match=r"register_hook: the hook returned float; expected a Tensor"):
        x.sum().backward()
    h.remove()

    def fails(g):
        raise ValueError("from the hook")

    h = x.register_hook(fails)
    with pytest.raises(ValueError, match="from the hook"):
        x.sum().backward()
    h.remove()
    x.grad = None
    x.sum().backward()  # the tensor still trains after the failures
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1])
