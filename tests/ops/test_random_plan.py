"""Random ops inside compiled plans: rand, randn and randint read the plan's {seed, base} pair
(the "philox" buffer, an explicit input) and draw counters base + their offset attribute, and
philox_advance_, the plan's last instruction, moves base on by the step's draws. Checked against
eager draws from the same seed on odd shapes, dtypes and size-0 tensors, call after call."""
import re

import numpy as np
import pytest

import flowgrad as fg


def compiled(fn, x):
    """A plan of fn(x) returning its outputs (the generator is left where it was before the trace)."""
    state = fg.get_rng_state()
    tracer = fg._core.plan.Tracer()
    with tracer:
        outputs = fn(x)
    fg.set_rng_state(state)
    return fg._core.plan.Plan(tracer, [x], list(outputs), [], [], [])


def draws(shape, dtype):
    """A step that draws one tensor of each random op and returns them (plus x, so it has an input)."""
    def fn(x):
        return (x + fg.rand(*shape, dtype=dtype, device=x.device), fg.randn(*shape, dtype=dtype, device=x.device),
                fg.randint(-3, 1000, shape, device=x.device))
    return fn


@pytest.mark.parametrize("shape", [(45, 65), (7,), (1, 1), (0, 3)])
@pytest.mark.parametrize("dtype", [fg.float32, fg.float64])
def test_compiled_draws_equal_eager_draws_from_the_same_seed_call_after_call(shape, dtype, device):
    x = fg.zeros(1, dtype=dtype, device=device)
    fn = draws(shape, dtype)
    plan = compiled(fn, x)
    fg.manual_seed(3)
    eager = [[t.cpu().numpy() for t in fn(x)] for _ in range(3)]
    state = fg.get_rng_state()
    fg.manual_seed(3)
    planned = [[t.cpu().numpy() for t in plan.run([x])] for _ in range(3)]
    assert fg.get_rng_state() == state  # the plan reserved exactly what eager calls drew
    for got, want in zip(planned, eager):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    if 0 not in shape:
        assert not np.array_equal(planned[0][1], planned[1][1])  # fresh values every call


def test_random_calls_read_the_pair_and_the_last_instruction_advances_it():
    plan = compiled(draws((5, 3), fg.float32), fg.zeros(1))
    ir = plan.ir()
    random = [r for r in ir if r["random"]]
    assert [r["op"] for r in random] == ["rand", "randn", "randint"]
    for r, delta in zip(random, (0, 15, 30)):  # each draws from its own offset past the step's base
        assert r["inputs"] == ["philox"]
        assert re.search(rf"\boffset={delta}\b", r["attrs"]), r["attrs"]
    last = ir[-1]
    assert last["op"] == "philox_advance_"
    assert last["inputs"] == ["philox"] and last["outputs"] == ["philox"]
    assert re.search(r"\bby=45\b", last["attrs"]), last["attrs"]
    pair = [b for b in plan.buffers() if b["name"] == "philox"]
    assert len(pair) == 1 and pair[0]["kind"] == "external" and pair[0]["bytes"] == 16


def test_a_plan_without_random_calls_has_no_pair_and_no_advance():
    x = fg.ones(4)
    plan = compiled(lambda t: (t * 2,), x)
    assert "philox_advance_" not in [r["op"] for r in plan.ir()]
    assert "philox" not in [b["name"] for b in plan.buffers()]
    np.testing.assert_array_equal(plan.run([x])[0].numpy(), np.full(4, 2, np.float32))


def test_philox_derive_gives_each_branch_of_a_parallel_level_its_own_stream():
    """The branches of a parallel level draw from streams derived from the step's pair: one
    philox_derive per branch reads the pair (key: the branch's node id; offset: where the level
    forked the generator), and the plan draws what eager branches draw."""
    fg.manual_seed(0)
    g = (fg.FlowBuilder(fg.nn.Linear(4, 6)).split(fg.nn.Dropout(0.5), fg.nn.Dropout(0.5), fg.nn.Dropout(0.25))
         .merge(fg.flow.Add()).build())
    x = fg.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    plan = compiled(lambda t: (g(t),), x)
    derives = [r for r in plan.ir() if r["op"] == "philox_derive"]
    assert len(derives) == 3 and all(r["inputs"] == ["philox"] for r in derives)
    keys = {re.search(r"\bkey=(\d+)", r["attrs"]).group(1) for r in derives}
    assert len(keys) == 3
    assert all(re.search(r"\boffset=0\b", r["attrs"]) for r in derives)  # the level forks at the step's base
    for seed in (3, 4):
        fg.manual_seed(seed)
        with fg.no_grad():
            want = g(x).numpy()
        fg.manual_seed(seed)
        np.testing.assert_array_equal(plan.run([x])[0].numpy(), want)
