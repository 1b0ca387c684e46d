"""fg.compile(dynamic=True, buckets=...): one plan per bucket over one shared arena, inputs padded
up to their bucket (results equal eager runs on the unpadded inputs where padding is allowed),
clear ShapeErrors, and a bounded, least-recently-used cache of plans listed in stats["plans"]."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

VOCAB, CONTEXT, IGNORE = 13, 16, -100


class CausalLM(nn.Module):
    """Tokens + learned positions, causal blocks, a head: positions past the end never change the
    ones before, so right-padding with ignored targets leaves loss and gradients unchanged."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, 16)
        self.positions = nn.Parameter(fg.randn(CONTEXT, 16) * 0.02)
        self.blocks = nn.ModuleList([nn.TransformerBlock(16, 2, causal=True) for _ in range(2)])
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, VOCAB)

    def forward(self, idx):
        x = self.tokens(idx) + self.positions[:idx.shape[-1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)).reshape(-1, VOCAB)


def lm_loss(logits, targets):
    return F.cross_entropy(logits, targets.reshape(-1), ignore_index=IGNORE)


def batch(rng, length, device, batch_size=3):
    x = fg.tensor(rng.integers(0, VOCAB, (batch_size, length))).to(device)
    y = fg.tensor(rng.integers(0, VOCAB, (batch_size, length))).to(device)
    return x, y


def lm(device, seed=0):
    fg.manual_seed(seed)
    return CausalLM().to(device)


def bucketed(model, example, **options):
    return fg.compile(model, lm_loss, None, example_inputs=example, dynamic=True, buckets=[4, 8, 16],
                      pad_values=(0, IGNORE), **options)


def test_padded_loss_and_gradients_equal_an_eager_run_on_the_unpadded_input(device):
    rng = np.random.default_rng(0)
    model, reference = lm(device), lm(device)
    step = bucketed(model, batch(rng, 8, device))
    for length in (8, 5, 13, 3, 16, 6):  # buckets 8, 8, 16, 4, 16, 8
        x, y = batch(rng, length, device)
        loss = step(x, y)
        expected = lm_loss(reference(x), y)
        expected.backward()
        np.testing.assert_allclose(loss.cpu().numpy(), expected.detach().cpu().numpy(), rtol=1e-5, atol=1e-6)
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            np.testing.assert_allclose(p.grad.cpu().numpy(), q.grad.cpu().numpy(), rtol=1e-4, atol=1e-6,
                                       err_msg=f"length {length}: {name}")
            q.grad = None
    assert sorted(r["bucket"] for r in step.stats["plans"]) == [4, 8, 16]


