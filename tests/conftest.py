"""Shared helpers: NumPy reference checks on awkward layouts, gradient checks, and isolated runs."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import flowgrad as fg

def pytest_report_header(config):
    c = fg.build_config()
    return f"flowgrad CPU kernels at {c['isa']} (FLOWGRAD_ISA; this machine runs {', '.join(c['isa_levels'])})"


def pytest_addoption(parser):
    parser.addoption("--one-case-each", action="store_true",
                     help="one case of each test function: the first whose parameters name the instruction-set "
                          "level in use, else the first; never one a skipif mark skips (dev.sh's runs on "
                          "emulated CPUs, 10 to 50 times slower than the machine)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--one-case-each"):
        return
    level, chosen = fg.build_config()["isa"], {}
    for item in items:
        if any(m.args and m.args[0] is True for m in item.iter_markers("skipif")):
            continue
        key = (item.path, getattr(item, "originalname", item.name))
        params = getattr(item, "callspec", None)
        at_level = params is not None and any(isinstance(v, str) and v == level for v in params.params.values())
        if key not in chosen or (at_level and not chosen[key][1]):
            chosen[key] = (item, at_level)
    keep = {id(item) for item, _ in chosen.values()}
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in keep])
    items[:] = [item for item in items if id(item) in keep]


# Shapes every elementwise test walks through: odd sizes, size-1 and size-0 dims, 0-d.
ODD_SHAPES = [(45, 65), (7,), (1, 5), (3, 1, 4), (0, 3), ()]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def restore_threads():
    """The pool's thread count from before the test, whatever the test sets."""
    before = fg.get_num_threads()
    yield
    fg.set_num_threads(before)


@pytest.fixture
def four_threads():
    """Four pool threads for the test, more than this machine's cores (column sums split their rows
    too; a graph level's branches run on pool workers), then the count from before."""
    before = fg.get_num_threads()
    fg.set_num_threads(4)
    yield
    fg.set_num_threads(before)


def make(rng, shape, dtype=np.float64, low=-2.0, high=2.0):
    """Random array of `shape`; integers in [low, high)."""
    if np.issubdtype(dtype, np.integer):
        return rng.integers(int(low), int(high), size=shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    return rng.uniform(low, high, size=shape).astype(dtype)


def non_contiguous(a):
    """A tensor with a's values whose layout is transposed (not row-major)."""
    if a.ndim < 2:
        t = fg.tensor(np.stack([a, a], axis=-1), dtype=fg.tensor(a).dtype)
        return t[..., 0]
    t = fg.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2)), dtype=fg.tensor(a).dtype)
    t = t.transpose(-1, -2)
    assert not t.is_contiguous() or a.size <= 1 or 0 in a.shape
    return t


def gradcheck(fn, *arrays):
    """float64 finite-difference check of fn over tensors made from arrays."""
    inputs = [fg.tensor(np.asarray(a, dtype=np.float64), dtype=fg.float64, requires_grad=True) for a in arrays]
    assert fg.testing.gradcheck(fn, inputs)


def _cuda_skip_reason():
    if fg.cuda.is_available():
        return None
    return "no usable GPU: " + (fg.cuda.unavailable_reason() or "unknown reason")


# Every test taking `device` runs on the CPU, and on CUDA when a GPU is visible (skipped with
# the reason otherwise).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(_cuda_skip_reason() is not None,
                                                                 reason=str(_cuda_skip_reason())))]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def on(device, t):
    """t moved to `device`; a transposed (non-contiguous) layout stays transposed there."""
    if device == "cpu":
        return t
    if t.ndim >= 2 and not t.is_contiguous():
        return t.transpose(-1, -2).to(device).transpose(-1, -2)
    return t.to(device)


def run_threads(fn, n):
    """Runs fn(k) for k in range(n), each on a thread of its own, and returns what they raised."""
    errors = []

    def guarded(k):
        try:
            fn(k)
        except Exception as e:  # noqa: BLE001 - the caller asserts the list is empty
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


# CPUs without AVX-512 and without AVX, emulated by qemu-user (Debian's qemu-user, which ./dev.sh
# test installs), each with the level flowgrad must pick there by itself: qemu's model, less the
# features its emulator lacks (each a warning at every start). test_isa.py checks the levels;
# dev.sh's run_emulated_cpus runs the kernels' tests there, with FLOWGRAD_TEST_EMULATOR set to the
# emulator's command, which run_isolated's fresh interpreters run under too (an emulator runs a
# program's own code, not the programs it starts).
EMULATED_CPUS = {"Haswell-noTSX,-pcid,-x2apic,-tsc-deadline,-invpcid": "avx2", "Nehalem": "generic"}


def emulator_in(env):
    """The emulator's command that FLOWGRAD_TEST_EMULATOR names in env, as a list (empty: none)."""
    return env.get("FLOWGRAD_TEST_EMULATOR", "").split()


