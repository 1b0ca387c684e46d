"""Tensor surface: NumPy/buffer/DLPack interop, item/tolist/repr, properties, in-place ops, devices."""
import gc

import numpy as np
import pytest

import flowgrad as fg


def test_from_numpy_and_numpy_share_memory_both_ways():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = fg.from_numpy(a)
    a[0, 0] = 100
    assert t[0, 0].item() == 100
    n = t.numpy()
    n[1, 2] = -1
    assert a[1, 2] == -1
    assert n.ctypes.data == a.ctypes.data


def test_from_numpy_keeps_array_alive_and_handles_views():
    t = fg.from_numpy(np.arange(10.0)[::-2])  # negative stride view
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.arange(10.0)[::-2])
    np.testing.assert_array_equal((t * 1).numpy(), [9, 7, 5, 3, 1])
    u = fg.from_numpy(np.ones((3, 4))[:, 1:3])
    np.testing.assert_array_equal(u.contiguous().numpy(), np.ones((3, 2)))


def test_numpy_keeps_storage_alive():
    arr = (fg.arange(5) * 2).numpy()
    gc.collect()
    np.testing.assert_array_equal(arr, [0, 2, 4, 6, 8])


def test_unsupported_numpy_dtypes_raise():
    with pytest.raises(fg.DTypeError, match="unsupported NumPy dtype complex128"):
        fg.from_numpy(np.zeros(2, dtype=np.complex128))
    with pytest.raises(fg.DTypeError, match="NumPy has no bfloat16; convert first with .float"):
        fg.ones(2).bfloat16().numpy()


def test_array_protocol_and_buffer_protocol():
    t = fg.arange(6, dtype=fg.float64).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(t), np.arange(6.0).reshape(2, 3))
    assert np.asarray(t, dtype=np.float32).dtype == np.float32
    m = memoryview(t.t())
    assert m.format == "d" and m.shape == (3, 2) and m.strides == (8, 24)
    np.testing.assert_array_equal(np.array(m), np.arange(6.0).reshape(2, 3).T)


def test_dlpack_round_trips_with_numpy():
    t = fg.arange(12, dtype=fg.float32).reshape(3, 4)[:, 1:]
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:])
    a[0, 0] = 42
    assert t[0, 0].item() == 42  # shared memory
    back = fg.from_dlpack(np.arange(4, dtype=np.int32))
    assert back.dtype == fg.int32
    np.testing.assert_array_equal(back.numpy(), [0, 1, 2, 3])
    assert t.__dlpack_device__() == (1, 0)


def test_dlpack_legacy_capsule_and_unused_capsule_is_freed():
    t = fg.ones(3)
    legacy = t.__dlpack__()  # no max_version: an unversioned "dltensor" capsule
    assert "dltensor" in repr(legacy)
    versioned = t.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(versioned)
    del legacy, versioned
    gc.collect()

    class Legacy:  # a producer that only knows the unversioned protocol
        def __init__(self, src):
            self.src = src

        def __dlpack__(self):
            return self.src.__dlpack__()

    out = fg.from_dlpack(Legacy(fg.arange(3)))
    np.testing.assert_array_equal(out.numpy(), [0, 1, 2])
    with pytest.raises(fg.InvalidArgumentError, match="has no __dlpack__ method"):
        fg.from_dlpack([1, 2])


def test_item_tolist_len_and_conversions():
    t = fg.tensor([[1.5, 2.0], [3.0, 4.0]])
    assert t[0, 0].item() == 1.5 and isinstance(t[0, 0].item(), float)
    assert fg.tensor([3]).item() == 3 and isinstance(fg.tensor(7).item(), int)
    assert fg.tensor(True).item() is True
    assert t.tolist() == [[1.5, 2.0], [3.0, 4.0]]
    assert len(t) == 2 and float(t[1, 1]) == 4.0 and int(fg.tensor(5)) == 5
    with pytest.raises(fg.InvalidArgumentError, match="item: only one-element tensors"):
        t.item()


def test_python_number_conversions_follow_pytorch():
    assert int(fg.tensor(2.7)) == 2 and isinstance(int(fg.tensor([2.0])), int)
    assert float(fg.tensor(3)) == 3.0 and isinstance(float(fg.tensor(True)), float)
    assert bool(fg.tensor(0.5)) is True and bool(fg.tensor([0])) is False
    assert [10, 20, 30][fg.tensor(1)] == 20 and int(fg.tensor(4, dtype=fg.int32)) == 4
    with pytest.raises(fg.DTypeError, match="index: only integer tensors can be used as an index"):
        [1, 2][fg.tensor(1.0)]
    with pytest.raises(fg.InvalidArgumentError, match="int: item: only one-element tensors"):
        int(fg.zeros(2))
    with pytest.raises(ValueError, match="NaN"):
        int(fg.tensor(float("nan")))


