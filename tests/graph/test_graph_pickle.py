"""Pickling a Graph: every construct round-trips with equal outputs and gradients, trained values,
settings, histories and recurrent state survive, spawned processes and pool workers load it, a
lambda held by a node is reported by node and tag, and damaged wiring raises GraphError."""
import copy
import multiprocessing
import pickle

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn


class Scale(nn.Module):
    """A Python module with a plain attribute and a buffer."""

    def __init__(self, k):
        super().__init__()
        self.k = k
        self.register_buffer("shift", fg.tensor([0.25]))

    def forward(self, x):
        return x * self.k + self.shift


class Mix(nn.Module):
    """Adds the extra graph input it receives through using()."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, bias):
        return self.fc(x) + bias


class Apply(nn.Module):
    """Holds a Python callable: picklable when it is a module-level function, not a lambda."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def double(x):
    return x * 2


def every_construct():
    """A graph using each FlowBuilder construct, an extra input and a forward reference."""
    fg.manual_seed(7)
    shared = nn.Linear(4, 4)
    inner = fg.flow(nn.Linear(4, 4)).tag("inner_h").through(nn.Tanh()).build()
    return (fg.FlowBuilder(nn.Linear(4, 4)).tag("a")
            .through(Mix()).using("bias").tag("mixed")
            .split(nn.Linear(4, 4), shared).tag_group("br").merge(fg.flow.Add()).tag("merged")
            .also(nn.Linear(4, 4)).tag("res")
            .through(nn.BatchNorm1d(4)).tag("norm")
            .through(nn.Dropout(0.5).eval()).tag("drop")
            .gate(fg.flow.SoftmaxRouter(4, 2), nn.Linear(4, 4), Scale(0.5)).tag("gated")
            .switch(fg.flow.FixedSelector(1), nn.Linear(4, 4), nn.Tanh()).tag("sw")
            .loop(shared).for_(2).tag("for")
            .loop(Scale(0.9)).while_(fg.flow.ThresholdHalt(10.0), 3).tag("while")
            .loop(nn.Tanh()).until(fg.flow.LearnedHalt(4), 2).tag("until")
            .map(nn.Linear(4, 4)).each().tag("each")
            .map(nn.Linear(4, 4)).batched().each().tag("each_batched")
            .map(Scale(2.0)).over("a").tag("over")
            .map(nn.Linear(2, 2)).slices(2).tag("slices")
            .map(nn.Linear(2, 2)).batched().slices(2).tag("slices_batched")
            .through(inner).tag("nested")
            .through(fg.flow.StateAdd()).using("last").tag("state")
            .through(nn.Tanh()).tag("last")
            .through(nn.Linear(4, 3)).tag("out")
            .input("bias")
            .build())


def inputs(device, seed=0):
    r = np.random.default_rng(seed)
    return [fg.tensor(r.normal(size=(6, 4)).astype(np.float32), device=device) for _ in range(2)]


def run(graph, xs):
    """Output and, after out.sum().backward(), the gradients by parameter name and of the input."""
    x = xs[0].detach().requires_grad_(True)
    graph.zero_grad()
    graph.detach_state()  # a copy holds the recurrent state's values, not the history behind them
    fg.manual_seed(3)
    out = graph(x, xs[1])
    out.sum().backward()
    grads = {name: p.grad.numpy() for name, p in graph.named_parameters() if p.grad is not None}
    return out.detach().numpy(), grads, x.grad.numpy()


