"""oneDNN's forward convolution (kernels/nn/conv_onednn_cpu.cpp), in builds that link it
(FLOWGRAD_ONEDNN; fg.build_config()["onednn"]): against NumPy at odd geometries at each level it
runs at (avx2, avx512; forced with FLOWGRAD_CONV=onednn), strided operands included, the same bits
on any thread count, from several Python threads at once and in a compiled step, which shapes it
takes (FLOWGRAD_CONV=auto: the measured rule) and never at generic or in float64, and the switch's
errors."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import flowgrad as fg
import flowgrad._core as core
from conftest import make, run_at_isa, run_isolated, run_threads
from test_conv2d import np_conv2d  # the float64 direct convolution

F = fg.nn.functional
HAVE = bool(fg.build_config()["onednn"])
needs_onednn = pytest.mark.skipif(not HAVE, reason="this build has no oneDNN (FLOWGRAD_ONEDNN; libdnnl-dev)")
# in this process: oneDNN runs at avx2 and avx512, not at generic (FLOWGRAD_ISA)
runs_here = pytest.mark.skipif(not HAVE or fg.build_config()["isa"] == "generic",
                               reason="no oneDNN in this build, or the level in force is generic")

# (N, C, O, image, kernel, stride, padding): odd channel counts and images, 1x1, 5x5 and non-square
# kernels, strides 2 and 3, padding 0 to 2, one channel, more images than threads unevenly (7 on 2
# or 3 threads), output channels past a 16-lane block (oneDNN's blocked layouts)
GEOMETRIES = [
    (2, 1, 1, (5, 7), (3, 3), 1, 0),
    (3, 3, 4, (5, 7), (3, 2), 2, 2),
    (4, 2, 5, (6, 6), (1, 1), 1, 0),
    (2, 4, 3, (7, 5), (1, 1), 2, 1),
    (2, 3, 2, (4, 4), (5, 5), 1, 2),
    (7, 19, 35, (13, 11), (3, 3), 1, 1),
    (5, 17, 33, (9, 10), (3, 3), 2, 1),
    (3, 16, 32, (12, 12), (5, 5), 1, 2),
    (2, 2, 34, (9, 8), (3, 3), 3, 1),
]


@pytest.fixture
def conv_kernel():
    """Sets who runs float32 forward convolutions for the test, then puts back what was in use."""
    before = fg.build_config()["conv"]
    yield core._set_conv_kernel
    core._set_conv_kernel(before)


def test_build_config_says_who_convolves():
    config = fg.build_config()
    assert config["conv"] in ("auto", "own", "onednn")
    assert config["onednn"] == "" or config["onednn"].count(".") == 2


@needs_onednn
@pytest.mark.parametrize("level", ["avx2", "avx512"])
def test_onednn_matches_numpy_at_each_level(level):
    out = run_at_isa(level, """
        import sys
        sys.path[:0] = [{here!r}]
        import test_conv_onednn as mod
        import flowgrad._core as core
        rng = np.random.default_rng(0)
        F = fg.nn.functional
        for n, c, o, image, kernel, stride, padding in mod.GEOMETRIES:
            assert core._conv_takes_onednn([n, c, *image], o, *kernel, stride, padding), (n, c, o)
            x, w, b = (rng.uniform(-2, 2, s) for s in ((n, c, *image), (o, c, *kernel), (o,)))
            for bias in (b, None):
                want = mod.np_conv2d(x, w, bias, stride, padding)
                got = F.conv2d(fg.tensor(x.astype(np.float32)), fg.tensor(w.astype(np.float32)),
                               None if bias is None else fg.tensor(bias.astype(np.float32)), stride, padding)
                fg.testing.assert_close(got, want, rtol=1e-5, atol=2e-5)
            # strided operands: a channels-last image and a weight with its kernel axes swapped
            xs = fg.tensor(x.transpose(0, 2, 3, 1).astype(np.float32)).permute(0, 3, 1, 2)
            ws = fg.tensor(w.transpose(0, 1, 3, 2).astype(np.float32)).transpose(2, 3)
            assert c == 1 or not xs.is_contiguous()
            fg.testing.assert_close(F.conv2d(xs, ws, None, stride, padding), mod.np_conv2d(x, w, None, stride, padding),
                                    rtol=1e-5, atol=2e-5)
        print(fg.build_config()["conv"])
    """.format(here=str(Path(__file__).parent)), env={"FLOWGRAD_CONV": "onednn", "FLOWGRAD_NUM_THREADS": "2"})
    assert out.split() == ["onednn"]


@needs_onednn
def test_generic_and_float64_never_take_onednn(rng, conv_kernel):
    conv_kernel("onednn")
    x, w = make(rng, (4, 3, 9, 9)), make(rng, (5, 3, 3, 3))
    got = F.conv2d(fg.tensor(x), fg.tensor(w), padding=1)  # float64: flowgrad's own
    fg.testing.assert_close(got, np_conv2d(x, w, None, 1, 1), rtol=1e-12, atol=1e-12)
    out = run_at_isa("generic", """
        import flowgrad._core as core
        print(core._conv_takes_onednn([64, 32, 32, 32], 32, 3, 3, 1, 1))
    """, env={"FLOWGRAD_CONV": "onednn"})
    assert out.split() == ["False"]


@needs_onednn
def test_the_measured_rule_picks_the_shapes(conv_kernel):
    """auto: oneDNN at avx2 for kernels larger than 1x1, at avx512 for strides above 1 and kernels
    above 3x3, never below 2^22 multiply-adds nor for one image; own never."""
    level = fg.build_config()["isa"]
    if level == "generic":
        pytest.skip("oneDNN does not run at generic")
    conv_kernel("auto")
    takes = core._conv_takes_onednn
    assert takes([64, 32, 32, 32], 64, 3, 3, 2, 1)  # stride 2: every level
    assert takes([32, 16, 28, 28], 32, 5, 5, 1, 2)  # 5x5: every level
    assert takes([64, 32, 32, 32], 32, 3, 3, 1, 1) == (level == "avx2")
    assert takes([64, 3, 32, 32], 16, 3, 3, 1, 1) == (level == "avx2")
    assert not takes([64, 64, 16, 16], 64, 1, 1, 1, 0)  # 1x1: ours at every level
    assert not takes([7, 19, 13, 9], 5, 3, 3, 2, 2)  # too little work
    assert not takes([1, 64, 56, 56], 64, 3, 3, 2, 1)  # one image: ours spreads it over the threads
    conv_kernel("own")
    assert not takes([64, 32, 32, 32], 64, 3, 3, 2, 1)


@runs_here
@pytest.mark.parametrize("images", [2, 5, 7])
def test_onednn_gives_the_same_bits_on_any_thread_count(rng, conv_kernel, images, restore_threads):
    """Each thread runs its own images (5 on 2 threads: 2 and 3; 2 on 3 threads: one waits); an
    image's values do not depend on how many a call takes, so 1, 2 and 3 threads give the same bits."""
    conv_kernel("onednn")
    x, w, b = (make(rng, s, np.float32) for s in ((images, 19, 11, 13), (35, 19, 3, 3), (35,)))
    results = []
    for threads in (1, 2, 3):
        fg.set_num_threads(threads)
        assert core._conv_takes_onednn(list(x.shape), 35, 3, 3, 2, 1)
        results.append(F.conv2d(fg.tensor(x), fg.tensor(w), fg.tensor(b), 2, 1).numpy())
    for got in results[1:]:
        np.testing.assert_array_equal(got, results[0])
    fg.testing.assert_close(results[0], np_conv2d(x.astype(np.float64), w, b, 2, 1), rtol=1e-5, atol=2e-5)


