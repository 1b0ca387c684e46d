"""Read-only memory at the NumPy/DLPack boundary: a read-only source gives a read-only tensor that
reads and computes out of place, while every in-place write (ops, t[idx] = v, optimizer steps)
raises naming the op instead of writing into immutable memory."""
import mmap

import numpy as np
import pytest

import flowgrad as fg

READ_ONLY = "cannot write into a read-only tensor"


def read_only_tensor():
    data = np.arange(6, dtype=np.float32).tobytes()
    return fg.from_numpy(np.frombuffer(data, np.float32).reshape(2, 3)), data


WRITES = {
    "fill_": lambda t: t.fill_(1.0), "zero_": lambda t: t.zero_(), "add_": lambda t: t.add_(1.0),
    "mul_": lambda t: t.__imul__(2.0), "clamp_": lambda t: t.clamp_(0.0, 1.0), "copy_": lambda t: t.copy_(fg.ones(3)),
    "masked_fill_": lambda t: t.masked_fill_(fg.ones(3, dtype=fg.bool), 0.0),
    "index_put_": lambda t: t.__setitem__((0, 1), 5.0), "uniform_": lambda t: t.uniform_(),
}


@pytest.mark.parametrize("op", list(WRITES))
def test_in_place_writes_into_read_only_memory_raise(op):
    t, data = read_only_tensor()
    with pytest.raises(fg.InvalidArgumentError, match=f"{op}: {READ_ONLY} \\(float32 \\(2, 3\\) on cpu shares memory "
                                                      "with a read-only NumPy array or buffer\\)"):
        WRITES[op](t)
    assert t._version == 0 and np.frombuffer(data, np.float32).tolist() == [0, 1, 2, 3, 4, 5]


def test_read_only_tensors_compute_out_of_place():
    t, _ = read_only_tensor()
    fg.testing.assert_close(t * 2 + 1, np.arange(6.0).reshape(2, 3) * 2 + 1)
    assert t.sum().item() == 15.0
    assert not t.numpy().flags.writeable and memoryview(t).readonly
    copy = fg.tensor(t.numpy())  # fg.tensor always copies: writable
    copy.fill_(1.0)
    assert copy.sum().item() == 6.0


def test_read_only_mmap_does_not_crash(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        t = fg.from_numpy(np.frombuffer(mm, np.float32))
        with pytest.raises(fg.InvalidArgumentError, match=f"fill_: {READ_ONLY}"):
            t.fill_(1.0)
        assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
        del t


def test_optimizer_step_on_read_only_parameter_raises():
    t, data = read_only_tensor()
    p = fg.nn.Parameter(t)
    p.grad = fg.ones(2, 3)
    for opt in (fg.optim.SGD([p], lr=0.1), fg.optim.Adam([p])):
        with pytest.raises(fg.InvalidArgumentError, match=f"(sgd|adam)_update(_multi)?: {READ_ONLY}"):
            opt.step()
    assert np.frombuffer(data, np.float32).tolist() == [0, 1, 2, 3, 4, 5]


def test_writable_numpy_arrays_stay_writable_and_shared():
    a = np.zeros(3, dtype=np.float32)
    fg.from_numpy(a).add_(2.0)
    assert a.tolist() == [2.0, 2.0, 2.0]


def test_dlpack_carries_the_read_only_flag():
    ro = np.frombuffer(np.arange(3, dtype=np.float64).tobytes(), np.float64)
    t = fg.from_dlpack(ro)
    with pytest.raises(fg.InvalidArgumentError, match=f"add_: {READ_ONLY}"):
        t.add_(1.0)
    back = np.from_dlpack(t)
    assert back.tolist() == [0.0, 1.0, 2.0] and not back.flags.writeable
    with pytest.raises(fg.InvalidArgumentError, match="__dlpack__: a read-only tensor can only be exported as a "
                                                      "versioned DLPack capsule"):
        t.__dlpack__()
    w = fg.from_dlpack(np.zeros(2))
    w.fill_(1.0)
    assert w.tolist() == [1.0, 1.0]