def assert_same_run(a, b):
    out_a, grads_a, dx_a = a
    out_b, grads_b, dx_b = b
    np.testing.assert_allclose(out_b, out_a, rtol=1e-5, atol=1e-6)
    assert list(grads_b) == list(grads_a) and grads_a
    for name in grads_a:
        np.testing.assert_allclose(grads_b[name], grads_a[name], rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(dx_b, dx_a, rtol=1e-5, atol=1e-6)


def test_every_construct_round_trips(device):
    g = every_construct().to(device)
    xs = inputs(device)
    g(*xs)  # the recurrent state now holds the first call's output
    back = pickle.loads(pickle.dumps(g))
    assert type(back) is fg.Graph
    assert back.tags == g.tags and back.input_names == ["input", "bias"] and back.levels == g.levels
    assert back.tag_group("br") == g.tag_group("br") == ["br_0", "br_1"]
    assert back.dot() == g.dot()
    assert [n for n, _ in back.named_parameters()] == [n for n, _ in g.named_parameters()]
    assert back.sub("br_1") is back.sub("for").body  # a module used by two nodes stays one module
    assert type(back.sub("nested")) is fg.Graph and back.sub("nested").tags == ["inner_h"]
    assert back.training and not back.sub("drop").training and back.sub("norm").training
    assert all(t.device.type == device for t in back.state_dict().values())
    np.testing.assert_array_equal(back._recurrent_state()["last"].numpy(), g._recurrent_state()["last"].numpy())
    for _ in range(2):  # the second call reads the state the first one left
        assert_same_run(run(g, xs), run(back, xs))
    np.testing.assert_array_equal(back.sub("norm").running_mean.numpy(), g.sub("norm").running_mean.numpy())


def test_pickle_and_deepcopy_agree():
    g = every_construct()
    xs = inputs("cpu")
    g(*xs)
    pickled, copied = pickle.loads(pickle.dumps(g)), copy.deepcopy(g)
    assert_same_run(run(copied, xs), run(pickled, xs))


def test_trained_graph_keeps_its_values_and_resumes_with_its_optimizer(rng):
    g = (fg.flow(nn.Linear(3, 8)).tag("hidden").through(nn.ReLU())
         .also(nn.Linear(8, 8)).through(nn.Linear(8, 1)).tag("out").build())
    x = fg.tensor(rng.normal(size=(16, 3)).astype(np.float32))
    y = fg.tensor(rng.normal(size=(16, 1)).astype(np.float32))
    initial = {k: v.numpy().copy() for k, v in g.state_dict().items()}
    opt = fg.optim.Adam(g.parameters(), lr=0.05)

    def step(graph, optimizer):
        optimizer.zero_grad()
        loss = fg.nn.functional.mse_loss(graph(x), y)
        loss.backward()
        optimizer.step()
        graph.record("loss", loss)

    for _ in range(5):
        step(g, opt)
    g.flush()
    blob = pickle.dumps((g, opt))
    g2, opt2 = pickle.loads(blob)
    for k, v in g2.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), g.state_dict()[k].numpy())
        assert not np.array_equal(v.numpy(), initial[k]), k  # trained values, not the initial ones
    assert [hash(p) for p in opt2.param_groups[0]["params"]] == [hash(p) for p in g2.parameters()]
    for _ in range(3):
        step(g, opt)
        step(g2, opt2)
    for k, v in g2.state_dict().items():
        np.testing.assert_allclose(v.numpy(), g.state_dict()[k].numpy(), rtol=1e-6, atol=1e-7)
    assert g2.trend("loss").values() == g.trend("loss").values() and len(g2.trend("loss")) == 1


def test_settings_histories_and_attributes_survive(rng, capsys):
    g = (fg.flow(nn.Linear(3, 4)).tag("hidden").through(nn.Linear(4, 2)).tag("out").build())
    x = fg.tensor(rng.normal(size=(5, 3)).astype(np.float32))
    g.parallel = False
    g.enable_profiling()
    g.log("out", total_epochs=4)
    for _ in range(2):
        g(x)
        g.collect("out")
        g.collect_timings("out")
        g.flush()
        g.flush_timings()
    g.freeze("hidden")
    g.eval()
    g.note = {"run": 3}
    capsys.readouterr()
    back = pickle.loads(pickle.dumps(g))
    assert not back.parallel and back.profiling and not back.training
    assert back.note == {"run": 3} and back.note is not g.note
    assert back.trend("out").values() == g.trend("out").values() and back.flush_count == 2
    assert len(back.timing_trend("out")) == 2
    assert not back.sub("hidden").weight.requires_grad and back.sub("out").weight.requires_grad
    back.sub("hidden").weight.grad = fg.ones(4, 3)
    back.zero_frozen_grads()  # acts on the restored frozen set
    assert back.sub("hidden").weight.grad is None
    back.unfreeze()
    assert back.sub("hidden").weight.requires_grad
    back(x)
    back.collect("out")
    back.flush()
    assert "epoch 3/4" in capsys.readouterr().out  # log() kept its tags and total
    # values of the last forward belong to the process that ran it: not pickled
    with pytest.raises(fg.GraphError, match="tag 'out' has no value yet"):
        pickle.loads(pickle.dumps(g)).tagged("out")


def test_graph_inside_containers_pickles(rng):
    g = fg.flow(nn.Linear(3, 2)).tag("out").build()
    model = nn.Sequential(nn.Linear(4, 3), g)
    x = fg.tensor(rng.normal(size=(2, 4)).astype(np.float32))
    back = pickle.loads(pickle.dumps(model))
    assert type(back[1]) is fg.Graph and back[1].tags == ["out"]
    fg.testing.assert_close(back(x), model(x))


def test_module_level_function_in_a_node_pickles(rng):
    g = fg.flow(Apply(double)).tag("twice").build()
    x = fg.tensor(rng.normal(size=(2, 3)).astype(np.float32))
    fg.testing.assert_close(pickle.loads(pickle.dumps(g))(x), x * 2)


