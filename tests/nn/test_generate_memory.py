"""fg.generate's memory before running: dry_run=True reports weights, cache and arena bytes per device
without making the cache or running a step (checked against the closed forms and against the plans of a
real run), and max_memory raises fg.OutOfMemoryError naming them, before the cache is made."""
import pathlib
import sys

import pytest

import flowgrad as fg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from generate import TinyGPT  # noqa: E402  (the example's model)

VOCAB, DIM, HEADS, LAYERS = 23, 32, 4, 2


@pytest.fixture
def model():
    fg.manual_seed(3)
    return TinyGPT(vocab=VOCAB, dim=DIM, heads=HEADS, layers=LAYERS, context=64).eval()


def weight_bytes(model):
    return 4 * sum(p.numel() for p in model.parameters())


def cache_bytes(batch, max_len):
    """k and v of every layer, (batch, heads, max_len, head_dim) float32, and the (batch,) int64 positions."""
    return LAYERS * 2 * batch * HEADS * max_len * (DIM // HEADS) * 4 + 8 * batch


def test_dry_run_reports_weights_cache_and_arena_without_running(model):
    prompt = [[1, 2, 3], [4, 5]]
    before = fg.get_rng_state()
    report = fg.generate(model, prompt, 20, temperature=0.8, dry_run=True)
    assert list(report) == ["cpu"]
    row = report["cpu"]
    assert row["weights"] == weight_bytes(model)
    assert row["cache"] == cache_bytes(2, 3 + 20 - 1)
    assert row["arena"] > 0
    assert row["total"] == row["weights"] + row["cache"] + row["arena"]
    assert fg.get_rng_state() == before  # nothing drawn: no step ran


def test_dry_run_arena_equals_the_plans_of_a_real_run(model):
    """The arenas planned over buffers without memory are those of the plans over the real cache."""
    from flowgrad._generate import _plans, _Steps, _prompt_rows, sample_logits
    report = fg.generate(model, [[7, 1, 2, 3]], 9, temperature=0, dry_run=True)
    tokens, lengths, _ = _prompt_rows([[7, 1, 2, 3]], "cpu")
    with fg.no_grad():
        plans = _plans(_Steps(model, model.kv_cache(1, 12), lambda x: sample_logits(x, 0)), tokens, lengths, 1, "cpu")
    assert report["cpu"]["arena"] == sum(p._plan.stats()["arena_bytes"] for p in plans)
    with_cache = fg.generate(model, [[7, 1, 2, 3]], 9, temperature=0, dry_run=True, cache=model.kv_cache(1, 12))
    assert with_cache == report


def test_max_memory_raises_out_of_memory_naming_the_parts(model):
    report = fg.generate(model, [1, 2, 3], 10, temperature=0, dry_run=True)["cpu"]
    tokens = fg.generate(model, [1, 2, 3], 10, temperature=0, max_memory=report["total"])  # fits exactly
    assert tokens.shape == (1, 10)
    with pytest.raises(fg.OutOfMemoryError, match=(
            rf"generate: needs {report['total']} bytes on cpu \(weights {report['weights']}, cache {report['cache']}, "
            rf"arena {report['arena']}\) but max_memory allows {report['total'] - 1}; lower the batch")):
        fg.generate(model, [1, 2, 3], 10, temperature=0, max_memory={"cpu": report["total"] - 1})
    small = report["weights"] + report["cache"] - 1  # the weights and cache alone do not fit: raised before the cache
    with pytest.raises(fg.OutOfMemoryError, match=rf"needs {report['weights'] + report['cache']} bytes on cpu "
                                                  rf"\(weights {report['weights']}, cache {report['cache']}, arena 0\)"):
        fg.generate(model, [1, 2, 3], 10, temperature=0, max_memory=small)
    with pytest.raises(fg.OutOfMemoryError, match="but max_memory allows 1000"):
        fg.generate(model, [1, 2, 3], 10, dry_run=True, max_memory=1000)
    assert isinstance(fg.OutOfMemoryError("x"), MemoryError)


def test_shape_only_tensors_hold_no_bytes():
    t = fg._core.plan.shape_only([4, 1 << 40], fg.float32, fg.zeros(1).device)  # 16 TiB: never allocated
    assert t.shape == (4, 1 << 40)
    with pytest.raises(fg.FlowgradError):
        t.sum().item()
