"""uint8, int8 and int16: storage, kernels, conversions, NumPy/DLPack/safetensors interop and
promotion; the default float dtype (integer true division, Python floats)."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import ODD_SHAPES, make, on

SMALL = [(fg.uint8, np.uint8), (fg.int8, np.int8), (fg.int16, np.int16)]


def strided(a):
    """A tensor with a's values and every other element skipped in memory (stride 2)."""
    return fg.tensor(np.stack([a, a], axis=-1))[..., 0]


@pytest.fixture(autouse=True)
def default_dtype_restored():
    yield
    fg.set_default_dtype(fg.float32)


@pytest.mark.parametrize("dt,npdt", SMALL)
def test_small_integer_dtypes_round_trip(dt, npdt):
    assert dt.itemsize == np.dtype(npdt).itemsize and not dt.is_floating_point
    assert repr(dt) == f"flowgrad.{np.dtype(npdt).name}"
    a = np.arange(-6, 6, dtype=np.int64).astype(npdt).reshape(3, 4)
    t = fg.from_numpy(a)
    assert t.dtype == dt and t.data_ptr() == a.ctypes.data  # zero copy
    assert t.numpy().dtype == npdt and np.shares_memory(t.numpy(), a)
    assert fg.tensor(a).tolist() == a.tolist() and fg.tensor(a)[1, 2].item() == a[1, 2]
    assert np.asarray(memoryview(t)).dtype == npdt  # buffer protocol
    np.testing.assert_array_equal(fg.from_dlpack(a).numpy(), a)
    np.testing.assert_array_equal(np.from_dlpack(t), a)
    assert f"dtype=flowgrad.{np.dtype(npdt).name}" in repr(t)
    assert fg.zeros(2, dtype=dt).dtype == dt and fg.full((2,), 7, dtype=dt).tolist() == [7, 7]


def test_uint8_images_zero_copy_and_scale():
    img = np.random.default_rng(0).integers(0, 256, size=(2, 5, 7, 3), dtype=np.uint8)
    t = fg.from_numpy(img)
    assert t.dtype == fg.uint8
    x = t.permute(0, 3, 1, 2) / 255  # NHWC uint8 -> NCHW float
    assert x.dtype == fg.float32 and x.shape == (2, 3, 5, 7)
    np.testing.assert_allclose(x.numpy(), img.transpose(0, 3, 1, 2) / np.float32(255), rtol=1e-6)
    assert (t.float() * 0.5).dtype == fg.float32 and (t * 0.5).dtype == fg.float32
    assert t.byte().dtype == fg.uint8 and t.char().dtype == fg.int8 and t.short().dtype == fg.int16


@pytest.mark.parametrize("dt,npdt", SMALL)
@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_small_integer_kernels_match_numpy(rng, device, dt, npdt, shape):
    lo = 0 if npdt == np.uint8 else -50
    a, b = make(rng, shape, npdt, lo, 50), make(rng, shape, npdt, 1, 50)
    ta, tb = on(device, fg.tensor(a)), on(device, strided(b))
    for got, want in ((ta + tb, a + b), (ta - tb, a - b), (ta * tb, a * b), (-ta, -a),
                      (fg.maximum(ta, tb), np.maximum(a, b)), (ta.abs(), np.abs(a)), (ta < tb, a < b),
                      (ta.clamp(-3, 7), np.clip(a.astype(np.int64), -3, 7).astype(npdt)), (ta * 3, a * npdt(3))):
        assert got.dtype == fg.tensor(want).dtype
        np.testing.assert_array_equal(got.cpu().numpy(), want)  # wraps around like NumPy
    np.testing.assert_allclose((ta / tb).cpu().numpy(), (a / b).astype(np.float32), rtol=1e-6)
    assert fg.sum(ta).dtype == fg.int64 and fg.sum(ta).item() == a.sum(dtype=np.int64)
    if a.size:
        np.testing.assert_array_equal(fg.amax(ta, dim=-1).cpu().numpy(), a.max(axis=-1))
        np.testing.assert_allclose(fg.mean(ta).item(), a.mean(), rtol=1e-6)
    np.testing.assert_array_equal(ta.double().cpu().numpy(), a.astype(np.float64))


@pytest.mark.parametrize("npdt", [np.uint8, np.int8, np.int16])
def test_small_integer_indexing_ops(rng, device, npdt):
    x = make(rng, (4, 6), npdt, 0, 100)
    idx = make(rng, (9, 6), np.int64, 0, 4)
    src = make(rng, (9, 6), npdt, 0, 100)
    expected = x.copy()
    np.add.at(expected, (idx, np.arange(6)), src)  # repeated indices accumulate (and wrap)
    out = fg.scatter_add(on(device, fg.tensor(x)), 0, on(device, fg.tensor(idx)), on(device, fg.tensor(src)))
    np.testing.assert_array_equal(out.cpu().numpy(), expected)
    np.testing.assert_array_equal(fg.gather(on(device, fg.tensor(x)), 0, on(device, fg.tensor(idx))).cpu().numpy(),
                                  np.take_along_axis(x, idx, 0))
    np.testing.assert_array_equal(fg.where(on(device, fg.tensor(x > 50)), on(device, fg.tensor(x)), 0).cpu().numpy(),
                                  np.where(x > 50, x, 0))
    v, i = on(device, fg.tensor(x)).max(dim=1)
    np.testing.assert_array_equal(v.cpu().numpy(), x.max(1))


