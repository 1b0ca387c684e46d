"""Copies and processes: Tensor.clone, pickle and copy.deepcopy of tensors, modules (built-in
and Python subclasses, Sequential, Graphs) and optimizers, spawn-based multiprocessing, and
the clear error for a Module subclass that assigns before Module.__init__()."""
import copy
import multiprocessing
import pickle

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.norm = nn.BatchNorm1d(4)
        self.scale = 2.0
        self.register_buffer("offset", fg.tensor([1.0, 2.0, 3.0, 4.0]))

    def forward(self, x):
        return self.norm(self.fc(x)).relu() * self.scale + self.offset


def assert_same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_array_equal(sa[k].numpy(), sb[k].numpy())


def all_distinct(a, b):
    """No tensor of module a shares memory with one of b."""
    ptrs = {t.data_ptr() for t in a.state_dict().values() if t.numel()}
    return not any(t.data_ptr() in ptrs for t in b.state_dict().values() if t.numel())


# ------------------------------------------------------------------------------------------
# tensors

def test_clone_copies_memory_and_passes_gradients(rng):
    x = fg.tensor(rng.normal(size=(3, 4)), requires_grad=True)
    y = x.clone()
    assert y.data_ptr() != x.data_ptr() and y.grad_fn == "<ContiguousBackward>"
    np.testing.assert_array_equal(y.detach().numpy(), x.detach().numpy())
    (y * fg.tensor(rng.normal(size=(3, 4)))).sum().backward()
    assert fg.testing.gradcheck(lambda t: t.clone() * t, [fg.tensor(rng.normal(size=(2, 3)), requires_grad=True)])
    t = fg.tensor(rng.normal(size=(4, 5))).transpose(0, 1)  # non-contiguous in, contiguous out
    c = fg.clone(t)
    assert c.is_contiguous() and not c.requires_grad
    np.testing.assert_array_equal(c.numpy(), t.numpy())
    assert fg.zeros(0, 3).clone().shape == (0, 3)


@pytest.mark.parametrize("dtype", [fg.float32, fg.float64, fg.int64, fg.int32, fg.bool, fg.float16, fg.bfloat16])
def test_tensor_pickle_round_trip(rng, device, dtype):
    t = fg.tensor(rng.normal(size=(3, 5)) * 10, dtype=dtype, device=device)
    back = pickle.loads(pickle.dumps(t))
    assert back.dtype == dtype and back.shape == (3, 5) and back.device == t.device
    np.testing.assert_array_equal(back.cpu().float().numpy() if dtype == fg.bfloat16 else back.cpu().numpy(),
                                  t.cpu().float().numpy() if dtype == fg.bfloat16 else t.cpu().numpy())
    for shape in [(), (0, 4), (1,)]:
        assert pickle.loads(pickle.dumps(fg.zeros(*shape, dtype=dtype))).shape == shape


def test_tensor_pickle_keeps_flags_and_view_values(rng):
    p = nn.Parameter(fg.tensor(rng.normal(size=(2, 3))))
    q = pickle.loads(pickle.dumps(p))
    assert q.requires_grad and isinstance(q, nn.Parameter)
    frozen = pickle.loads(pickle.dumps(fg.ones(2).requires_grad_()))
    assert frozen.requires_grad and frozen.is_leaf
    view = fg.tensor(rng.normal(size=(4, 6)))[1::2, ::3].transpose(0, 1)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(view)).numpy(), view.numpy())


def test_tensor_reached_twice_is_pickled_once_and_comes_back_shared():
    w = nn.Linear(2, 2)
    first, second = pickle.loads(pickle.dumps([w.weight, w.weight]))  # two Python handles, one tensor
    with fg.no_grad():
        first.fill_(7.0)
    np.testing.assert_array_equal(second.numpy(), np.full((2, 2), 7.0))
    t = fg.zeros(3)
    a, b = pickle.loads(pickle.dumps([t, t[1:]]))
    with fg.no_grad():
        a.fill_(1.0)
    assert b.numpy().sum() == 0  # a view is pickled as its own values


def test_tensor_deepcopy_copies_grad_and_refuses_non_leaves(rng):
    x = fg.tensor(rng.normal(size=3), requires_grad=True)
    (x * x).sum().backward()
    y = copy.deepcopy(x)
    assert y.requires_grad and y.is_leaf and y.data_ptr() != x.data_ptr()
    np.testing.assert_array_equal(y.grad.numpy(), x.grad.numpy())
    assert y.grad.data_ptr() != x.grad.data_ptr()
    with pytest.raises(fg.InvalidArgumentError, match="only leaf tensors .* use t.detach"):
        copy.deepcopy(x * 2)
    z = copy.copy(fg.ones(2))
    np.testing.assert_array_equal(z.numpy(), [1, 1])