def test_bucketed_training_matches_eager_training(device):
    rng = np.random.default_rng(1)
    model, reference = lm(device), lm(device)
    # SGD: Adam would amplify the rounding noise of gradients that are exactly 0 in exact arithmetic
    # (the key bias: softmax ignores a shift of every score of a query) into full-size steps.
    opt = fg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = fg.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    step = fg.compile(model, lm_loss, opt, example_inputs=batch(rng, 4, device), dynamic=True,
                      buckets=[4, 8, 16], pad_values=(0, IGNORE))
    for length in (3, 9, 4, 16, 7, 11):
        x, y = batch(rng, length, device)
        step(x, y)
        ref_opt.zero_grad()
        lm_loss(reference(x), y).backward()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        np.testing.assert_allclose(p.cpu().numpy(), q.detach().cpu().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_buckets_share_one_arena_no_larger_than_the_largest_plus_ten_percent(device):
    rng = np.random.default_rng(2)
    step = bucketed(lm(device), batch(rng, 16, device))  # the largest first: the others fit its arena
    for length in (3, 7, 12, 2):
        step(*batch(rng, length, device))
    plans = step.stats["plans"]
    largest = max(r["arena_bytes"] for r in plans)
    assert len(plans) == 3 and min(r["arena_bytes"] for r in plans) < largest
    assert step.stats["arena_total_bytes"] <= 1.1 * largest
    assert len({entry["plan"].arena().data_ptr() for entry in step._plans.entries.values()}) == 1

    growing = bucketed(lm(device), batch(rng, 4, device))  # the smallest first: the arena grows
    for length in (8, 16, 4, 9):
        growing(*batch(rng, length, device))
    largest = max(r["arena_bytes"] for r in growing.stats["plans"])
    assert growing.stats["arena_total_bytes"] <= 1.1 * largest


def test_plans_of_a_step_write_one_set_of_gradient_tensors(device):
    rng = np.random.default_rng(11)
    model = lm(device)
    step = bucketed(model, batch(rng, 4, device))
    for length in (16, 8, 3):
        step(*batch(rng, length, device))
    entries = list(step._plans.entries.values())
    assert len(entries) == 3
    for p, g in entries[0]["grads"]:
        assert all(dict((hash(q), h) for q, h in e["grads"])[hash(p)].data_ptr() == g.data_ptr() for e in entries)
        assert p.grad.data_ptr() == g.data_ptr()


def test_plans_rebound_onto_a_grown_arena_still_compute_the_same_loss():
    rng = np.random.default_rng(3)
    model, reference = lm("cpu"), lm("cpu")
    step = bucketed(model, batch(rng, 4, "cpu"))
    x, y = batch(rng, 4, "cpu")
    before = step(x, y).numpy()
    step(*batch(rng, 16, "cpu"))  # a larger plan: the bucket-4 plan moves onto its arena
    np.testing.assert_allclose(step(x, y).numpy(), before, rtol=1e-6)
    np.testing.assert_allclose(before, lm_loss(reference(x), y).detach().numpy(), rtol=1e-5)
    step.plan.check_memory()


def test_stats_list_each_plan_with_its_signature_bucket_arena_and_hits():
    rng = np.random.default_rng(4)
    step = bucketed(lm("cpu"), batch(rng, 8, "cpu"))
    for length in (7, 8, 3, 6):
        step(*batch(rng, length, "cpu"))
    plans = step.stats["plans"]
    assert [(r["bucket"], r["hits"]) for r in plans] == [(4, 0), (8, 3)]  # least recently used first
    assert plans[1]["signature"] == (((3, 8), "flowgrad.int64", "cpu"), ((3, 8), "flowgrad.int64", "cpu"))
    assert all(r["arena_bytes"] == r_plan.stats()["arena_bytes"] > 0
               for r, r_plan in zip(plans, [e["plan"] for e in step._plans.entries.values()]))


def test_an_input_longer_than_the_largest_bucket_raises_a_shape_error_naming_the_buckets():
    rng = np.random.default_rng(5)
    step = bucketed(lm("cpu"), batch(rng, 8, "cpu"))
    with pytest.raises(fg.ShapeError, match=r"input 0 has shape \(3, 17\): dim 1 of size 17 is larger than "
                                            r"the largest of buckets \[4, 8, 16\]"):
        step(*batch(rng, 17, "cpu"))


def test_padding_an_input_without_a_pad_value_raises_a_shape_error():
    rng = np.random.default_rng(6)
    step = fg.compile(lm("cpu"), lm_loss, None, example_inputs=batch(rng, 8, "cpu"), dynamic=True,
                      buckets=[4, 8, 16], pad_values=(0, None))
    step(*batch(rng, 16, "cpu"))  # a bucket's own size needs no padding
    with pytest.raises(fg.ShapeError, match=r"input 1 has shape \(3, 5\): dim 1 must be padded up to bucket 8 "
                                            r"of buckets \[4, 8, 16\], but input 1 has no pad value"):
        step(*batch(rng, 5, "cpu"))


def test_bucket_dim_pads_another_dimension_and_inputs_without_it_stay():
    fg.manual_seed(0)
    model = nn.Linear(4, 1)
    rng = np.random.default_rng(7)

    def loss_fn(out, target):  # (N, 1) outputs, a 0-d scale: padded rows are zeros with zero targets
        return ((out - model.bias) ** 2).sum() * target

    x = fg.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    scale = fg.tensor(np.float32(0.5))
    step = fg.compile(model, loss_fn, None, example_inputs=(x, scale), dynamic=True, buckets=[8], bucket_dim=0,
                      pad_values=(0.0, None))
    loss = step(x, scale)
    assert step.stats["plans"][0]["signature"][0][0] == (8, 4)
    expected = ((model(x) - model.bias) ** 2).sum() * scale
    np.testing.assert_allclose(loss.numpy(), expected.detach().numpy(), rtol=1e-5)


def test_tagged_values_with_the_padded_dimension_are_sliced_back():
    fg.manual_seed(0)
    first = nn.Linear(4, 4)
    graph = fg.FlowBuilder(first).tag("hidden").through(nn.Linear(4, 1)).build()
    rng = np.random.default_rng(8)
    x = fg.tensor(rng.standard_normal((2, 3, 4)).astype(np.float32))
    scale = fg.tensor(np.float32(1.0))
    step = fg.compile(graph, lambda out, s: out.sum() * s, None, example_inputs=(x, scale), dynamic=True,
                      buckets=[4, 8], pad_values=(0.0, None))
    step(x, scale)
    assert step.stats["plans"][0]["signature"][0][0] == (2, 4, 4)
    np.testing.assert_allclose(graph.tagged("hidden").numpy(), first(x).detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("options, message", [
    (dict(buckets=[8, 4]), r"buckets must be increasing positive integers \(e.g. \[128, 256, 512\]\), got \[8, 4\]"),
    (dict(buckets=[0, 4]), r"buckets must be increasing positive integers"),
    (dict(buckets=[4, 8], bucket_dim=-1), r"bucket_dim must be a non-negative integer, got -1"),
    (dict(buckets=[4, 8], pad_values=(0,)), r"pad_values needs one entry \(a number or None\) per step input: 2, got 1"),
    (dict(buckets=[4, 8], max_plans=1), r"max_plans=1 cannot keep a plan for each of buckets \[4, 8\]"),
    (dict(max_plans=0), r"max_plans must be a positive integer, got 0"),
])
def test_bad_bucket_options_raise_invalid_argument(options, message):
    rng = np.random.default_rng(9)
    with pytest.raises(fg.InvalidArgumentError, match=message):
        fg.compile(lm("cpu"), lm_loss, None, example_inputs=batch(rng, 4, "cpu"), dynamic=True, **options)


def test_buckets_need_dynamic():
    rng = np.random.default_rng(9)
    with pytest.raises(fg.InvalidArgumentError, match=r"buckets need dynamic=True"):
        fg.compile(lm("cpu"), lm_loss, None, example_inputs=batch(rng, 4, "cpu"), buckets=[4, 8])


def test_max_plans_drops_the_least_recently_used_plan():
    fg.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(10)

    def xy(n):
        return (fg.tensor(rng.standard_normal((n, 3)).astype(np.float32)), fg.tensor(rng.integers(0, 2, n)))

    step = fg.compile(model, F.cross_entropy, opt, example_inputs=xy(2), dynamic=True, max_plans=2)

    def cached():
        return [r["signature"][0][0][0] for r in step.stats["plans"]]

    step(*xy(3))
    assert cached() == [2, 3]
    step(*xy(2))  # a hit: 2 becomes the most recently used
    assert cached() == [3, 2]
    step(*xy(4))  # 3 is dropped
    assert cached() == [2, 4] and len(step._plans) == 2
    step(*xy(3))  # traced again, dropping 2
    assert cached() == [4, 3]
    assert [r["hits"] for r in step.stats["plans"]] == [0, 0] and step.stats["traces"] == 4


def test_bind_arena_refuses_memory_that_cannot_hold_the_plan():
    rng = np.random.default_rng(12)
    step = bucketed(lm("cpu"), batch(rng, 16, "cpu"))
    plan = step.plan
    need = plan.stats()["arena_bytes"]
    with pytest.raises(fg.InvalidArgumentError, match=rf"bind_arena: the plan needs {need} arena bytes on cpu, "
                                                      rf"got {need - 1} bytes on cpu"):
        plan.bind_arena(fg.empty(need - 1, dtype=fg.uint8))
    with pytest.raises(fg.InvalidArgumentError, match=r"Plan.bind_arena: expected a whole 1-D uint8 storage"):
        plan.bind_arena(fg.empty(need, dtype=fg.float32))
    with pytest.raises(fg.InvalidArgumentError, match=r"Plan.bind_arena: expected a whole 1-D uint8 storage"):
        plan.bind_arena(fg.empty(need + 8, dtype=fg.uint8)[8:])
    x, y = batch(rng, 16, "cpu")
    before = plan.run([x, y])[0].numpy()
    plan.bind_arena(fg.empty(need + 64, dtype=fg.uint8))  # larger is fine: the same results
    np.testing.assert_allclose(plan.run([x, y])[0].numpy(), before, rtol=1e-6)
