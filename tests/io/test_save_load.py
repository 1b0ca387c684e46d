"""fg.save / fg.load beyond flat tensor dicts: whole modules, nested containers, numbers,
strings and NumPy arrays in flowgrad's pickle container; paths and file objects; map_location
in PyTorch's forms; weights_only's allow-list; damaged files. A flat {name: tensor} dict stays a
safetensors file (tests/io/test_checkpoint.py checks that format)."""
import collections
import io
import json
import os
import pickle
import struct

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn
from flowgrad import _serialization


class Net(nn.Module):
    """A Python module with a C++ child, an own parameter, a buffer and a plain attribute."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.scale = nn.Parameter(fg.full((2,), 1.5))
        self.register_buffer("offset", fg.arange(2, dtype=fg.float32))
        self.note = "kept"

    def forward(self, x):
        return self.fc(x) * self.scale + self.offset


def round_trip(obj, **load_args):
    buffer = io.BytesIO()
    fg.save(obj, buffer)
    buffer.seek(0)
    return fg.load(buffer, **load_args)


def test_a_flat_tensor_dict_is_still_safetensors_on_every_target(tmp_path):
    tensors = {"w": fg.arange(6, dtype=fg.float32).reshape(2, 3), "b": fg.tensor([True, False])}
    buffer = io.BytesIO()
    fg.save(tensors, buffer)
    data = buffer.getvalue()
    header_size = struct.unpack("<Q", data[:8])[0]  # the safetensors layout: u64 size, JSON header, bytes
    header = json.loads(data[8:8 + header_size])
    assert header["w"] == {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
    with open(tmp_path / "open.safetensors", "wb") as file:
        fg.save(tensors, file)
    fg.save(tensors, tmp_path / "path.safetensors")
    assert (tmp_path / "open.safetensors").read_bytes() == data == (tmp_path / "path.safetensors").read_bytes()
    for source in (io.BytesIO(data), tmp_path / "path.safetensors", str(tmp_path / "open.safetensors")):
        back = fg.load(source)
        assert list(back) == ["w", "b"]
        np.testing.assert_array_equal(back["w"].numpy(), np.arange(6).reshape(2, 3))
    with open(tmp_path / "path.safetensors", "rb") as file:
        assert fg.load(file)["b"].tolist() == [True, False]


def test_nested_containers_numbers_strings_and_arrays(tmp_path):
    t = fg.tensor([[1.0, 2.0], [3.0, 4.0]])
    obj = {"tensors": [t, t.t(), fg.arange(3)], "numbers": (1, 2.5, True, None, 3 + 4j), "text": "é",
           "array": np.arange(6, dtype=np.int16).reshape(2, 3), "order": collections.OrderedDict(b=1, a=t),
           "set": {1, 2}, "dtype": fg.bfloat16, "step": 7}
    for target in (io.BytesIO(), tmp_path / "obj.pt"):
        fg.save(obj, target)
        if isinstance(target, io.BytesIO):
            target.seek(0)
        back = fg.load(target)
        assert back["numbers"] == (1, 2.5, True, None, 3 + 4j) and back["text"] == "é" and back["step"] == 7
        assert back["set"] == {1, 2} and back["dtype"] == fg.bfloat16
        assert isinstance(back["order"], collections.OrderedDict) and list(back["order"]) == ["b", "a"]
        np.testing.assert_array_equal(back["array"], obj["array"])
        assert back["array"].dtype == np.int16
        np.testing.assert_array_equal(back["tensors"][1].numpy(), [[1.0, 3.0], [2.0, 4.0]])  # a view: its values
        assert back["tensors"][2].dtype == fg.int64
        assert back["tensors"][0] is back["order"]["a"]  # one tensor under two entries comes back shared
    assert not [p for p in os.listdir(tmp_path) if "tmp" in p]  # written through a scratch file, renamed


def test_flags_survive_and_a_parameter_stays_a_leaf():
    p = nn.Parameter(fg.ones(2))
    g = fg.ones(3, requires_grad=True)
    back = round_trip([p, g, g * 2])
    assert isinstance(back[0], nn.Parameter) and back[0].is_leaf and back[0].requires_grad
    assert back[1].requires_grad and back[1].is_leaf
    # a computed tensor: its values and requires_grad on a new leaf (PyTorch's), not its history
    assert back[2].is_leaf and back[2].requires_grad and back[2].tolist() == [2.0, 2.0, 2.0]


def test_whole_module_needs_weights_only_false(tmp_path, rng):
    model = Net()
    x = fg.tensor(rng.standard_normal((4, 3)), dtype=fg.float32)
    fg.save(model, tmp_path / "model.pt")
    with pytest.raises(fg.CheckpointError, match=r"weights_only=True refuses flowgrad._pickle._rebuild_module \(a whole module\) .* pass "
                                                 r"weights_only=False to load whole modules"):
        fg.load(tmp_path / "model.pt")
    with pytest.raises(pickle.UnpicklingError):  # PyTorch's type too
        fg.load(tmp_path / "model.pt", weights_only=True)
    back = fg.load(tmp_path / "model.pt", weights_only=False)
    assert type(back) is Net and back.note == "kept" and list(back.state_dict()) == list(model.state_dict())
    fg.testing.assert_close(back(x), model(x))
    assert back.fc.weight is not model.fc.weight and isinstance(back.scale, nn.Parameter)
    for module in (nn.Sequential(nn.Linear(3, 3), nn.ReLU()), nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0)):
        copy = round_trip(module, weights_only=False)
        inputs = fg.tensor(rng.standard_normal((2, 1, 3 if isinstance(module, nn.Sequential) else 4)),
                           dtype=fg.float32)
        fg.testing.assert_close(copy(inputs), module(inputs))


def test_optimizer_state_dict_round_trip(rng):
    model = nn.Linear(3, 2)
    opt = fg.optim.Adam(model.parameters(), lr=0.01)
    model(fg.tensor(rng.standard_normal((4, 3)), dtype=fg.float32)).sum().backward()
    opt.step()
    saved = round_trip({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3})
    twin = nn.Linear(3, 2)
    twin.load_state_dict(saved["model"])
    twin_opt = fg.optim.Adam(twin.parameters(), lr=0.5)
    twin_opt.load_state_dict(saved["optimizer"])
    assert twin_opt.param_groups[0]["lr"] == 0.01 and saved["epoch"] == 3
    for a, b in zip(twin.parameters(), model.parameters()):
        fg.testing.assert_close(a, b)
    state, twin_state = opt.state_dict()["state"], twin_opt.state_dict()["state"]
    for index in state:
        for name, value in state[index].items():
            fg.testing.assert_close(twin_state[index][name], value)


def test_map_location_forms():
    t = fg.tensor([1.0, 2.0])
    for location in ("cpu", fg.device("cpu"), {"cpu": "cpu"}, {"cuda:1": "cuda:0"}):
        back = round_trip({"x": [t]}, map_location=location)["x"][0]
        assert back.device == fg.device("cpu") and back.tolist() == [1.0, 2.0]
    seen = []

    def doubled(tensor, location):
        seen.append((str(tensor.device), location))
        return tensor * 2

    assert round_trip([t], map_location=doubled)[0].tolist() == [2.0, 4.0] and seen == [("cpu", "cpu")]
    assert round_trip([t], map_location=lambda tensor, location: None)[0].tolist() == [1.0, 2.0]
    assert round_trip({"w": t}, map_location=doubled)["w"].tolist() == [2.0, 4.0]  # safetensors too
    assert round_trip({"w": t}, device="cpu")["w"].tolist() == [1.0, 2.0]
    with pytest.raises(fg.InvalidArgumentError, match="map_location returned str, expected a Tensor or None"):
        round_trip([t], map_location=lambda tensor, location: "cpu")
    with pytest.raises(fg.InvalidArgumentError, match="give map_location= or device=, not both"):
        round_trip([t], map_location="cpu", device="cpu")


@pytest.mark.skipif(fg.cuda.is_available(), reason="checks the error of a machine without a usable GPU")
def test_map_location_to_a_missing_device_raises_the_device_error():
    # A CPU-only build cannot allocate there; a CUDA build without a GPU or driver says why cuda:0 is unusable.
    with pytest.raises(fg.DeviceError, match=r"cannot allocate on cuda:0|cuda:0 is not available"):
        round_trip([fg.ones(1)], map_location="cuda")


class _Exploit:
    """What a hostile file would hold: unpickling it runs a function of its choosing."""

    def __reduce__(self):
        return os.mkdir, ("pwned-by-pickle",)


def test_weights_only_refuses_what_could_run_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hostile = _serialization.MAGIC + pickle.dumps({}) + pickle.dumps({"x": _Exploit()})
    with pytest.raises(fg.CheckpointError, match=r"weights_only=True refuses (posix|os|nt)\.mkdir"):
        fg.load(io.BytesIO(hostile))
    assert not (tmp_path / "pwned-by-pickle").exists()
    table_with_a_class = _serialization.MAGIC + pickle.dumps({1: _Exploit()}) + pickle.dumps(None)
    for weights_only in (True, False):  # the tensor table takes no class, whatever weights_only says
        with pytest.raises(fg.CheckpointError, match=r"is damaged .*the tensor table names (posix|os|nt)\.mkdir"):
            fg.load(io.BytesIO(table_with_a_class), weights_only=weights_only)
    assert not (tmp_path / "pwned-by-pickle").exists()


def test_damaged_files_raise_checkpoint_errors(tmp_path):
    good = io.BytesIO()
    fg.save([fg.ones(3)], good)
    data = good.getvalue()
    short_table = _serialization.MAGIC + pickle.dumps({1: ("float32", (3,), b"\0" * 8, False, False, "cpu")})
    cases = [(data[:-4], "truncated"), (short_table + pickle.dumps(None), "the tensor table is malformed"),
             (_serialization.MAGIC + pickle.dumps({}) + pickle.dumps(None)[:1], "damaged"),
             (_serialization.MAGIC + pickle.dumps([]) + pickle.dumps(None), "the tensor table is malformed")]
    for bad, message in cases:
        with pytest.raises(fg.CheckpointError, match=message):
            fg.load(io.BytesIO(bad))
    payload = io.BytesIO()
    pickler = _serialization._Pickler(payload, 4)
    pickler.dump(fg.ones(1))
    dangling = _serialization.MAGIC + pickle.dumps({}) + payload.getvalue()  # a reference the table lacks
    with pytest.raises(fg.CheckpointError, match="a tensor reference .* that the tensor table lacks"):
        fg.load(io.BytesIO(dangling))
    (tmp_path / "torch.pt").write_bytes(b"PK\x03\x04" + b"\0" * 30)
    with pytest.raises(fg.CheckpointError, match=r"torch.pt' is a zip archive \(PyTorch's torch.save format\?\)"):
        fg.load(tmp_path / "torch.pt")
    with pytest.raises(fg.CheckpointError):
        fg.load(io.BytesIO(b"not a checkpoint at all"))


def test_an_unwritable_path_raises_and_leaves_nothing(tmp_path):
    with pytest.raises(fg.CheckpointError, match=r"fg.save: cannot create '.*no_such_dir/x.pt'"):
        fg.save([fg.ones(1)], tmp_path / "no_such_dir" / "x.pt")
    with pytest.raises(fg.CheckpointError, match="fg.save: cannot create"):
        fg.save([fg.ones(1)], str(tmp_path / "a\0b.pt"))
    assert list(tmp_path.iterdir()) == []


def test_metadata_belongs_to_tensor_dicts_only():
    with pytest.raises(fg.InvalidArgumentError, match=r"metadata= is kept only with a \{name: tensor\} dict "
                                                      r"\(safetensors\), not with list"):
        fg.save([fg.ones(1)], io.BytesIO(), metadata={"a": "b"})
