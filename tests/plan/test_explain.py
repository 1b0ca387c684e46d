"""step.explain(): every instruction of a compiled step with its phase, the module path or
FlowBuilder tag and the user's source line it came from, its arena bytes and offset, and what
each pass of the plan's build did."""
import inspect
import sys

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

PHASES = ["forward", "backward", "optimizer"]
PASSES = ["trace", "cse", "constant folding", "gradient binding", "dead code", "transpose folding", "fuse epilogues",
          "fuse add norm", "pair gemms", "fusion"]
HERE = "test_explain.py:"


class TinyLM(nn.Module):
    """Two causal attention blocks between an embedding and a head."""

    def __init__(self, vocab=11, dim=16):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([nn.TransformerBlock(dim, 2, causal=True) for _ in range(2)])
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tokens(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x).reshape(-1, 11)  # HEAD LINE


def line_of(fn, text):
    """'test_explain.py:N' of the first line of `fn` holding `text`."""
    src, first = inspect.getsourcelines(fn)
    return HERE + str(first + next(i for i, line in enumerate(src) if text in line))


def mlp_step():
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5))
    x, y = fg.randn(16, 20), fg.tensor(np.arange(16) % 5)
    return fg.compile(model, F.cross_entropy, fg.optim.Adam(model.parameters(), lr=1e-3), example_inputs=(x, y))


def check_common(step):
    """Phases in order, sources in this file, bytes and offsets inside the arena, passes chained."""
    e = step.explain()
    assert len(e.rows) == step.stats["instructions"] == len(step.ir())
    assert [r["op"] for r in e.rows] == [r["op"] for r in step.ir()]
    order = [PHASES.index(r["phase"]) for r in e.rows]
    assert order == sorted(order) and set(order) == {0, 1, 2}
    assert all(r["source"].startswith(HERE) for r in e.rows), {r["source"] for r in e.rows}
    arena = step.stats["arena_bytes"]
    assert e.arena_bytes == arena
    buffers = {b["name"]: b for b in step.plan.buffers()}
    placed = [r for r in e.rows if r["offset"] is not None]
    assert placed
    for r in placed:  # the first output's buffer lies inside the arena where the row says
        first = buffers[r["buffer"]]
        assert first["kind"] == "arena" and first["offset"] == r["offset"] and 0 < first["bytes"] <= r["bytes"]
        assert 0 <= r["offset"] and r["offset"] + first["bytes"] <= arena
    assert all(r["bytes"] == 0 for r in e.rows if r["offset"] is None)
    assert [p[0] for p in e.passes] == PASSES
    assert e.passes[0][1] == step.stats["traced"]
    for (_, _, after), (_, before, _) in zip(e.passes, e.passes[1:]):
        assert after == before
    assert e.passes[-2][2] == step.stats["instructions"] and e.passes[-1][2] == step.stats["kernels"]
    text = str(e)
    assert f"cse: {e.passes[1][1]} -> {e.passes[1][2]}" in text and f"arena: {arena} bytes" in text
    return e


def test_mlp_rows_name_phase_layer_and_line():
    step = mlp_step()
    e = check_common(step)
    line = line_of(mlp_step, "fg.compile(")
    forward = [r for r in e.rows if r["phase"] == "forward"]
    assert [(r["module"], r["op"]) for r in forward if r["op"].startswith("linear")] == [("0", "linear_relu"),
                                                                                          ("2", "linear")]
    assert all(r["source"] == line for r in e.rows)  # a C++ model: the compile call issued every op
    assert [r["op"] for r in e.rows if r["phase"] == "optimizer"] == ["adam_update_multi"]  # one per group
    # A backward op is labelled with the forward call whose gradient it computes.
    backward = [r for r in e.rows if r["phase"] == "backward"]
    assert [r["module"] for r in backward if r["op"] == "matmul"] == ["0"]  # layer 0's input needs no gradient
    assert [r["module"] for r in backward if r["op"] == "matmul_pair"] == ["2"]  # layer 2's input and weight gradients
    assert [r["module"] for r in backward if r["op"] == "relu_backward_colsum"] == ["1"]  # with layer 0's bias gradient
    assert [r["module"] for r in backward if r["op"].startswith("cross_entropy")] == [""]  # the loss function
    assert str(step).endswith(str(e)) and "optimizer" in str(step) and "module" in str(step)


