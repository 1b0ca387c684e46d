"""Non-native (big-endian on x86/ARM) NumPy arrays at the NumPy/DLPack boundary: fg.tensor copies
and converts them; from_numpy and from_dlpack, which share memory, raise fg.DTypeError."""
import sys

import numpy as np
import pytest

import flowgrad as fg

SWAPPED = ">" if sys.byteorder == "little" else "<"


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8", "i4", "i8"])
def test_tensor_converts_non_native_arrays(dtype):
    values = np.array([[1.5, -2.0, 3.0], [4.0, 0.0, -7.0]]).astype(dtype)
    swapped = values.astype(SWAPPED + dtype)
    assert not swapped.dtype.isnative
    t = fg.tensor(swapped)
    assert t.dtype == fg.tensor(values).dtype
    np.testing.assert_array_equal(t.numpy(), values)
    np.testing.assert_array_equal(fg.tensor(swapped[:, ::2]).numpy(), values[:, ::2])  # a strided view
    np.testing.assert_array_equal(fg.tensor(swapped, dtype=fg.float64).numpy(), values.astype(np.float64))
    assert fg.tensor(np.array([1.0, 2.0], SWAPPED + "f4")).tolist() == [1.0, 2.0]  # the reproducer


def test_shared_memory_entry_points_raise_on_non_native_arrays():
    swapped = np.array([1.0, 2.0], SWAPPED + "f4")
    with pytest.raises(fg.DTypeError, match=r"from_numpy: dtype dtype\('[<>]f4'\) is not in the machine's byte "
                                           r"order .* use fg.tensor\(array\)"):
        fg.from_numpy(swapped)
    with pytest.raises(fg.DTypeError, match=r"from_dlpack: dtype .* is not in the machine's byte order"):
        fg.from_dlpack(swapped)
    native = np.array([1.0, 2.0], np.float32)
    assert fg.from_numpy(native).tolist() == [1.0, 2.0] and fg.from_dlpack(native).tolist() == [1.0, 2.0]
    assert fg.from_numpy(np.array([True, False], "|b1")).tolist() == [True, False]  # one byte: no order