# ------------------------------------------------------------------------------------------
# modules

def test_deepcopy_of_a_state_dict_is_a_snapshot():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    snapshot = copy.deepcopy(model.state_dict())
    with fg.no_grad():
        model[0].weight.fill_(5.0)
    assert not np.allclose(snapshot["0.weight"].numpy(), 5.0)
    model.load_state_dict(snapshot)
    np.testing.assert_array_equal(model[0].weight.numpy(), snapshot["0.weight"].numpy())


@pytest.mark.parametrize("make", [
    lambda: Net(),
    lambda: nn.Module(),
    lambda: nn.Sequential(nn.Linear(3, 4), nn.GELU("tanh"), nn.Dropout(0.25), nn.LayerNorm(4), nn.Softmax(0)),
    lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True),
    lambda: nn.ModuleList([nn.Conv2d(1, 2, 3, padding=1, bias=False), nn.MaxPool2d(2), nn.Flatten(0, 1)]),
    lambda: nn.Checkpoint(nn.TransformerBlock(8, 2, mlp_ratio=2, causal=False)),
    lambda: nn.Sequential(nn.GroupNorm(2, 4, eps=1e-3), nn.BatchNorm2d(4, momentum=None), nn.RMSNorm(3)),
    lambda: nn.Sequential(nn.Embedding(5, 3), nn.MultiheadAttention(3, 1), nn.GRUCell(3, 2), nn.LSTMCell(2, 2)),
    lambda: nn.Sequential(fg.flow.SoftmaxRouter(3, 2), fg.flow.Reshape(2, -1), fg.flow.Cat(0), fg.flow.LearnedHalt(3),
                          fg.flow.ThresholdHalt(0.5), fg.flow.FixedSelector(1), fg.flow.ArgmaxSelector(3, 2)),
])
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_module_copies_have_the_same_type_config_state_and_own_memory(make, how):
    model = make()
    model.eval()
    copied = pickle.loads(pickle.dumps(model)) if how == "pickle" else copy.deepcopy(model)
    assert type(copied) is type(model) and repr(copied) == repr(model)
    assert not copied.training
    assert_same_state(model, copied)
    assert all_distinct(model, copied)
    assert [type(m) for m in copied.modules()] == [type(m) for m in model.modules()]


def test_copies_keep_python_attributes_modes_and_frozen_parameters(rng):
    net = Net()
    net.fc.weight.requires_grad_(False)
    net.norm.eval()
    net.scale = 3.0
    for copied in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        assert copied.scale == 3.0 and copied.training and not copied.norm.training
        assert not copied.fc.weight.requires_grad and copied.fc.bias.requires_grad
        x = fg.tensor(rng.normal(size=(5, 3)).astype(np.float32))
        fg.testing.assert_close(copied(x), net(x))


class Head(nn.Module):
    def __init__(self, n, scale):  # arguments a copy cannot know: copies bypass __init__
        super().__init__()
        self.fc = nn.Linear(n, 2)
        self.scale = scale
        self.note = fg.ones(2)  # a plain tensor attribute

    def forward(self, x):
        return self.fc(x) * self.scale + self.note


class WideLinear(nn.Linear):
    def __init__(self, n):
        super().__init__(n, 2 * n)
        self.kind = "wide"


@pytest.mark.parametrize("how", [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))])
def test_subclasses_with_their_own_init_arguments_copy(rng, how):
    x = fg.tensor(rng.normal(size=(2, 3)).astype(np.float32))
    for model in (Head(3, 2.5), WideLinear(3)):
        copied = how(model)
        assert type(copied) is type(model) and copied.__dict__.keys() == model.__dict__.keys()
        fg.testing.assert_close(copied(x), model(x))
        assert all_distinct(model, copied)


def test_best_model_copy_is_unchanged_by_training(rng):
    model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    best = copy.deepcopy(model)
    before = {k: v.numpy().copy() for k, v in best.state_dict().items()}
    x, y = fg.tensor(rng.normal(size=(16, 3)).astype(np.float32)), fg.tensor(rng.normal(size=(16, 1)).astype(np.float32))
    for _ in range(3):
        opt.zero_grad()
        fg.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    for k, v in best.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    assert not np.array_equal(model[0].weight.numpy(), before["0.weight"])
    assert best[0].weight.grad is None