def test_flowbuilder_rows_name_the_tags():
    fg.manual_seed(0)
    g = (fg.FlowBuilder(nn.Linear(20, 16)).tag("in").through(nn.ReLU())
         .through(nn.Sequential(nn.Linear(16, 16), nn.Tanh())).tag("mid")
         .through(nn.Linear(16, 5)).tag("logits").build())
    x, y = fg.randn(8, 20), fg.tensor(np.arange(8) % 5)
    step = fg.compile(g, F.cross_entropy, fg.optim.SGD(g.parameters(), lr=0.1), example_inputs=(x, y))
    e = check_common(step)
    mods = [(r["module"], r["op"]) for r in e.rows if r["phase"] == "forward" and r["op"].startswith("linear")]
    assert mods == [("1[in]", "linear_relu"), ("3[mid].0", "linear_tanh"), ("4[logits]", "linear")]


def test_transformer_rows_name_blocks_and_source_lines():
    fg.manual_seed(0)
    model = TinyLM()
    idx, y = fg.tensor(np.arange(24).reshape(3, 8) % 11), fg.tensor(np.arange(24) % 11)
    step = fg.compile(model, F.cross_entropy, fg.optim.AdamW(model.parameters(), lr=1e-3), example_inputs=(idx, y))
    e = check_common(step)
    forward = [r for r in e.rows if r["phase"] == "forward"]
    mods = {r["module"] for r in forward}
    assert any(m.startswith("blocks.0.") for m in mods) and any(m.startswith("blocks.1.") for m in mods)
    head, block = line_of(TinyLM.forward, "HEAD LINE"), line_of(TinyLM.forward, "x = block(x)")
    assert {r["source"] for r in forward if r["module"] == "head"} == {head}
    assert {r["source"] for r in forward if r["module"].startswith("blocks.")} == {block}
    # The loss, backward and update ops are issued by flowgrad's step on behalf of the compile call.
    call = line_of(test_transformer_rows_name_blocks_and_source_lines, "fg.compile(")
    assert {r["source"] for r in e.rows if r["op"].startswith("cross_entropy")} == {call}
    assert {r["source"] for r in e.rows if r["phase"] == "optimizer"} == {call}
    # Backward ops carry the module and source line of the forward call they differentiate.
    backward = [r for r in e.rows if r["phase"] == "backward"]
    assert {r["source"] for r in backward if r["module"].startswith("blocks.")} == {block}
    assert {r["source"] for r in backward if r["module"] == "head"} == {head}
    assert any(r["module"].startswith("blocks.1.") for r in backward)
    # step.explain() describes the same plan every call runs: training goes on unchanged.
    losses = [step(idx, y).item() for _ in range(3)]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


def test_forward_plan_explains_and_a_running_profiler_is_kept():
    fg.manual_seed(0)
    model = TinyLM()
    idx = fg.tensor(np.arange(8).reshape(1, 8) % 11)
    calls, previous = [], sys.getprofile()
    sys.setprofile(lambda frame, event, arg: calls.append(event))
    try:
        step = fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.1),
                          example_inputs=(idx, fg.tensor(np.arange(8) % 11)))
        assert sys.getprofile() is not None and calls  # compile did not take the user's profiler away
    finally:
        sys.setprofile(previous)
    check_common(step)
    infer = step.forward_plan(idx)
    rows = infer.explain().rows
    assert {r["phase"] for r in rows} == {"forward"} and any(r["module"] == "head" for r in rows)
    head = line_of(TinyLM.forward, "HEAD LINE")
    assert {r["source"] for r in rows if r["module"] == "head"} == {head}
