"""lstm_sequence and gru_sequence (with lstm_sequence_backward and gru_sequence_backward): a whole
LSTM / GRU layer direction as one op, reached through nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell.
Forward against a NumPy loop of PyTorch's equations (gate order i, f, g, o and r, z, n), float64
finite differences for every input (x, h0, c0, weights, biases), bidirectional, multi-layer,
batch_first, unbatched, T=1 and odd sizes; the number of kernels does not grow with T; compiled
steps train like eager ones; one thread against many, in the pool and from Python threads;
errors. The kernel tests rerun at every ISA level (dev.sh test)."""
import threading

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn

from conftest import as_float64, assert_compiled_trains_like_eager, check_parameter_grads, on


def strided(a):
    """A view of a's values with every other element of a wider buffer (not contiguous)."""
    t = fg.tensor(np.stack([a, a], axis=-1))[..., 0]
    assert not t.is_contiguous()
    return t


def sig(a):
    return 1 / (1 + np.exp(-a))


def numpy_direction(kind, x, h, c, w_ih, w_hh, b_ih, b_hh, reverse):
    """One layer direction over x (T, N, in) with PyTorch's equations; returns (outputs, h, c)."""
    H = w_hh.shape[1]
    ys = [None] * x.shape[0]
    for t in (reversed(range(x.shape[0])) if reverse else range(x.shape[0])):
        gi = x[t] @ w_ih.T + (0 if b_ih is None else b_ih)
        gh = h @ w_hh.T + (0 if b_hh is None else b_hh)
        if kind == "LSTM":
            g = gi + gh
            i, f, gg, o = sig(g[:, :H]), sig(g[:, H:2 * H]), np.tanh(g[:, 2 * H:3 * H]), sig(g[:, 3 * H:])
            c = f * c + i * gg
            h = o * np.tanh(c)
        else:
            r, z = sig(gi[:, :H] + gh[:, :H]), sig(gi[:, H:2 * H] + gh[:, H:2 * H])
            n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
            h = (1 - z) * n + z * h
        ys[t] = h
    return np.stack(ys), h, c


def numpy_rnn(kind, module, x, h0, c0):
    """The module's result computed in float64 NumPy from its state_dict."""
    p = {k: v.numpy().astype(np.float64) for k, v in module.state_dict().items()}
    directions = 2 if module.bidirectional else 1
    batched = x.ndim == 3
    x = x.transpose(1, 0, 2) if batched and module.batch_first else (x if batched else x[:, None])
    if not batched:
        h0, c0 = h0[:, None], c0[:, None]
    h_n, c_n = [], []
    for layer in range(module.num_layers):
        outs = []
        for d in range(directions):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            k = layer * directions + d
            y, h, c = numpy_direction(kind, x, h0[k], c0[k], p["weight_ih" + sfx], p["weight_hh" + sfx],
                                      p.get("bias_ih" + sfx), p.get("bias_hh" + sfx), d == 1)
            outs.append(y)
            h_n.append(h)
            c_n.append(c)
        x = np.concatenate(outs, axis=2)
    x = x.transpose(1, 0, 2) if batched and module.batch_first else (x if batched else x[:, 0])
    h_n, c_n = np.stack(h_n), np.stack(c_n)
    return (x, h_n, c_n) if batched else (x, h_n[:, 0], c_n[:, 0])


