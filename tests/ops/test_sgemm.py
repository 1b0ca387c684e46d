"""Float32 products on flowgrad's own AVX-512 GEMM (kernels/linalg/sgemm_cpu.cpp; FLOWGRAD_SGEMM):
fg.matmul, linear and their gradients against float64 NumPy on shapes the kernel takes (M >= 4,
N >= 32, M*N*K >= 2^18: smaller and skinnier ones stay on the BLAS; up to 8 rows through a
transposed B, x W^T, from 2^17 multiply-adds: dot products of rows), through transposed and
row-sliced views (leading dimensions past the row), on one and two threads; the same results as
the BLAS; the flag. tests/cpp/test_sgemm.cpp calls the kernel itself on every edge of its tile."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import flowgrad as fg
from conftest import run_isolated

F = fg.nn.functional
OWN = fg.build_config()["sgemm"] == "avx512"


def f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def close(got, want, k):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.sqrt(k) * max(1.0, np.abs(want).max()))


# (M, K, N): tile edges (M not a multiple of 14, N not of 32), several K blocks (K > 384), a wide
# N (two column blocks past 1024), few rows (the threads split columns) and few columns (rows),
# fewer columns than a tile (N 10, 20: the transposed product), up to 8 rows ("nt": dot products;
# one row and three: on the BLAS in the other layouts).
SHAPES = [(29, 300, 33), (64, 784, 512), (130, 97, 257), (15, 800, 40), (17, 40, 1100), (1000, 70, 35),
          (512, 300, 10), (300, 400, 20), (1, 784, 512), (3, 300, 257), (8, 500, 70)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_matches_numpy_in_every_layout(shape, layout, threads, restore_threads):
    fg.set_num_threads(threads)
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((k, m) if layout[0] == "t" else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if layout[1] == "t" else (k, n), dtype=np.float32)
    x = fg.tensor(a).T if layout[0] == "t" else fg.tensor(a)
    y = fg.tensor(b).T if layout[1] == "t" else fg.tensor(b)
    want = np.matmul(*f64(a.T if layout[0] == "t" else a, b.T if layout[1] == "t" else b))
    close(fg.matmul(x, y).numpy(), want, k)


def test_row_sliced_operands_keep_their_leading_dimension():
    """Every other row, and a column window: strides past the row reach the kernel as lda / ldb."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((140, 500), dtype=np.float32)
    b = rng.standard_normal((300, 200), dtype=np.float32)
    x = fg.tensor(a)[::2, 3:303]  # (70, 300), rows 1000 floats apart
    y = fg.tensor(b)[:, 10:170]    # (300, 160), rows 200 floats apart
    assert not x.is_contiguous() and not y.is_contiguous()
    close(fg.matmul(x, y).numpy(), np.matmul(*f64(a[::2, 3:303], b[:, 10:170])), 300)
    close(fg.matmul(y.T, x.T).numpy(), np.matmul(*f64(b[:, 10:170].T, a[::2, 3:303].T)), 300)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows, out", [(77, 130), (512, 10), (6, 450)])
def test_linear_and_its_gradients_match_numpy(threads, rows, out, restore_threads):
    """Forward: the bias added as the GEMM stores (out 10: as its transposed product is transposed
    back; 6 rows: as each dot product is stored); backward: G @ W and G^T @ X."""
    fg.set_num_threads(threads)
    rng = np.random.default_rng(4)
    x_np = rng.standard_normal((rows, 300), dtype=np.float32)
    w_np = rng.standard_normal((out, 300), dtype=np.float32) * 0.1
    b_np = rng.standard_normal(out, dtype=np.float32)
    g_np = rng.standard_normal((rows, out), dtype=np.float32)
    x, w, b = (fg.tensor(v, requires_grad=True) for v in (x_np, w_np, b_np))
    y = F.linear(x, w, b)
    y.backward(fg.tensor(g_np))
    x64, w64, b64, g64 = f64(x_np, w_np, b_np, g_np)
    close(y.detach().numpy(), x64 @ w64.T + b64, 300)
    close(x.grad.numpy(), g64 @ w64, out)
    close(w.grad.numpy(), g64.T @ x64, rows)


def relu_and_slope(pre):
    return np.maximum(pre, 0), (pre > 0).astype(np.float64)


def gelu_and_slope(pre):
    cdf = 0.5 * (1 + np.vectorize(math.erf)(pre / np.sqrt(2)))
    return pre * cdf, cdf + pre * np.exp(-0.5 * pre * pre) / np.sqrt(2 * np.pi)


# (module, fused op, its value and slope in float64, layer sizes): linear_relu applies the ReLU in
# the GEMM's store, in place; linear_gelu (keep_input) stores y = x W^T + b and gelu(y) from the
# same tile, and its backward reads y.
# 5 rows: the dot products of a small batch, GELU and its kept derivative applied after them.
ACTIVATIONS = [(fg.nn.ReLU, "linear_relu", relu_and_slope, (77, 300, 130, 64)),
               (fg.nn.GELU, "linear_gelu", gelu_and_slope, (90, 200, 160, 48)),
               (fg.nn.GELU, "linear_gelu", gelu_and_slope, (5, 400, 160, 48))]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("module, op, value_and_slope, sizes", ACTIVATIONS, ids=["relu", "gelu", "gelu-5-rows"])
