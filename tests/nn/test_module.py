"""Module system: registration by assignment, dotted names, modes, state_dict, repr, and the
lifetime of Python subclasses held only by C++."""
import gc
import weakref

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn
from conftest import run_isolated


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(4, 12)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.qkv(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Parameter(fg.randn(3, 4))
        self.blocks = nn.ModuleList([Block(), Block()])
        self.register_buffer("running", fg.zeros(4))
        self.note = "plain attribute"

    def forward(self, x):
        for b in self.blocks:
            x = b(x)[..., :4]
        return x + self.running


def test_registration_and_dotted_names_in_definition_order():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["embed", "blocks.0.qkv.weight", "blocks.0.qkv.bias", "blocks.1.qkv.weight", "blocks.1.qkv.bias"]
    assert [n for n, _ in net.named_buffers()] == ["running"]
    assert [n for n, _ in net.named_modules()] == ["", "blocks", "blocks.0", "blocks.0.qkv", "blocks.0.drop",
                                                   "blocks.1", "blocks.1.qkv", "blocks.1.drop"]
    assert [n for n, _ in net.named_children()] == ["blocks"]
    assert net.note == "plain attribute"
    assert isinstance(net.blocks[1], Block) and net.blocks[-1] is net.blocks[1]
    assert len(net.blocks) == 2 and len(list(net.parameters())) == 5
    assert net.num_parameters() == 12 + 2 * (48 + 12)
    assert all(p.requires_grad for p in net.parameters())


def test_shared_parameters_listed_once_and_reassignment():
    a = nn.Linear(3, 3)
    seq = nn.Sequential(a, a)
    assert len(list(seq.parameters())) == 2
    net = Net()
    net.embed = nn.Parameter(fg.zeros(3, 4))
    assert net.embed.sum().item() == 0 and [n for n, _ in net.named_parameters()][0] == "embed"
    with pytest.raises(fg.InvalidArgumentError, match="cannot assign a plain tensor to parameter 'embed'"):
        net.embed = fg.ones(3, 4)
    del net.blocks
    assert [n for n, _ in net.named_parameters()] == ["embed"]
    with pytest.raises(AttributeError, match="'Net' object has no attribute 'missing'"):
        net.missing


def test_train_eval_propagate_and_change_dropout():
    net = Net()
    assert net.training and net.blocks[0].drop.training
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    x = fg.randn(2, 4)
    np.testing.assert_array_equal(net(x).numpy(), net(x).numpy())  # no dropout in eval
    net.train()
    assert all(m.training for m in net.modules())


def test_zero_grad_state_dict_round_trip_and_errors():
    net = Net()
    net(fg.randn(2, 4)).sum().backward()
    assert net.blocks[0].qkv.weight.grad is not None
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    sd = net.state_dict()
    assert list(sd) == ["embed", "blocks.0.qkv.weight", "blocks.0.qkv.bias", "blocks.1.qkv.weight", "blocks.1.qkv.bias", "running"]
    other = Net()
    weight = other.blocks[0].qkv.weight
    other.load_state_dict(sd)
    assert other.blocks[0].qkv.weight is not None and weight.data_ptr() == other.blocks[0].qkv.weight.data_ptr()
    for k in sd:
        np.testing.assert_array_equal(other.state_dict()[k].numpy(), sd[k].numpy())
    bad = dict(sd)
    bad.pop("running")
    bad["extra"] = fg.ones(1)
    with pytest.raises(fg.InvalidArgumentError, match="missing keys: running; unexpected keys: extra"):
        other.load_state_dict(bad)
    other.load_state_dict(bad, strict=False)  # tolerated without strict
    bad["embed"] = fg.ones(2, 2)
    with pytest.raises(fg.InvalidArgumentError, match=r"shape mismatches: embed: checkpoint \(2, 2\) vs model \(3, 4\)"):
        other.load_state_dict(bad, strict=False)


def test_repr_is_a_tree_with_parameter_counts():
    text = repr(Net())
    assert text.startswith("Net(")
    assert "(blocks): ModuleList(" in text and "(qkv): Linear(in_features=4, out_features=12, bias=True)" in text
    assert "(drop): Dropout(p=0.5)" in text and text.rstrip().endswith("# 132 parameters")


def test_module_without_forward_and_without_init():
    with pytest.raises(fg.FlowgradError, match="this module has no forward; subclasses of fg.nn.Module define forward"):
        nn.Module()(fg.ones(1))

    class Forgot(nn.Module):
        def __init__(self):
            pass

    with pytest.raises(TypeError):
        Forgot().fc = nn.Linear(1, 1)


def test_python_module_held_only_by_cpp_survives_gc():
    class Double(nn.Module):
        def forward(self, x):
            return x * 2

    inner = Double()
    ref = weakref.ref(inner)
    seq = nn.Sequential(inner, nn.Identity())
    del inner
    gc.collect()
    assert ref() is not None  # C++ keeps the Python half alive
    np.testing.assert_array_equal(seq(fg.ones(3)).numpy(), [2, 2, 2])
    assert isinstance(seq[0], Double)
    del seq
    gc.collect()
    assert ref() is None  # and releases it with the container


def test_python_module_keeps_its_python_state_through_cpp():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x + 1

    seq = nn.Sequential(Counter(), Counter())
    seq(fg.zeros(2))
    seq(fg.zeros(2))
    assert [m.calls for m in seq] == [2, 2]


def test_containers_reject_none_and_non_modules():
    with pytest.raises(TypeError, match="Sequential: argument 1 must be a Module, got NoneType"):
        nn.Sequential(nn.Linear(3, 4), None)
    with pytest.raises(TypeError, match="ModuleList: argument 0 must be a Module, got int"):
        nn.ModuleList([3])
    seq = nn.Sequential(nn.Linear(3, 4))
    with pytest.raises(TypeError, match="Sequential: argument 1 must be a Module, got NoneType"):
        seq.append(None)
    seq.register_module("1", None)  # a None child reserves the name; calling it is an error
    with pytest.raises(fg.InvalidArgumentError, match="Sequential: module '1' is None"):
        seq(fg.ones(2, 3))
    assert "(1): None" in repr(seq)


def test_a_module_cannot_contain_itself_through_its_children():
    outer, inner = nn.Sequential(), nn.Sequential()
    outer.append(inner)
    with pytest.raises(fg.InvalidArgumentError, match="would make this Sequential contain itself"):
        inner.append(outer)
    with pytest.raises(fg.InvalidArgumentError, match="a module cannot contain itself"):
        outer.register_module("me", outer)


def test_repr_of_a_deep_nesting_is_indented_per_level():
    depth = 300
    m = nn.Linear(2, 2)
    for _ in range(depth):
        m = nn.Sequential(m)
    expected = ["  " * i + ("(0): " if i else "") + "Sequential(" for i in range(depth)]
    expected.append("  " * depth + "(0): Linear(in_features=2, out_features=2, bias=True)  # 6 parameters")
    expected += ["  " * i + ")  # 6 parameters" for i in reversed(range(depth))]
    assert repr(m).split("\n") == expected


def test_repr_counts_shared_parameters_once_per_subtree():
    lin = nn.Linear(2, 3)
    text = repr(nn.Sequential(lin, nn.Sequential(lin, nn.ReLU())))
    assert text.split("\n") == [
        "Sequential(",
        "  (0): Linear(in_features=2, out_features=3, bias=True)  # 9 parameters",
        "  (1): Sequential(",
        "    (0): Linear(in_features=2, out_features=3, bias=True)  # 9 parameters",
        "    (1): ReLU()",
        "  )  # 9 parameters",
        ")  # 9 parameters"]


def test_module_trees_deeper_than_the_limit_raise_instead_of_crashing():
    # 100 000 nested modules used to overflow the stack in forward, repr, parameters, state_dict
    # and destruction; now building one bottom-up stops at the depth limit, and one built
    # top-down (which registration cannot see) raises on use and is freed without recursion.
    out = run_isolated("""
        import pytest
        m = fg.nn.Identity()
        with pytest.raises(fg.InvalidArgumentError, match="would nest modules more than 1000 levels deep"):
            for _ in range(100000):
                m = fg.nn.Sequential(m)
        assert m(fg.ones(2)).shape == (2,) and len(m.state_dict()) == 0  # 1000 levels still work
        root = cur = fg.nn.Sequential()
        for _ in range(100000):
            nxt = fg.nn.Sequential(fg.nn.Linear(1, 1))
            cur.append(nxt)
            cur = nxt
        del cur, nxt
        for use in (lambda: root(fg.ones(1, 1)), lambda: repr(root), root.parameters, root.state_dict,
                    root.named_modules, lambda: root.train(False)):
            with pytest.raises(fg.InvalidArgumentError, match="more than 1000 levels deep"):
                use()
        del root
        print("done")
    """)
    assert out.strip() == "done"


class WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("steps", fg.tensor([7]))               # int64: never converted
        self.register_buffer("scale", fg.tensor([0.5, 2.0]))        # float32 buffer: converted

    def forward(self, x):
        return self.fc(x) * self.scale


@pytest.mark.parametrize("convert", [lambda m: m.to(fg.float64), lambda m: m.double(),
                                     lambda m: m.to(dtype="float64"), lambda m: m.to(device="cpu", dtype=fg.float64)])
def test_module_to_dtype_converts_floating_tensors_in_place(convert):
    fg.manual_seed(0)
    m = WithBuffers()
    opt = fg.optim.SGD(m.parameters(), lr=0.1)
    x = np.random.default_rng(0).standard_normal((4, 3))
    expected = m(fg.tensor(x.astype(np.float32))).numpy()
    m(fg.tensor(x.astype(np.float32))).sum().backward()
    assert convert(m) is m
    assert [p.dtype for p in m.parameters()] == [fg.float64, fg.float64]
    assert m.fc.weight.grad.dtype == fg.float64  # gradients convert with their tensors
    assert m.steps.dtype == fg.int64 and m.scale.dtype == fg.float64
    out = m(fg.tensor(x))
    assert out.dtype == fg.float64
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6)
    before = m.fc.weight.numpy().copy()
    opt.step()  # the optimizer built before the conversion still holds (and updates) the same tensors
    np.testing.assert_allclose(m.fc.weight.numpy(), before - 0.1 * m.fc.weight.grad.numpy())