@needs_onednn
def test_onednn_from_several_python_threads(rng, conv_kernel):
    conv_kernel("onednn")
    shapes = [((4, 8, 17, 15), (12, 8, 3, 3), 1, 1), ((6, 5, 20, 20), (7, 5, 5, 5), 2, 2), ((3, 16, 9, 9), (33, 16, 3, 3), 1, 0)]
    inputs = [(make(rng, xs, np.float32), make(rng, ws, np.float32), s, p) for xs, ws, s, p in shapes]
    alone = [F.conv2d(fg.tensor(x), fg.tensor(w), None, s, p).numpy() for x, w, s, p in inputs]
    got = {}

    def work(i):
        x, w, s, p = inputs[i % len(inputs)]
        for _ in range(20):
            got[i] = F.conv2d(fg.tensor(x), fg.tensor(w), None, s, p).numpy()

    errors = run_threads(work, 6)
    assert not errors, errors
    for i, y in got.items():
        np.testing.assert_array_equal(y, alone[i % len(inputs)])


@runs_here
def test_a_compiled_step_gives_the_eager_bits(rng, conv_kernel):
    conv_kernel("onednn")
    fg.manual_seed(0)

    def model():
        return fg.nn.Sequential(fg.nn.Conv2d(3, 16, 3, padding=1), fg.nn.BatchNorm2d(16), fg.nn.ReLU(),
                                fg.nn.Conv2d(16, 8, 3, stride=2, padding=1), fg.nn.Flatten(), fg.nn.Linear(8 * 4 * 4, 5))

    eager, twin = model(), model()
    twin.load_state_dict(eager.state_dict())
    x, y = fg.tensor(make(rng, (6, 3, 8, 8), np.float32)), fg.tensor(np.array([0, 1, 2, 3, 4, 0]))
    assert core._conv_takes_onednn([6, 3, 8, 8], 16, 3, 3, 1, 1)
    opt = fg.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    step = fg.compile(twin, F.cross_entropy, fg.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9),
                      example_inputs=(x, y))
    for _ in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(eager(x), y)
        loss.backward()
        opt.step()
        assert loss.item() == step(x, y).item()
    for (name, p), q in zip(eager.named_parameters(), twin.parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


def test_the_switch_rejects_other_values():
    with pytest.raises(ValueError, match=r"conv kernel 'mkl' is not 'auto', 'own' or 'onednn'"):
        core._set_conv_kernel("mkl")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), FLOWGRAD_CONV="mkl")
    done = subprocess.run([sys.executable, "-c", "import flowgrad"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode != 0
    assert "FLOWGRAD_CONV='mkl' is not 'auto', 'own' or 'onednn'" in done.stderr


def test_the_rule_query_rejects_a_shape_no_convolution_has():
    with pytest.raises(ValueError, match=r"x is \(N, C, H, W\), got 3 dimensions"):
        core._conv_takes_onednn([3, 8, 8], 4, 3, 3)
    with pytest.raises(ValueError, match=r"a stride of at least 1 .* got 3x3, 0, 1"):
        core._conv_takes_onednn([2, 3, 8, 8], 4, 3, 3, 0, 1)
    with pytest.raises(ValueError, match=r"got 0x3, 1, 0"):
        core._conv_takes_onednn([2, 3, 8, 8], 4, 0, 3)


def test_own_is_what_the_switch_says(conv_kernel):
    assert conv_kernel("own") == "own"
    assert fg.build_config()["conv"] == "own"
    assert not core._conv_takes_onednn([64, 32, 32, 32], 64, 3, 3, 2, 1)
    out = run_isolated("print(fg.build_config()['conv'])", env={"FLOWGRAD_CONV": "own"})
    assert out.split() == ["own"]


@runs_here
@pytest.mark.slow_to_emulate
def test_large_images_run_in_several_calls_with_the_same_bits(rng, conv_kernel, restore_threads):
    """Images whose blocked copies pass 32 MiB a call (kCallBytes) run a thread's images in several
    calls: 13 images of 8 x 192 x 192 (channels padded to 16: 4.7 MB each, 7 a call) on one thread
    in calls of 7 and 6, on 2 and 3 threads in one call each, give the same bits, within float32
    rounding of flowgrad's own kernel."""
    x, w, b = (make(rng, s, np.float32) for s in ((13, 8, 192, 192), (8, 8, 3, 3), (8,)))
    results = []
    conv_kernel("onednn")
    for threads in (1, 2, 3):
        fg.set_num_threads(threads)
        results.append(F.conv2d(fg.tensor(x), fg.tensor(w), fg.tensor(b), 1, 1).numpy())
    conv_kernel("own")
    own = F.conv2d(fg.tensor(x), fg.tensor(w), fg.tensor(b), 1, 1).numpy()
    for got in results[1:]:
        np.testing.assert_array_equal(got, results[0])
    np.testing.assert_allclose(results[0], own, rtol=1e-5, atol=2e-5)
