"""Version counters: a tensor saved for backward (or the base of a view in the graph) that an
in-place write changed before backward raises a PyTorch-style error naming the forward op;
in-place rules under autograd; leaf gradients accumulate safely from several threads."""
import threading

import numpy as np
import pytest

import flowgrad as fg

MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"


def test_every_in_place_write_bumps_the_version_shared_by_views():
    t = fg.zeros(3, 4)
    view = t[1]
    assert t._version == view._version == 0
    t.add_(1.0)
    view.mul_(2.0)
    t[0, 0] = 5.0
    with fg.no_grad():
        t.detach().zero_()
    assert t._version == view._version == 4
    assert fg.zeros(3)._version == 0 and (t + 1)._version == 0


def test_optimizer_step_between_forward_and_backward_raises():
    w = fg.nn.Parameter(fg.randn(3, 2))
    x = fg.randn(4, 3)
    opt = fg.optim.SGD([w], lr=0.1)
    (x @ w).sum().backward()
    loss = (x @ w).sum()
    opt.step()
    with pytest.raises(fg.FlowgradError, match=MODIFIED + ": matmul input 1 of shape \\(3, 2\\) is at version 1; "
                                                          "expected version 0"):
        loss.backward()


def test_fill_under_no_grad_then_backward_raises():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    with fg.no_grad():
        w.fill_(0)
    with pytest.raises(fg.FlowgradError, match=MODIFIED + ": mul input 0 of shape \\(2,\\) is at version 1; "
                                                          "expected version 0"):
        y.backward()


def test_modified_saved_output_names_the_op():
    x = fg.tensor([0.5, 1.0], requires_grad=True)
    y = x.exp()
    y.add_(1.0)  # recorded on the non-leaf y; exp saved its output, which this changed
    with pytest.raises(fg.FlowgradError, match=MODIFIED + ": exp output 0 of shape \\(2,\\)"):
        y.sum().backward()


def test_base_modified_after_a_view_was_taken_raises_for_the_view():
    x = fg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    v = y[0:2]
    y.mul_(3)
    y.sum().backward(retain_graph=True)  # y's own history includes the mul_
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0, 6.0])
    with pytest.raises(fg.FlowgradError, match=MODIFIED + ": slice input 0 of shape \\(3,\\)"):
        v.sum().backward()


def test_what_must_not_raise():
    w = fg.nn.Parameter(fg.randn(3, 2))
    x = fg.randn(4, 3)
    opt = fg.optim.Adam([w], lr=0.1)
    for _ in range(3):  # the usual loop: step after backward
        opt.zero_grad()
        (x @ w).square().sum().backward()
        opt.step()
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    b = fg.tensor([3.0, 4.0])
    y = a + b  # add saves nothing: changing b afterwards cannot corrupt its gradient
    b.add_(1.0)
    unrelated = fg.zeros(2)
    z = (a * a).sum()
    unrelated.fill_(3.0)
    y.sum().backward()
    z.backward()
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 5.0])


def test_in_place_rules_under_autograd():
    leaf = fg.ones(3, requires_grad=True)
    with pytest.raises(fg.InvalidArgumentError, match="add_: a leaf tensor that requires grad cannot be modified in place; "
                                                      "wrap the update in fg.no_grad\\(\\)"):
        leaf += 1
    with pytest.raises(fg.InvalidArgumentError, match="index_put_: a leaf tensor that requires grad"):
        leaf[0] = 2.0
    y = leaf * 2
    with pytest.raises(fg.InvalidArgumentError, match="mul_: cannot modify in place a view \\('slice'\\) of a tensor "
                                                      "that requires grad"):
        y[1:].mul_(2)
    with pytest.raises(fg.InvalidArgumentError, match="mul_: input 1 shares memory with the tensor written in place"):
        y.mul_(y)
    assert y._version == 0  # nothing was written
    with fg.no_grad():
        leaf += 1  # allowed: the update of a parameter
    np.testing.assert_allclose(leaf.numpy(), [2.0, 2.0, 2.0])
    assert leaf.is_leaf and leaf.requires_grad


def test_second_order_through_an_in_place_op():
    x = fg.tensor([1.0, -2.0, 3.0], dtype=fg.float64, requires_grad=True)
    y = fg.tensor([0.5, 2.0, -1.0], dtype=fg.float64, requires_grad=True)
    z = x * x
    z.mul_(y)  # z = x^2 y: its backward reads z's value from before the write, x^2
    (gy,) = fg.autograd.grad(z.sum(), [y], create_graph=True)
    np.testing.assert_allclose(gy.numpy(), [1.0, 4.0, 9.0])
    (gx,) = fg.autograd.grad(gy.sum(), [x])
    np.testing.assert_allclose(gx.numpy(), [2.0, -4.0, 6.0])


def test_concurrent_backward_accumulates_every_gradient():
    """backward() releases the GIL: threads sharing a parameter must not lose updates."""
    w = fg.zeros(256, 256, dtype=fg.float64, requires_grad=True)
    threads, rounds = 8, 60

    def work():
        loss = (fg.ones(1, 256, dtype=fg.float64) @ w).sum()
        for _ in range(rounds):  # nearly all the time is spent in backward, without the GIL
            loss.backward(retain_graph=True)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    # every backward adds 1 to each element; integers this small add exactly in any order
    np.testing.assert_array_equal(w.grad.numpy(), np.full((256, 256), float(threads * rounds)))