def test_shared_modules_and_tied_weights_stay_shared_in_copies():
    shared, other = nn.Linear(2, 2), nn.Linear(2, 2)
    assert isinstance(shared.weight, nn.Parameter)
    other.weight = shared.weight  # tied, as in PyTorch
    model = nn.Sequential(shared, nn.ReLU(), shared, other)
    for copied in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert copied[0] is copied[2]
        assert copied[3].weight.data_ptr() == copied[0].weight.data_ptr() != shared.weight.data_ptr()
        assert len(list(copied.parameters())) == 3


def test_copying_does_not_touch_the_global_random_stream():
    model = nn.Linear(100, 100)
    fg.manual_seed(3)
    expected = fg.rand(4).numpy()
    fg.manual_seed(3)
    copy.deepcopy(model)
    pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(fg.rand(4).numpy(), expected)


def test_graph_deepcopy(rng):  # pickling Graphs: tests/graph/test_graph_pickle.py
    g = (fg.flow(nn.Linear(3, 4)).tag("hidden")
         .also(nn.Linear(4, 4))
         .through(nn.Linear(4, 2)).tag("out")
         .build())
    x = fg.tensor(rng.normal(size=(5, 3)).astype(np.float32))
    y = g(x)
    g.collect("out")
    g.flush()
    g.freeze("hidden")
    copied = copy.deepcopy(g)
    assert type(copied) is fg.Graph and copied.tags == g.tags
    fg.testing.assert_close(copied(x), y)
    assert_same_state(g, copied)
    assert all_distinct(g, copied)
    assert len(copied.trend("out")) == 1 and copied.trend("out").values() == g.trend("out").values()
    assert not copied.sub("hidden").weight.requires_grad
    with fg.no_grad():
        g.sub("out").weight.fill_(0.0)
    assert not np.allclose(copied(x).numpy(), g(x).numpy())
    holder = nn.Sequential(g)
    assert type(copy.deepcopy(holder)[0]) is fg.Graph


# ------------------------------------------------------------------------------------------
# optimizers

@pytest.mark.parametrize("make_opt", [lambda ps: fg.optim.Adam(ps, lr=0.01),
                                      lambda ps: fg.optim.SGD(ps, lr=0.05, momentum=0.9)])
def test_pickled_model_and_optimizer_resume_exactly(rng, make_opt):
    x, y = fg.tensor(rng.normal(size=(8, 3)).astype(np.float32)), fg.tensor(rng.normal(size=(8, 1)).astype(np.float32))

    def step(model, opt):
        opt.zero_grad()
        fg.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = make_opt(model.parameters())
    for _ in range(2):
        step(model, opt)
    blob = pickle.dumps((model, opt))
    for _ in range(3):
        step(model, opt)
    model2, opt2 = pickle.loads(blob)
    # the optimizer's parameters are the model's, not copies of them
    assert [hash(p) for p in opt2.param_groups[0]["params"]] == [hash(p) for p in model2.parameters()]
    for _ in range(3):
        step(model2, opt2)
    assert_same_state(model, model2)
    copied_model, copied_opt = copy.deepcopy((model, opt))
    step(copied_model, copied_opt)
    step(model, opt)
    assert_same_state(model, copied_model)


# ------------------------------------------------------------------------------------------
# processes

def _worker(tensor, module):
    return tensor * 2, module, module(tensor)


def test_spawned_worker_receives_and_returns_tensors_and_modules(rng):
    x = fg.tensor(rng.normal(size=(4, 3)).astype(np.float32))
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU()).eval()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        doubled, back, out = pool.apply(_worker, (x, model))
    np.testing.assert_array_equal(doubled.numpy(), x.numpy() * 2)
    assert_same_state(model, back)
    fg.testing.assert_close(out, model(x))


# ------------------------------------------------------------------------------------------
# Module.__init__ order

def test_assigning_before_module_init_raises_clearly():
    class Early(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)
            super().__init__()

    with pytest.raises(AttributeError, match=r"cannot assign module 'fc' before Module.__init__\(\) call: "
                                             r"call super\(\).__init__\(\) first in Early.__init__"):
        Early()

    class EarlyParam(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(fg.ones(2))

    with pytest.raises(AttributeError, match="cannot assign tensor 'w' before Module.__init__"):
        EarlyParam()

    class PlainFirst(nn.Module):
        def __init__(self):
            self.size = 3  # plain values are fine before Module.__init__, as in PyTorch
            super().__init__()
            self.fc = nn.Linear(self.size, 1)

    assert PlainFirst().fc.in_features == 3

    class Reads(nn.Module):
        def __init__(self):
            self.missing  # noqa: B018

    with pytest.raises(AttributeError, match="Module.__init__\\(\\) was not called yet"):
        Reads()