def test_compiled_linear_activation_in_the_gemm_matches_numpy(module, op, value_and_slope, sizes, threads,
                                                              restore_threads):
    """Loss and gradients of sum(model(x) * r) through the fused op against float64 NumPy."""
    fg.set_num_threads(threads)
    fg.manual_seed(2)
    rows, k, hidden, n = sizes
    model = fg.nn.Sequential(fg.nn.Linear(k, hidden), module(), fg.nn.Linear(hidden, n))
    rng = np.random.default_rng(3)
    x_np, r_np = rng.standard_normal((rows, k), dtype=np.float32), rng.standard_normal((rows, n), dtype=np.float32)
    x, r = fg.tensor(x_np), fg.tensor(r_np)
    step = fg.compile(model, lambda out, weights: (out * weights).sum(), None, example_inputs=(x, r))
    assert op in [i["op"] for i in step.ir()]
    w1, b1, w2, b2 = f64(*(p.numpy() for p in model.parameters()))
    x64, r64 = f64(x_np, r_np)
    h, slope = value_and_slope(x64 @ w1.T + b1)
    dh = (r64 @ w2) * slope
    np.testing.assert_allclose(step(x, r).item(), ((h @ w2.T + b2) * r64).sum(), rtol=1e-4)
    for got, want in zip([p.grad.numpy() for p in model.parameters()], [dh.T @ x64, dh.sum(0), r64.T @ h, r64.sum(0)]):
        close(got, want, k)


def test_linear_relu_keeps_nan_and_zeroes_negatives():
    model = fg.nn.Sequential(fg.nn.Linear(256, 96), fg.nn.ReLU())
    x_np = np.random.default_rng(4).standard_normal((40, 256), dtype=np.float32)
    x_np[3, 5] = np.nan
    step = fg.compile(model, lambda out, weights: (out * weights).sum(), None,
                      example_inputs=(fg.tensor(x_np), fg.ones(40, 96)))
    plan = step.forward_plan(fg.tensor(x_np))
    assert "linear_relu" in [i["op"] for i in plan.ir()]
    got = plan(fg.tensor(x_np)).numpy()
    want = model(fg.tensor(x_np)).numpy()  # eager: linear, then the ReLU op
    assert np.isnan(got[3]).all() and np.isnan(want[3]).all()
    rows = np.arange(40) != 3
    assert (got[rows] >= 0).all() and (got[rows] == 0).any()
    close(got[rows], want[rows], 256)


def test_inf_and_nan_stay_in_their_rows_and_columns():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 256), dtype=np.float32)
    b = np.abs(rng.standard_normal((256, 96), dtype=np.float32)) + 0.5
    a[5, 17] = np.nan
    a[9] = np.abs(a[9]) + 0.5
    b[100, 40] = np.inf
    got = fg.matmul(fg.tensor(a), fg.tensor(b)).numpy()
    assert np.isnan(got[5]).all()
    assert got[9, 40] == np.inf
    rest = np.delete(np.delete(got, 5, axis=0), 40, axis=1)
    assert np.isfinite(rest).all()


@pytest.mark.skipif(not OWN, reason="the BLAS's threaded products may sum in another order")
def test_one_and_two_threads_give_the_same_bits(restore_threads):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((300, 500), dtype=np.float32), rng.standard_normal((500, 260), dtype=np.float32)
    fg.set_num_threads(1)
    one = fg.matmul(fg.tensor(a), fg.tensor(b)).numpy()
    fg.set_num_threads(2)
    np.testing.assert_array_equal(fg.matmul(fg.tensor(a), fg.tensor(b)).numpy(), one)


def test_build_config_names_the_float32_gemm():
    assert fg.build_config()["sgemm"] in ("avx512", "blas")


@pytest.mark.skipif(not OWN, reason="the AVX-512 kernel is not in use (no AVX-512, FLOWGRAD_ISA below avx512, or FLOWGRAD_SGEMM=blas)")
def test_blas_setting_gives_the_same_products_within_rounding(tmp_path):
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((200, 333), dtype=np.float32), rng.standard_normal((333, 150), dtype=np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    out = run_isolated(f"""
        a, b = np.load({str(tmp_path / "a.npy")!r}), np.load({str(tmp_path / "b.npy")!r})
        np.save({str(tmp_path / "c.npy")!r}, fg.matmul(fg.tensor(a), fg.tensor(b)).numpy())
        print(fg.build_config()["sgemm"])
    """, env={"FLOWGRAD_SGEMM": "blas"})
    assert out.split() == ["blas"]
    blas = np.load(tmp_path / "c.npy")
    ours = fg.matmul(fg.tensor(a), fg.tensor(b)).numpy()
    want = a.astype(np.float64) @ b
    close(blas, want, 333)
    close(ours, want, 333)
    np.testing.assert_allclose(ours, blas, rtol=1e-4, atol=1e-4)


def test_sgemm_flag_rejects_other_values():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), FLOWGRAD_SGEMM="mkl")
    done = subprocess.run([sys.executable, "-c", "import flowgrad"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    assert "FLOWGRAD_SGEMM='mkl' is not 'avx512' or 'blas'" in done.stderr