# (module arguments, input shape): odd sizes, T=1, N=1, unbatched
CONFIGS = [
    (dict(input_size=5, hidden_size=7), (4, 3, 5)),
    (dict(input_size=3, hidden_size=13, num_layers=2, bidirectional=True, batch_first=True), (3, 5, 3)),
    (dict(input_size=4, hidden_size=9, bias=False, bidirectional=True), (6, 2, 4)),
    (dict(input_size=2, hidden_size=17), (1, 1, 2)),
    (dict(input_size=6, hidden_size=5, num_layers=2, bidirectional=True), (7, 6)),
    # 48 rows: whole register blocks of the per-step product at every level (packed_gemm.h); 19
    # hidden units: a partial last panel forward (4H or 3H columns) and backward (H columns)
    (dict(input_size=3, hidden_size=19, batch_first=True), (48, 2, 3)),
    # a packed W_hh over the 2 MiB a thread keeps between calls
    (dict(input_size=2, hidden_size=512), (2, 3, 2)),
    # 37 rows: on 2 or more threads each runs its own rows through every step (rnn_cpu.cpp)
    (dict(input_size=3, hidden_size=40), (6, 37, 3)),
]


def run_module(kind, module, x, h0, c0):
    if kind == "LSTM":
        out, (h, c) = module(x, (h0, c0))
        return out, h, c
    out, h = module(x, h0)
    return out, h, None


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("args,shape", CONFIGS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sequence_matches_numpy(rng, kind, args, shape, dtype):
    module = getattr(nn, kind)(**args)
    if dtype == np.float64:
        module = as_float64(module)
    directions = 2 if args.get("bidirectional") else 1
    batch = [] if len(shape) == 2 else [shape[0] if args.get("batch_first") else shape[1]]
    state_shape = (args.get("num_layers", 1) * directions, *batch, args["hidden_size"])
    x = rng.normal(size=shape).astype(dtype)
    h0, c0 = rng.normal(size=state_shape).astype(dtype), rng.normal(size=state_shape).astype(dtype)
    # the states as non-contiguous views
    out, h, c = run_module(kind, module, fg.tensor(x), strided(h0), strided(c0))
    want = numpy_rnn(kind, module, x.astype(np.float64), h0.astype(np.float64), c0.astype(np.float64))
    tol = dict(rtol=1e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    fg.testing.assert_close(out, want[0], **tol)
    fg.testing.assert_close(h, want[1], **tol)
    if kind == "LSTM":
        fg.testing.assert_close(c, want[2], **tol)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("args,shape", [
    (dict(input_size=2, hidden_size=3, num_layers=2, bidirectional=True, batch_first=True), (2, 3, 2)),
    (dict(input_size=3, hidden_size=2, bias=False), (1, 2, 3)),
    (dict(input_size=2, hidden_size=3, bidirectional=True), (3, 2)),
    (dict(input_size=2, hidden_size=9), (2, 13, 2)),  # blocks of rows and a partial panel
])
def test_sequence_float64_finite_differences_for_every_input(rng, kind, args, shape):
    module = as_float64(getattr(nn, kind)(**args))
    directions = 2 if args.get("bidirectional") else 1
    batch = [] if len(shape) == 2 else [shape[0] if args.get("batch_first") else shape[1]]
    state_shape = (args.get("num_layers", 1) * directions, *batch, args["hidden_size"])
    x = fg.tensor(rng.normal(size=shape), dtype=fg.float64, requires_grad=True)
    h0 = fg.tensor(rng.normal(size=state_shape), dtype=fg.float64, requires_grad=True)
    c0 = fg.tensor(rng.normal(size=state_shape), dtype=fg.float64, requires_grad=True)
    for part in range(2 if kind == "GRU" else 3):  # the outputs, h_n and c_n each
        assert fg.testing.gradcheck(lambda x, h0, c0: run_module(kind, module, x, h0, c0)[part] * 1.0, [x, h0, c0])
    # every weight and bias, through the outputs and the final states together
    run = lambda: fg.cat([t.reshape(-1) for t in run_module(kind, module, x.detach(), h0.detach(), c0.detach())  # noqa: E731
                          if t is not None])
    check_parameter_grads(run, list(module.parameters()))


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell])
@pytest.mark.parametrize("batch", [[], [1], [3]])
def test_cells_match_numpy_and_finite_differences(rng, cell, batch):
    module = as_float64(cell(3, 5))
    x = fg.tensor(rng.normal(size=(*batch, 3)), dtype=fg.float64, requires_grad=True)
    h = fg.tensor(rng.normal(size=(*batch, 5)), dtype=fg.float64, requires_grad=True)
    c = fg.tensor(rng.normal(size=(*batch, 5)), dtype=fg.float64, requires_grad=True)
    p = {k: v.numpy() for k, v in module.state_dict().items()}
    kind = "LSTM" if cell is nn.LSTMCell else "GRU"
    rows = lambda t: t.numpy().reshape(1, -1, t.shape[-1])  # noqa: E731
    _, want_h, want_c = numpy_direction(kind, rows(x), rows(h)[0], rows(c)[0], p["weight_ih"], p["weight_hh"],
                                        p["bias_ih"], p["bias_hh"], False)
    if kind == "LSTM":
        got_h, got_c = module(x, (h, c))
        fg.testing.assert_close(got_c, want_c.reshape(got_c.shape), rtol=1e-12, atol=1e-13)
        assert fg.testing.gradcheck(lambda x, h, c: module(x, (h, c))[0] + module(x, (h, c))[1], [x, h, c])
        run = lambda: module(x.detach(), (h.detach(), c.detach()))[1]  # noqa: E731
    else:
        got_h = module(x, h)
        assert fg.testing.gradcheck(lambda x, h: module(x, h) * 1.0, [x, h])
        run = lambda: module(x.detach(), h.detach())  # noqa: E731
    assert got_h.shape == (*batch, 5)
    fg.testing.assert_close(got_h, want_h.reshape(got_h.shape), rtol=1e-12, atol=1e-13)
    check_parameter_grads(run, list(module.parameters()))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_kernel_count_does_not_grow_with_the_sequence(kind):
    """One op per layer direction and one backward op: forward and backward of 3 steps and of 40
    call the same number of kernels (a per-step loop of ops would call about a dozen per step)."""
    module = getattr(nn, kind)(3, 4, bidirectional=True)

    def kernels(steps):
        x = fg.randn(steps, 2, 3, requires_grad=True)
        for p in module.parameters():
            p.grad = None  # assigned, not accumulated, in both calls
        before = fg._core.plan.kernel_calls()
        module(x)[0].sum().backward()
        return fg._core.plan.kernel_calls() - before

    assert kernels(3) == kernels(40)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_device_matches_the_cpu_forward_and_backward(rng, device, kind):
    """The device's kernels (CUDA: cuBLAS per step and the gate kernels) against the CPU's, values and
    gradients of the input, the initial state and every parameter."""
    args = dict(input_size=3, hidden_size=37, num_layers=2, bidirectional=True, batch_first=True)
    ref = getattr(nn, kind)(**args)
    ours = getattr(nn, kind)(**args)
    ours.load_state_dict(ref.state_dict())
    ours = ours.to(device)
    x, h0 = rng.normal(size=(5, 9, 3)).astype(np.float32), rng.normal(size=(4, 5, 37)).astype(np.float32)
    results = []
    for module, dev in ((ref, "cpu"), (ours, device)):
        xs, hs = on(dev, fg.tensor(x)), on(dev, fg.tensor(h0))
        xs.requires_grad, hs.requires_grad = True, True
        state = (hs, hs * 0.5) if kind == "LSTM" else hs
        out = module(xs, state)[0]
        (out * out).sum().backward()
        results.append([out, xs.grad, hs.grad] + [p.grad for p in module.parameters()])
    for got, want in zip(results[1], results[0]):
        fg.testing.assert_close(got.cpu(), want.numpy(), rtol=1e-4, atol=1e-5)