def test_lambda_in_a_node_names_the_node_and_tag():
    g = fg.flow(nn.Linear(3, 3)).through(Apply(lambda t: t * 2)).tag("twice").build()
    with pytest.raises(pickle.PicklingError, match=r"cannot pickle fg.Graph: node 2 'twice' \(Apply\) holds "
                                                   r"something pickle cannot store .*lambda"):
        pickle.dumps(g)
    nested = fg.flow(nn.Sequential(nn.ReLU(), Apply(lambda t: t))).build()  # deeper in a node
    with pytest.raises(pickle.PicklingError, match=r"node 1 \(Sequential\)"):
        pickle.dumps(nested)
    outer = fg.flow(g).tag("inner").build()  # the inner graph's message says which of its nodes
    with pytest.raises(pickle.PicklingError, match=r"node 1 'inner' \(Graph\) .*node 2 'twice' \(Apply\)"):
        pickle.dumps(outer)
    assert type(copy.deepcopy(g)) is fg.Graph  # deepcopy shares the function instead


@pytest.mark.parametrize("damage, message", [
    (lambda nodes: nodes[2]["inputs"].__setitem__(0, 5), r"node 2 'b': input node 5 is not an earlier node"),
    (lambda nodes: nodes[1]["modules"].append(nn.ReLU()), r"node 1 'a': a through node holds 2 modules"),
    (lambda nodes: nodes[2].__setitem__("tag", "a"), r"node 2 'a': the tag is used twice"),
    (lambda nodes: nodes[2].__setitem__("kind", "teleport"), r"unknown node kind 'teleport'"),
    (lambda nodes: nodes[2]["refs"].append(("a", 9, False)), r"using\('a'\) refers to node 9"),
])
def test_damaged_wiring_raises_graph_error(damage, message):
    g = fg.flow(nn.Linear(2, 2)).tag("a").through(nn.Linear(2, 2)).tag("b").build()
    nodes, names, output = fg._core._graph_nodes(g)
    fg._core._graph_from_nodes(nodes, names, output, True)  # undamaged: builds
    damage(nodes)
    with pytest.raises(fg.GraphError, match=message):
        fg._core._graph_from_nodes(nodes, names, output, True)


def test_damaged_counts_and_inputs_raise_graph_error():
    g = fg.flow(nn.Linear(4, 4)).map(nn.Linear(2, 2)).slices(2).tag("s").build()
    nodes, names, output = fg._core._graph_nodes(g)
    with pytest.raises(fg.GraphError, match="2 input nodes for 1 input names"):
        fg._core._graph_from_nodes(nodes + [dict(nodes[0])], names, output, True)
    with pytest.raises(fg.GraphError, match="the output node 7 is not one of the 3 nodes"):
        fg._core._graph_from_nodes(nodes, names, 7, True)
    nodes[2]["count"] = 0
    with pytest.raises(fg.GraphError, match="node 2 's': 0 slices"):
        fg._core._graph_from_nodes(nodes, names, output, True)
    with pytest.raises(fg.GraphError, match="set_frozen: a frozen tensor of shape \\(3,\\) is not a parameter"):
        fg._core._graph_set_frozen(g, [fg.nn.Parameter(fg.zeros(3))])


# ------------------------------------------------------------------------------------------
# processes

def _load_and_run(blob, xs):
    graph = pickle.loads(blob)
    return graph(*xs), graph.trend("out").values()


def test_spawned_process_loads_the_graph_and_gets_the_same_result():
    g = every_construct().eval()
    xs = inputs("cpu", seed=1)
    g(*xs)
    g.collect("out")
    g.flush()
    blob = pickle.dumps(g)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        out, trend = pool.apply(_load_and_run, (blob, xs))
    fg.testing.assert_close(out, g(*xs))  # both ran once more from the same recurrent state
    assert trend == g.trend("out").values()


_worker_graph = None


def _init_worker(graph):
    global _worker_graph
    _worker_graph = graph


def _transform(batch):
    return _worker_graph(batch)


def test_pool_workers_each_receive_the_graph(rng):
    """The pattern of data-loading workers: the graph reaches each worker once, at its start,
    and every batch goes through the worker's copy. (fg.data.DataLoader has no workers.)"""
    g = (fg.flow(nn.Linear(4, 8)).through(nn.GELU()).split(nn.Linear(8, 2), nn.Linear(8, 2))
         .merge(fg.flow.Cat()).build().eval())
    batches = [fg.tensor(rng.normal(size=(3, 4)).astype(np.float32)) for _ in range(4)]
    with multiprocessing.get_context("spawn").Pool(2, initializer=_init_worker, initargs=(g,)) as pool:
        results = pool.map(_transform, batches)
    for batch, out in zip(batches, results):
        fg.testing.assert_close(out, g(batch))