def test_conversions_saturate_and_wrap_like_the_rest():
    f = fg.tensor([-300.0, -1.5, 0.0, 254.6, 1000.0, np.nan])
    assert f.to(fg.uint8).tolist() == [0, 0, 0, 254, 255, 0]  # saturating, NaN -> 0
    assert f.to(fg.int8).tolist() == [-128, -1, 0, 127, 127, 0]
    assert fg.tensor([70000, -70000]).to(fg.int16).tolist() == [4464, -4464]  # integers wrap (two's complement)
    assert fg.tensor([250], dtype=fg.uint8).clamp(-10, 300).tolist() == [250]  # out-of-range bounds
    assert (fg.tensor([250], dtype=fg.uint8) + 10).tolist() == [4]


@pytest.mark.parametrize("da,db", [(np.uint8, np.int8), (np.uint8, np.int16), (np.int8, np.int16),
                                   (np.uint8, np.int32), (np.int8, np.int64), (np.uint8, np.float32),
                                   (np.int16, np.float32), (np.int16, np.float16), (np.int8, np.float16),
                                   (np.bool_, np.uint8), (np.uint8, np.float64), (np.int32, np.float32)])
def test_promotion_of_small_integers_matches_numpy(da, db):
    a, b = np.ones(3, dtype=da), np.ones(3, dtype=db)
    out = fg.add(fg.tensor(a), fg.tensor(b))
    assert np.dtype(out.numpy().dtype) == np.result_type(a, b)
    assert fg.promote_types(fg.tensor(a).dtype, fg.tensor(b).dtype) == out.dtype


def test_promote_types_with_half_types():
    assert fg.promote_types(fg.int8, fg.float16) == fg.float16 == fg.promote_types(fg.uint8, fg.float16)
    assert fg.promote_types(fg.int16, fg.bfloat16) == fg.float32
    assert fg.promote_types(fg.uint8, fg.bfloat16) == fg.bfloat16


def test_integer_true_division_gives_the_default_float():
    t = fg.tensor([[1, 2, 3]])
    assert t.dtype == fg.int64 and (t / 255).dtype == fg.float32 and (t / t).dtype == fg.float32
    assert (t * 0.5).dtype == fg.float32 and (0.5 * t).dtype == fg.float32  # PyTorch, not NumPy's float64
    assert fg.exp(t).dtype == fg.float32 and fg.mean(t).dtype == fg.float32
    assert fg.get_default_dtype() == fg.float32 and fg.tensor([1.5]).dtype == fg.float32
    y = fg.nn.Linear(3, 2)(fg.tensor([[1, 2, 3]]) / 255)
    assert y.dtype == fg.float32
    fg.set_default_dtype(fg.float64)
    assert fg.get_default_dtype() == fg.float64
    assert (t / 255).dtype == fg.float64 and fg.tensor([1.5]).dtype == fg.float64
    assert fg.zeros(2).dtype == fg.float64 and fg.arange(0.0, 1.0, 0.5).dtype == fg.float64
    assert fg.arange(3).dtype == fg.int64 and fg.full((1,), 2).dtype == fg.int64
    assert fg.tensor(np.ones(2, dtype=np.float32)).dtype == fg.float32  # arrays keep their dtype
    with pytest.raises(fg.DTypeError, match="set_default_dtype: expected float32 or float64, got int32"):
        fg.set_default_dtype(fg.int32)


@pytest.mark.parametrize("dt,npdt,name", [(fg.uint8, np.uint8, "U8"), (fg.int8, np.int8, "I8"),
                                          (fg.int16, np.int16, "I16")])
def test_safetensors_names(tmp_path, dt, npdt, name):
    import json
    import safetensors.numpy
    a = np.arange(-4, 8).astype(npdt).reshape(3, 4)
    path = tmp_path / "x.safetensors"
    fg.save({"x": fg.tensor(a)}, path)
    header = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])
    assert header["x"]["dtype"] == name
    np.testing.assert_array_equal(safetensors.numpy.load_file(str(path))["x"], a)
    safetensors.numpy.save_file({"y": a}, str(tmp_path / "y.safetensors"))
    back = fg.load(tmp_path / "y.safetensors")["y"]
    assert back.dtype == dt and back.tolist() == a.tolist()


def test_unsupported_numpy_dtype_names_the_supported_ones():
    with pytest.raises(fg.DTypeError, match="uint8, int8, int16, int32"):
        fg.tensor(np.ones(2, dtype=np.uint16))