def run_isolated(code, timeout=120, env=None):
    """Runs `code` (after `import flowgrad as fg`) in a fresh interpreter, so that a crash or a
    hang is a test failure rather than the end of the test run; returns its stdout. `env`: extra
    environment variables; FLOWGRAD_TEST_EMULATOR among them runs it on an emulated CPU, with ten
    times the time."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **(env or {}))
    script = "import numpy as np\nimport flowgrad as fg\n" + textwrap.dedent(code)
    emulator = emulator_in(env)
    timeout *= 10 if emulator else 1
    try:
        done = subprocess.run(emulator + [sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for more than {timeout} s:\n{script}")
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stderr[-3000:]}\n{script}"
    return done.stdout


ISA_LEVELS = ("generic", "avx2", "avx512")


def run_at_isa(level, code, env=None):
    """run_isolated(code) with FLOWGRAD_ISA=level (the hand-vectorised kernels compiled for that level)
    and `env`'s other variables; skipped where this machine does not run the level."""
    levels = fg.build_config()["isa_levels"]
    if level not in levels:
        pytest.skip(f"this machine runs {', '.join(levels)}, not {level}")
    check = f"assert fg.build_config()['isa'] == {level!r}\n"
    return run_isolated(check + textwrap.dedent(code), env={**(env or {}), "FLOWGRAD_ISA": level})


PLANNER_MODES = ({}, {"FLOWGRAD_NO_PLANNER": "1"}, {"FLOWGRAD_DEBUG_PLAN": "1"})


def planner_modes(monkeypatch):
    """Yields each of PLANNER_MODES once it is set (the other flag unset): the memory planner as it
    is, every buffer in bytes of its own, and released bytes poisoned with NaN."""
    for env in PLANNER_MODES:
        for name in ("FLOWGRAD_NO_PLANNER", "FLOWGRAD_DEBUG_PLAN"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        yield env


def assert_trained_alike(results):
    """results: per run, (losses, parameter arrays): every run's equal to the first's, bit for bit."""
    for losses, params in results[1:]:
        assert losses == results[0][0]
        for got, want in zip(params, results[0][1]):
            np.testing.assert_array_equal(got, want)


def assert_compiled_trains_like_eager(build, loss_fn, batches, before_step=None, rtol=1e-6, atol=1e-7):
    """Trains two copies from build() (-> model, optimizer) on batches of (x, y): one with eager
    steps, one with fg.compile's step; before_step(i, optimizers), when given, runs before step i
    (a schedule). Their parameters must end close. Returns the compiled copy's model."""
    eager, eager_opt = build()
    model, opt = build()
    step = fg.compile(model, loss_fn, opt, example_inputs=batches[0])
    for i, (x, y) in enumerate(batches):
        if before_step is not None:
            before_step(i, (eager_opt, opt))
        eager_opt.zero_grad()
        loss_fn(eager(x), y).backward()
        eager_opt.step()
        step(x, y)
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(), rtol=rtol, atol=atol)
    return model


def assert_steps_like_torch(cls, options, rng, steps=5):
    """cls(**options) and its torch.optim namesake from the same float32 start, fed the same
    gradients for `steps` steps, end at the same parameters (PyTorch must be installed)."""
    import torch
    p0 = rng.standard_normal((5, 2)).astype(np.float32)
    p, tp = fg.nn.Parameter(fg.tensor(p0)), torch.nn.Parameter(torch.tensor(p0))
    opt, topt = cls([p], **options), getattr(torch.optim, cls.__name__)([tp], **options)
    for _ in range(steps):
        g = rng.standard_normal((5, 2)).astype(np.float32)
        p.grad, tp.grad = fg.tensor(g), torch.tensor(g)
        opt.step()
        topt.step()
    np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)


def as_float64(module):
    """The module with float64 parameters and floating buffers (for gradchecks)."""
    with fg.no_grad():
        for name, p in module.named_parameters():
            setattr(module, name, fg.nn.Parameter(p.double()))
        for name, b in module.named_buffers():
            if b.dtype.is_floating_point:
                setattr(module, name, b.double())
    return module


def check_parameter_grads(fn, params, eps=1e-6):
    """Autograd's gradients of sum(fn() * P) w.r.t. each parameter against float64 central
    differences taken by perturbing the parameter in place."""
    proj = fg.tensor(np.random.default_rng(0).standard_normal(fn().shape), dtype=fg.float64)
    for p in params:
        p.grad = None
    (fn() * proj).sum().backward()
    for p in params:
        base = p.detach().numpy().copy()
        numeric = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            for sign in (1, -1):
                v = base.copy()
                v[idx] += sign * eps
                with fg.no_grad():
                    p.copy_(fg.tensor(v, dtype=fg.float64))
                    numeric[idx] += sign * float((fn() * proj).sum().item()) / (2 * eps)
        with fg.no_grad():
            p.copy_(fg.tensor(base, dtype=fg.float64))
        np.testing.assert_allclose(p.grad.numpy(), numeric, rtol=1e-4, atol=1e-6)
