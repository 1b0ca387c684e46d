"""Products of few rows (kernels/linalg/gemv_cpu.cpp: M <= 8, any layout, float32 and float64): matmul,
linear with and without bias and their gradients against NumPy in float64, at odd N and K (vector tails),
through transposed and row-sliced operands, on one and two threads (the threads split the columns), with a
matrix past a core's cache in both forms (its rows prefetched), and at every instruction-set level this
machine runs (FLOWGRAD_ISA, in a fresh interpreter each)."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import ISA_LEVELS, gradcheck, make, run_at_isa

F = fg.nn.functional

# (M, K, N): one to eight rows; K and N below, at and past a vector (4 .. 16 lanes) and a column band,
# large enough for two threads (M N K >= 2^18: 1 x 300 x 1100).
SHAPES = [(1, 1, 1), (1, 7, 5), (1, 33, 65), (2, 16, 16), (3, 100, 37), (4, 257, 129), (5, 64, 3), (7, 1, 70),
          (8, 129, 255), (1, 300, 1100), (3, 1000, 301), (8, 512, 97)]


def close(got, want, k, dtype):
    tol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(got, want, rtol=50 * tol, atol=tol * np.sqrt(k) * max(1.0, np.abs(want).max()))


def operand(a, transposed):
    """a's values as a tensor, stored transposed (a (cols, rows) buffer viewed through .T) when asked."""
    return fg.tensor(np.ascontiguousarray(a.T)).T if transposed else fg.tensor(a)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_of_few_rows_matches_numpy_in_every_layout(rng, shape, layout, dtype, threads, restore_threads):
    fg.set_num_threads(threads)
    m, k, n = shape
    a, b = make(rng, (m, k), dtype), make(rng, (k, n), dtype)
    got = fg.matmul(operand(a, layout[0] == "t"), operand(b, layout[1] == "t"))
    assert got.dtype == fg.tensor(a).dtype
    close(got.numpy(), a.astype(np.float64) @ b.astype(np.float64), k, dtype)


