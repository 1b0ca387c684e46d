"""The conv2d op (CPU, float32/float64) and its gradient ops conv2d_input_grad and
conv2d_weight_grad: against a NumPy direct convolution at odd geometries, float64 finite
differences (first and second order), non-contiguous operands, the composites built on F.conv2d
(dilation, groups, per-side padding), compiled == eager, and every ISA level."""
from pathlib import Path

import numpy as np
import pytest

import flowgrad as fg
from conftest import ISA_LEVELS, gradcheck, make, non_contiguous, run_at_isa

F = fg.nn.functional


def np_conv2d(x, w, b, stride, padding, dilation=1, groups=1):
    """Direct convolution (cross-correlation) in float64, PyTorch's definition."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    span_h, span_w = dilation * (kh - 1) + 1, dilation * (kw - 1) + 1
    oh, ow = (h + 2 * padding - span_h) // stride + 1, (wd + 2 * padding - span_w) // stride + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + span_h:dilation, j * stride:j * stride + span_w:dilation]
            for g in range(groups):
                out[:, g * og:(g + 1) * og, i, j] = np.einsum(
                    "nchw,ochw->no", patch[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og])
    return out + (0 if b is None else b.reshape(1, -1, 1, 1))


# (N, C, O, image, kernel, stride, padding): batch 1, one channel, 5x7 images, a 1x1 kernel
# (pointwise: no columns), stride 2 that does not divide the padded width, padding 0 and 2, a
# kernel as large as the padded image
GEOMETRIES = [
    (1, 1, 1, (5, 7), (3, 3), 1, 0),
    (2, 3, 4, (5, 7), (3, 2), 2, 2),
    (3, 2, 5, (6, 6), (1, 1), 1, 0),
    (2, 4, 3, (7, 5), (1, 1), 2, 1),
    (1, 3, 2, (4, 4), (5, 5), 1, 2),
    (2, 1, 3, (9, 8), (3, 3), 3, 1),
    (4, 3, 8, (8, 8), (3, 3), 1, 1),
    # at least a panel of output channels (16 float32 at avx2, 32 at avx512): the weight gradient
    # on packed panels, partial last panels (kernels/nn/conv_cpu.cpp)
    (2, 3, 33, (6, 5), (3, 3), 1, 1),
    (3, 2, 17, (5, 6), (3, 3), 2, 1),
    (2, 4, 40, (4, 3), (1, 1), 1, 0),
    # stride 1 at avx2 and avx512: the columns read in place from the padded image, the output
    # rows as wide as its rows (kernels/nn/conv_cpu.cpp: InPlace): output rows of whole panels
    # (32 or 16 pixels) and of a few pixels (several rows per vector), a non-square kernel, and
    # padding past the kernel (the input gradient then by col2im)
    (2, 3, 5, (5, 32), (3, 3), 1, 1),
    (1, 2, 33, (6, 34), (3, 3), 1, 0),
    (1, 2, 4, (4, 16), (5, 5), 1, 2),
    (2, 3, 4, (5, 7), (3, 2), 1, 1),
    (1, 2, 3, (4, 5), (1, 1), 1, 1),
    (2, 2, 18, (3, 3), (2, 2), 1, 2),
    # strides 2 and 3 with at least a panel of output channels, and a 1x1 kernel at stride 2 (the
    # GEMM: reading strided columns in place from the padded image split into phases was slower)
    (2, 3, 33, (7, 6), (3, 3), 2, 1),
    (1, 2, 34, (9, 8), (3, 3), 3, 1),
    (2, 4, 6, (6, 7), (1, 1), 2, 0),
]


def ids(g):
    return "n{}c{}o{}-{}x{}-k{}x{}-s{}p{}".format(g[0], g[1], g[2], *g[3], *g[4], g[5], g[6])


@pytest.mark.parametrize("geom", GEOMETRIES, ids=ids)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_op_matches_numpy(rng, geom, dtype, bias):
    n, c, o, image, kernel, stride, padding = geom
    x, w, b = make(rng, (n, c, *image)), make(rng, (o, c, *kernel)), make(rng, (o,)) if bias else None
    got = F.conv2d(fg.tensor(x.astype(dtype)), fg.tensor(w.astype(dtype)),
                   None if b is None else fg.tensor(b.astype(dtype)), stride=stride, padding=padding)
    assert got.dtype == (fg.float32 if dtype == np.float32 else fg.float64)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)
    fg.testing.assert_close(got, np_conv2d(x, w, b, stride, padding), **tol)


@pytest.mark.parametrize("geom", GEOMETRIES, ids=ids)
def test_conv2d_op_gradients_by_finite_differences(rng, geom):
    n, c, o, image, kernel, stride, padding = geom
    gradcheck(lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding),
              make(rng, (n, c, *image)), make(rng, (o, c, *kernel)), make(rng, (o,)))


def test_conv2d_input_grad_and_conv2d_weight_grad_second_order(rng):
    # conv2d's gradients are the ops conv2d_input_grad and conv2d_weight_grad, whose own rules give
    # the second derivatives (a gradient penalty differentiates through them)
    def penalty(x, w):
        # the finite differences evaluate it on tensors without requires_grad
        x, w = (t if t.requires_grad else t.detach().requires_grad_() for t in (x, w))
        with fg.enable_grad():
            gx, gw = fg.autograd.grad((F.conv2d(x, w, stride=2, padding=1) ** 2).sum(), [x, w], create_graph=True)
        return (gx ** 2).sum() + (gw ** 2).sum()
    gradcheck(penalty, make(rng, (2, 2, 5, 4)), make(rng, (3, 2, 3, 2)))


def test_conv2d_op_takes_non_contiguous_operands(rng):
    x, w, b = make(rng, (2, 3, 6, 5)), make(rng, (4, 3, 3, 3)), make(rng, (4,))
    xt, wt = non_contiguous(x), non_contiguous(w)
    assert not xt.is_contiguous() and not wt.is_contiguous()
    fg.testing.assert_close(F.conv2d(xt, wt, fg.tensor(b), padding=1), np_conv2d(x, w, b, 1, 1),
                            rtol=1e-10, atol=1e-10)
    # a channel slice: the image planes a stride apart
    wide = make(rng, (2, 6, 6, 5))
    fg.testing.assert_close(F.conv2d(fg.tensor(wide)[:, ::2], fg.tensor(w), padding=1),
                            np_conv2d(wide[:, ::2], w, None, 1, 1), rtol=1e-10, atol=1e-10)
    gradcheck(lambda v, k: F.conv2d(v.transpose(2, 3), k, padding=1), make(rng, (1, 2, 4, 5)), make(rng, (2, 2, 3, 3)))


@pytest.mark.parametrize("dilation,groups,padding", [(2, 1, 2), (1, 2, 1), (2, 3, 0), (1, 1, (1, 2))])
def test_conv2d_composites_match_numpy(rng, dilation, groups, padding):
    # dilation spreads the weight, then runs the op; groups and unequal padding keep their compositions
    x, w, b = make(rng, (2, 6, 7, 5)), make(rng, (6, 6 // groups, 3, 2)), make(rng, (6,))
    got = F.conv2d(fg.tensor(x), fg.tensor(w), fg.tensor(b), padding=padding, dilation=dilation, groups=groups)
    if isinstance(padding, tuple):
        xp = np.pad(x, ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1])))
        want = np_conv2d(xp, w, b, 1, 0, dilation, groups)
    else:
        want = np_conv2d(x, w, b, 1, padding, dilation, groups)
    fg.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    gradcheck(lambda v, k: F.conv2d(v, k, padding=padding, dilation=dilation, groups=groups),
              make(rng, (1, 6, 6, 5)), make(rng, (3, 6 // groups, 2, 2)) if groups != 2 else make(rng, (4, 3, 2, 2)))


def test_conv2d_runs_as_one_op_and_compiles_to_the_eager_bits(rng):
    fg.manual_seed(0)
    model = fg.nn.Sequential(fg.nn.Conv2d(3, 8, 3, padding=1), fg.nn.BatchNorm2d(8), fg.nn.ReLU(),
                             fg.nn.Conv2d(8, 4, 1), fg.nn.MaxPool2d(2), fg.nn.Flatten(), fg.nn.Linear(4 * 3 * 2, 5))
    twin = fg.nn.Sequential(fg.nn.Conv2d(3, 8, 3, padding=1), fg.nn.BatchNorm2d(8), fg.nn.ReLU(),
                            fg.nn.Conv2d(8, 4, 1), fg.nn.MaxPool2d(2), fg.nn.Flatten(), fg.nn.Linear(4 * 3 * 2, 5))
    twin.load_state_dict(model.state_dict())
    x, y = fg.tensor(make(rng, (5, 3, 7, 5)).astype(np.float32)), fg.tensor(np.array([0, 1, 2, 3, 4]))
    opt, topt = fg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), fg.optim.SGD(twin.parameters(), lr=0.1,
                                                                                      momentum=0.9)
    step = fg.compile(twin, F.cross_entropy, topt, example_inputs=(x, y))
    ops = [r["op"] for r in step.explain().rows]
    assert "conv2d" in ops and "conv2d_input_grad" in ops and "conv2d_weight_grad" in ops, ops
    assert ops.count("im2col") <= 1, ops  # only the max-pool's columns
    for _ in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        closs = step(x, y)
        assert loss.item() == closs.item()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


def test_conv2d_falls_back_to_the_composition_elsewhere(rng):
    # mixed dtypes and half types keep im2col + matmul (the op takes one float32/float64 dtype)
    x, w = make(rng, (1, 2, 5, 5)), make(rng, (3, 2, 3, 3))
    got = F.conv2d(fg.tensor(x.astype(np.float32)), fg.tensor(w))
    fg.testing.assert_close(got, np_conv2d(x, w, None, 1, 0), rtol=1e-5, atol=1e-5)
    half = F.conv2d(fg.tensor(x).to(fg.bfloat16), fg.tensor(w).to(fg.bfloat16))
    assert half.dtype == fg.bfloat16
    fg.testing.assert_close(half.float(), np_conv2d(x, w, None, 1, 0).astype(np.float32), rtol=0.05, atol=0.2)


@pytest.mark.parametrize("level", ISA_LEVELS)
def test_conv2d_op_at_each_isa_level(level):
    # the op's GEMMs follow the dispatch level (flowgrad's AVX-512 kernel only at avx512)
    run_at_isa(level, """
        import sys
        sys.path[:0] = [{tests!r}, {here!r}]
        import test_conv2d as mod
        np_conv2d, GEOMETRIES, make = mod.np_conv2d, mod.GEOMETRIES, mod.make
        rng = np.random.default_rng(0)
        F = fg.nn.functional
        for n, c, o, image, kernel, stride, padding in GEOMETRIES:
            x, w, b = make(rng, (n, c, *image)), make(rng, (o, c, *kernel)), make(rng, (o,))
            want = np_conv2d(x, w, b, stride, padding)
            got = F.conv2d(fg.tensor(x.astype(np.float32)), fg.tensor(w.astype(np.float32)),
                           fg.tensor(b.astype(np.float32)), stride=stride, padding=padding)
            fg.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            xs = [fg.tensor(a, requires_grad=True) for a in (x, w, b)]
            assert fg.testing.gradcheck(lambda u, v, z: F.conv2d(u, v, z, stride=stride, padding=padding), xs)
        print("ok")
    """.format(tests=str(Path(__file__).parent.parent), here=str(Path(__file__).parent)))


def test_conv2d_errors_name_the_op_and_shapes(rng):
    x = fg.tensor(make(rng, (2, 3, 5, 4)))
    with pytest.raises(fg.ShapeError, match=r"conv2d: input has 3 channels but weight \(2, 4, 1, 1\) expects 4"):
        F.conv2d(x, fg.ones(2, 4, 1, 1, dtype=fg.float64))
    with pytest.raises(fg.ShapeError, match=r"conv2d: kernel 9x9 is larger than the padded input \(2, 3, 5, 4\)"):
        F.conv2d(x, fg.ones(2, 3, 9, 9, dtype=fg.float64))
    with pytest.raises(fg.ShapeError, match=r"conv2d: bias must be \(2,\), got \(3,\)"):
        F.conv2d(x, fg.ones(2, 3, 1, 1, dtype=fg.float64), fg.ones(3, dtype=fg.float64))


@pytest.mark.parametrize("images", [1, 2, 5])
@pytest.mark.parametrize("out_ch", [4, 33])
def test_images_spread_over_threads_give_the_one_thread_results(rng, images, out_ch):
    """With at least as many images as threads, the images run in chunks, one per thread, the
    weight gradient summed per chunk and the partials added in chunk order: the forward and the
    input gradient are the one-thread bits, the weight gradient within float32 rounding of them
    and of NumPy's (5 images over 2 threads: chunks of 2 and 3)."""
    x, w = make(rng, (images, 3, 9, 8), np.float32), make(rng, (out_ch, 3, 3, 3), np.float32)
    g = make(rng, (images, out_ch, 9, 8), np.float32)

    def run(threads):
        previous = fg.get_num_threads()
        fg.set_num_threads(threads)
        try:
            tx, tw = fg.tensor(x, requires_grad=True), fg.tensor(w, requires_grad=True)
            y = F.conv2d(tx, tw, padding=1)
            y.backward(fg.tensor(g))
            return y.numpy(), tx.grad.numpy(), tw.grad.numpy()
        finally:
            fg.set_num_threads(previous)

    one, two = run(1), run(2)
    np.testing.assert_array_equal(two[0], one[0])
    np.testing.assert_array_equal(two[1], one[1])
    np.testing.assert_allclose(two[2], one[2], rtol=1e-5, atol=1e-5)
    xd, gd = x.astype(np.float64), g.astype(np.float64)
    reference = np.zeros((out_ch, 3, 3, 3))
    for k in range(3):  # dw[o, c, i, j] = sum over n, pixels of g[n, o] * the shifted padded x[n, c]
        for j in range(3):
            patch = np.pad(xd, ((0, 0), (0, 0), (1, 1), (1, 1)))[:, :, k:k + 9, j:j + 8]
            reference[:, :, k, j] = np.einsum("nohw,nchw->oc", gd, patch)
    np.testing.assert_allclose(two[2], reference, rtol=1e-4, atol=1e-4)