def test_module_float_half_bfloat16_and_back():
    m = WithBuffers()
    for method, dtype in (("half", fg.float16), ("bfloat16", fg.bfloat16), ("float", fg.float32)):
        getattr(m, method)()
        assert {p.dtype for p in m.parameters()} == {dtype} and m.scale.dtype == dtype and m.steps.dtype == fg.int64


def test_module_to_rejects_what_is_neither_device_nor_dtype():
    m = WithBuffers()
    with pytest.raises(fg.DeviceError, match="to: unknown device 'gpu7' \\(expected 'cpu', 'cuda' or 'cuda:N'\\)"):
        m.to("gpu7")
    with pytest.raises(fg.DTypeError, match="to: expected a flowgrad dtype such as fg.float32, got int 3"):
        m.to(dtype=3)
    assert m.fc.weight.dtype == fg.float32 and m.cpu() is m


def test_module_cuda_and_to_device(device):
    m = WithBuffers()
    if device == "cpu":
        if not fg.cuda.is_available():
            with pytest.raises(fg.DeviceError):
                m.cuda()
        return
    assert m.cuda() is m and m.fc.weight.device.type == "cuda" and m.steps.device.type == "cuda"
    assert m.to("cpu", dtype=fg.float64).fc.weight.device.type == "cpu" and m.fc.weight.dtype == fg.float64