@pytest.mark.parametrize("d,n", [(256, 256), (65, 33), (1000, 7), (31, 1025)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_single_row_linear_matches_numpy(rng, d, n, bias, dtype):
    x, w, b = make(rng, (1, d), dtype), make(rng, (n, d), dtype), make(rng, (n,), dtype)
    got = F.linear(fg.tensor(x), fg.tensor(w), fg.tensor(b) if bias else None)
    want = x.astype(np.float64) @ w.astype(np.float64).T + (b if bias else 0)
    close(got.numpy(), want, d, dtype)
    got3 = F.linear(fg.tensor(x.reshape(1, 1, d)), fg.tensor(w), fg.tensor(b) if bias else None)  # (B, T, d)
    close(got3.numpy().reshape(1, n), want, d, dtype)


def test_row_sliced_and_strided_operands(rng):
    """Rows a leading dimension apart (a row slice of a wider buffer), and a column-strided row."""
    wide_x, wide_w = make(rng, (3, 90), np.float32), make(rng, (70, 90), np.float32)
    x, w = fg.tensor(wide_x)[:, 5:68], fg.tensor(wide_w)[:, 5:68]  # K = 63, lda = ldb = 90
    want = wide_x[:, 5:68].astype(np.float64) @ wide_w[:, 5:68].astype(np.float64).T
    close(F.linear(x, w).numpy(), want, 63, np.float32)
    close(fg.matmul(x, w.T).numpy(), want, 63, np.float32)
    every_other = fg.tensor(wide_x)[:1, ::2]  # (1, 45), column stride 2
    close(fg.matmul(every_other, fg.tensor(wide_w[:, :45]).T).numpy(),
          wide_x[:1, ::2].astype(np.float64) @ wide_w[:, :45].astype(np.float64).T, 45, np.float32)


def test_batched_matmul_of_one_query_row(rng):
    """(B, H, 1, D) @ (B, H, D, S): one row per product, as a decode step's scores."""
    q, k = make(rng, (2, 3, 1, 17), np.float32), make(rng, (2, 3, 17, 40), np.float32)
    close(fg.matmul(fg.tensor(q), fg.tensor(k)).numpy(), q.astype(np.float64) @ k.astype(np.float64), 17, np.float32)


@pytest.mark.parametrize("rows", [1, 3])
def test_linear_gradients_by_finite_differences(rng, rows):
    """dX = dY W (row form), dW = dY^T X (rows of the batch as K), db: float64 through the few-row products."""
    x, w, b = make(rng, (rows, 19)), make(rng, (23, 19)), make(rng, (23,))
    gradcheck(F.linear, x, w, b)
    gradcheck(lambda x, w: fg.matmul(x, w.T) ** 2, x, w)
    gradcheck(lambda x, w: fg.matmul(x, w), x, make(rng, (19, 9)))


def test_gradient_of_a_single_row_linear_matches_numpy(rng):
    x = fg.tensor(make(rng, (1, 130), np.float32), requires_grad=True)
    w = fg.tensor(make(rng, (77, 130), np.float32), requires_grad=True)
    g = make(rng, (1, 77), np.float32)
    F.linear(x, w).backward(fg.tensor(g))
    close(x.grad.numpy(), g.astype(np.float64) @ w.numpy().astype(np.float64), 77, np.float32)
    close(w.grad.numpy(), g.T.astype(np.float64) @ x.detach().numpy().astype(np.float64), 1, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("form", ["x W^T", "x W"])
def test_a_matrix_past_a_cores_cache_gives_the_same_bits_on_any_thread_count(rng, dtype, form, restore_threads):
    """Both forms with W's rows prefetched ahead (W larger than a core's cache, on each thread's share
    too), K and N past whole cache lines and vectors: x W^T (a linear), x W (W row-major, (K, N))."""
    m, k, n = 2, 1003, 4099  # 16 MiB of float32
    x, b = make(rng, (m, k), dtype), make(rng, (n,), dtype)
    w = make(rng, (n, k) if form == "x W^T" else (k, n), dtype)
    want = x.astype(np.float64) @ (w.T if form == "x W^T" else w).astype(np.float64)
    got = []
    for threads in (1, 2):
        fg.set_num_threads(threads)
        if form == "x W^T":
            got.append(F.linear(fg.tensor(x), fg.tensor(w), fg.tensor(b)).numpy())
        else:
            got.append(fg.matmul(fg.tensor(x), fg.tensor(w)).numpy())
    close(got[0], want + (b if form == "x W^T" else 0), k, dtype)
    np.testing.assert_array_equal(got[0], got[1])


@pytest.mark.parametrize("level", ISA_LEVELS)
def test_every_isa_level_matches_numpy(level):
    """The kernel compiled for each level (vectors of 16, 32, 64 bytes), with bias, in every layout."""
    out = run_at_isa(level, """
        rng = np.random.default_rng(3)
        worst = 0.0
        for m, k, n in [(1, 7, 5), (1, 255, 129), (3, 100, 37), (8, 129, 255), (1, 300, 1100), (2, 1003, 2051)]:
            for dtype in (np.float32, np.float64):
                a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
                bias = rng.standard_normal(n).astype(dtype)
                want = a.astype(np.float64) @ b.astype(np.float64)
                for ta in (False, True):
                    for tb in (False, True):
                        x = fg.tensor(np.ascontiguousarray(a.T)).T if ta else fg.tensor(a)
                        y = fg.tensor(np.ascontiguousarray(b.T)).T if tb else fg.tensor(b)
                        worst = max(worst, np.abs(fg.matmul(x, y).numpy() - want).max() / np.sqrt(k))
                got = fg.nn.functional.linear(fg.tensor(a), fg.tensor(np.ascontiguousarray(b.T)), fg.tensor(bias))
                worst = max(worst, np.abs(got.numpy() - want - bias).max() / np.sqrt(k))
        print(worst)
    """)
    assert float(out) < 1e-5