def test_indexing_with_numpy_integer_arrays_like_numpy():
    a = np.arange(10.0).reshape(5, 2)
    t = fg.tensor(a)
    for key in (np.array([0, 1]), np.array([4, 0, 4]), (np.array([1, 3]), 1), np.int64(2), np.array(3),
                np.array([True, False, True, False, True]), slice(np.int64(1), np.int32(4))):
        np.testing.assert_array_equal(t[key].numpy(), a[key])
    with pytest.raises(TypeError, match="index: a slice bound must be an int, got str 'a'"):
        t["a":]
    with pytest.raises(fg.IndexOutOfRangeError):
        t[np.array([5])]


def test_tensor_constructor_infers_dtypes():
    assert fg.tensor([1.0, 2.0]).dtype == fg.float32  # Python floats: float32 like the rest of the API
    assert fg.tensor(np.array([1.0])).dtype == fg.float64  # NumPy arrays keep their dtype
    assert fg.tensor([1, 2]).dtype == fg.int64
    assert fg.tensor([True]).dtype == fg.bool
    assert fg.tensor([1, 2], dtype=fg.float16).dtype == fg.float16
    src = fg.ones(2)
    copy = fg.tensor(src)
    copy.fill_(3)
    assert src[0].item() == 1  # fg.tensor always copies
    with pytest.raises(fg.DTypeError, match="unknown dtype 'float8'"):
        fg.tensor([1], dtype="float8")


def test_repr_looks_like_numpy_with_metadata():
    assert repr(fg.tensor([1.0, 2.5])) == "tensor([1. , 2.5])"
    assert "dtype=flowgrad.float64" in repr(fg.ones(2, dtype=fg.float64))
    x = fg.ones(2, requires_grad=True)
    assert "requires_grad=True" in repr(x)
    assert "grad_fn=<MulBackward>" in repr(x * 2)
    assert repr(fg.float32) == "flowgrad.float32"
    assert "bfloat16" in repr(fg.ones(2).bfloat16())


def test_properties():
    t = fg.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.numel() == 24 and t.size(1) == 3
    assert t.stride() == (12, 4, 1) and t.is_contiguous()
    assert t.device == fg.device("cpu") and t.device == "cpu" and str(t.device) == "cpu"
    assert fg.device("cuda:1").index == 1 and fg.device("cuda").type == "cuda"
    assert t.dtype.itemsize == 4 and t.dtype.is_floating_point
    with pytest.raises(fg.DeviceError, match="unknown device 'gpu'"):
        fg.device("gpu")


def test_in_place_ops_and_their_guards():
    t = fg.zeros(2, 3)
    t.fill_(2.0)
    t[0].copy_(fg.tensor([1.0, 2.0, 3.0]))  # writes through the view
    np.testing.assert_array_equal(t.numpy(), [[1, 2, 3], [2, 2, 2]])
    t.zero_()
    assert t.sum().item() == 0
    w = fg.ones(3, requires_grad=True)
    with pytest.raises(fg.InvalidArgumentError, match="zero_: a leaf tensor that requires grad cannot be modified in place"):
        w.zero_()
    with fg.no_grad():
        w.fill_(5.0)
    assert w[0].item() == 5
    with pytest.raises(fg.ShapeError, match="copy_: source \\(4,\\) cannot be broadcast to destination \\(2, 3\\)"):
        t.copy_(fg.ones(4))


def test_cuda_is_unavailable_here_and_says_why():
    if fg.cuda.is_available():
        pytest.skip("a GPU is visible; this test covers machines without one")
    assert fg.cuda.device_count() == 0
    assert fg.cuda.unavailable_reason() != ""
    with pytest.raises(fg.DeviceError, match="cuda"):
        fg.ones(2, device="cuda")
    with pytest.raises(fg.DeviceError, match="to: copying from cpu to cuda:0"):
        fg.ones(2).cuda()


def test_threads_and_allocator_stats():
    n = fg.get_num_threads()
    fg.set_num_threads(1)
    assert fg.get_num_threads() == 1
    fg.set_num_threads(n)
    before = fg.cpu_memory_stats()["allocated"]
    keep = fg.empty(1 << 20)
    assert fg.cpu_memory_stats()["allocated"] >= before + (4 << 20)
    del keep
    assert fg.cpu_memory_stats()["cached"] >= 4 << 20
    fg.cpu_empty_cache()
    assert fg.cpu_memory_stats()["cached"] == 0