class Tagger(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.rnn = getattr(nn, kind)(3, 6, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(12, 2)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("batch,hidden", [(32, 67), (35, 67), (12, 200)])
def test_threads_give_the_one_thread_bits(rng, kind, batch, hidden):
    """On 4 threads a sequence is split by batch rows (32 rows: 8 each; 35: 8 or 9) or, with fewer
    than 8 rows a thread (12 rows), by whole panels of hidden units step by step
    (kernels/rnn/rnn_cpu.cpp); 67 and 200 units are partial panels at every level and give each
    step of 12 rows enough work to split at every level. Compared: what the sequence ops make
    (outputs, final and initial states' gradients); the weight gradients are GEMMs, which a BLAS
    may sum differently on more threads."""
    module = getattr(nn, kind)(8, hidden, bidirectional=True)
    x = rng.normal(size=(5, batch, 8)).astype(np.float32)
    states = [rng.normal(size=(2, batch, hidden)).astype(np.float32) for _ in range(2 if kind == "LSTM" else 1)]
    results = []
    before = fg.get_num_threads()
    try:
        for threads in (1, 4):
            fg.set_num_threads(threads)
            s0 = [fg.tensor(s, requires_grad=True) for s in states]
            out, last = module(fg.tensor(x), tuple(s0) if kind == "LSTM" else s0[0])
            last = list(last) if kind == "LSTM" else [last]
            (out * out).sum().backward()
            results.append([t.numpy() for t in [out, *last]] + [s.grad.numpy() for s in s0])
    finally:
        fg.set_num_threads(before)
    for one, four in zip(*results):
        np.testing.assert_array_equal(one, four)


@pytest.mark.slow_to_emulate
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_layers_from_several_python_threads_at_once(rng, kind):
    """Six Python threads run the layer at once, 32 rows (split by rows over the pool) and 6 rows
    (by hidden units) alternately; each gets the bits it gets alone."""
    module = getattr(nn, kind)(16, 64, batch_first=True)
    xs = [fg.tensor(rng.normal(size=(32 if i % 2 else 6, 20, 16)).astype(np.float32)) for i in range(6)]
    alone = [module(x)[0].numpy() for x in xs]
    got, errors = [None] * len(xs), []

    def work(i):
        try:
            for _ in range(10):
                got[i] = module(xs[i])[0].numpy()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for one, many in zip(alone, got):
        np.testing.assert_array_equal(one, many)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_compiled_step_trains_like_eager(rng, kind):
    def build():
        fg.manual_seed(0)
        model = Tagger(kind)
        return model, fg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    batches = [(fg.tensor(rng.normal(size=(4, 5, 3)).astype(np.float32)),
                fg.tensor(rng.normal(size=(4, 5, 2)).astype(np.float32))) for _ in range(3)]
    assert_compiled_trains_like_eager(build, nn.functional.mse_loss, batches, rtol=1e-5, atol=1e-6)


def test_sequence_errors():
    lstm = nn.LSTM(3, 4)
    x = fg.zeros(5, 2, 3)
    with pytest.raises(fg.DTypeError, match=r"lstm_sequence: every input must be float32, got float64 \(2, 4\)"):
        lstm(x, (fg.zeros(1, 2, 4, dtype=fg.float64), fg.zeros(1, 2, 4)))
    with pytest.raises(fg.ShapeError, match=r"gru_sequence: expected h0 of shape \(2, 4\), got \(5, 4\)"):
        nn.GRUCell(3, 4)(fg.zeros(2, 3), fg.zeros(5, 4))
    with pytest.raises(fg.ShapeError, match=r"lstm_sequence: expected c0 of shape \(2, 4\), got \(3, 4\)"):
        nn.LSTMCell(3, 4)(fg.zeros(2, 3), (fg.zeros(2, 4), fg.zeros(3, 4)))
    xs = fg.randn(5, 2, 3, requires_grad=True)
    (g,) = fg.autograd.grad(lstm(xs)[0].sum(), [xs])  # first order works
    assert g.shape == (5, 2, 3)
    for module in (lstm, nn.GRU(3, 4)):
        with pytest.raises(fg.FlowgradError, match="second-order gradients through LSTM/GRU layers"):
            fg.autograd.grad(module(xs)[0].sum(), [xs], create_graph=True)
