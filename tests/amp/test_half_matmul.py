"""matmul on float16/bfloat16 inputs: float32 accumulation, one rounding of the result (the CPU
multiplies float32 copies; CUDA calls cublasGemmEx / cublasGemmStridedBatchedEx)."""
import numpy as np
import pytest

import flowgrad as fg

HALVES = [fg.float16, fg.bfloat16]


def rounded(a, dtype):
    """a rounded to float32, then to the half dtype (nearest, ties to even) and back: the values a
    half tensor holds. NumPy has float16; bfloat16 is float32's upper 16 bits, rounded here."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == fg.float16:
        return a.astype(np.float16).astype(np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("shapes", [((45, 65), (65, 33)), ((3, 7, 5), (3, 5, 9)), ((4, 1, 6, 5), (3, 5, 2)),
                                    ((2, 0, 4), (2, 4, 3)), ((1, 1), (1, 1))])
def test_half_matmul_matches_float32_reference_rounded_once(device, dtype, shapes):
    rng = np.random.default_rng(0)
    a32, b32 = (rounded(rng.uniform(-2, 2, s).astype(np.float32), dtype) for s in shapes)
    a = fg.tensor(a32).to(dtype).to(device)
    b = fg.tensor(b32).to(dtype).to(device)
    out = a @ b
    assert out.dtype == dtype and out.shape == np.matmul(a32, b32).shape
    reference = np.matmul(a32.astype(np.float64), b32.astype(np.float64))
    got = out.float().cpu().numpy()
    ulp = np.abs(rounded(reference, dtype) - reference) * 2 + 1e-30  # about one half-precision ulp
    assert (np.abs(got - reference) <= ulp + 1e-5 * np.abs(reference)).all()


def test_half_matmul_on_transposed_and_broadcast_views(device):
    rng = np.random.default_rng(1)
    a32 = rounded(rng.uniform(-1, 1, (6, 4, 5)).astype(np.float32), fg.bfloat16)
    b32 = rounded(rng.uniform(-1, 1, (4, 7)).astype(np.float32), fg.bfloat16)
    a = fg.tensor(a32).to(fg.bfloat16).to(device)
    bt = fg.tensor(np.ascontiguousarray(b32.T)).to(fg.bfloat16).to(device).t()  # (4, 7) stored transposed
    expected = rounded(np.matmul(a32.transpose(0, 2, 1).astype(np.float64), b32), fg.bfloat16)
    got = (a.transpose(1, 2) @ bt.expand(6, 4, 7)).float().cpu().numpy()
    np.testing.assert_allclose(got, expected, rtol=2 ** -7, atol=1e-6)


def test_half_matmul_gradients_reach_float32_parameters(device):
    fg.manual_seed(0)
    w = fg.randn(5, 3, device=device, requires_grad=True)
    x = fg.randn(4, 5, device=device).bfloat16()
    (x @ w.bfloat16()).float().sum().backward()
    assert w.grad.dtype == fg.float32
    expected = np.repeat(x.float().cpu().numpy().sum(0, keepdims=True).T, 3, axis=1)
    np.testing.assert_allclose(w.grad.cpu().numpy(), expected, rtol=2 ** -7)
