"""fg.generate: autoregressive sampling from a language model over a static KV cache, with the
prompt's prefill as one compiled plan and every decode step (model, cache write, sampling) as one
compiled plan per token.

The model's side (any fg.nn.Module):
- ``model(tokens, cache)`` with tokens (B, t) int64 returns logits (B, t, vocab); each attention
  layer ``i`` attends with ``cache.attend(i, q, k, v)`` (q, k, v of shape (B, heads, t, head_dim))
  and positional embeddings read ``cache.positions(t)`` (B, t);
- ``model.kv_cache(batch, max_len)`` returns a fresh :class:`fg.nn.KVCache` for it (or pass
  ``cache=``).
"""
import collections
import math

import numpy as np

from . import _core
from ._grad_mode import no_grad
from .compile import ForwardPlan

__all__ = ["generate", "sample_logits"]


def sample_logits(logits, temperature=1.0, top_k=None, top_p=None):
    """One token per row of logits (B, vocab), as (B,) int64, with device ops only (no host read):
    the argmax when temperature is 0 or None; otherwise a draw from softmax(logits / temperature)
    restricted to the top_k most likely tokens and to the smallest set whose probability reaches
    top_p (tokens tied with the last one kept), by the Gumbel-max trick over ``fg.rand`` (so it
    follows ``fg.manual_seed`` and replays inside a compiled plan)."""
    if not temperature:
        return logits.argmax(-1)
    x = logits / temperature
    if top_k is not None and top_k < x.shape[-1]:
        kth = _core.narrow(x.topk(top_k, -1)[0], -1, top_k - 1, 1)
        x = _core.where(x < kth, -math.inf, x)
    if top_p is not None and top_p < 1.0:
        ordered = x.sort(-1, descending=True)[0]
        probs = _core.functional.softmax(ordered, -1)
        before = probs.cumsum(-1) - probs  # the probability of the more likely tokens
        smallest_kept = _core.where(before < top_p, ordered, math.inf).amin(-1, keepdim=True)
        x = _core.where(x < smallest_kept, -math.inf, x)
    u = _core.rand(*x.shape, dtype=x.dtype, device=x.device)
    return (x - (-u.log()).log()).argmax(-1)


def _check_options(max_new_tokens, temperature, top_k, top_p):
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise _core.InvalidArgumentError(f"generate: max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if temperature is not None and temperature < 0:
        raise _core.InvalidArgumentError(f"generate: temperature must be >= 0, got {temperature}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise _core.InvalidArgumentError(f"generate: top_k must be a positive integer, got {top_k!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise _core.InvalidArgumentError(f"generate: top_p must be in (0, 1], got {top_p}")


def _prompt_rows(prompt, device):
    """(tokens (B, P) int64 right-padded with 0, lengths (B,) int64, the longest length)."""
    if isinstance(prompt, _core.Tensor):
        if prompt.ndim not in (1, 2) or prompt.dtype not in (_core.int32, _core.int64) or prompt.numel() == 0:
            raise _core.ShapeError(f"generate: prompt must be a non-empty (batch, length) or (length,) integer tensor, "
                                   f"got {prompt.dtype} of shape {tuple(prompt.shape)}")
        tokens = prompt.reshape(1, -1) if prompt.ndim == 1 else prompt
        b, p = tokens.shape
        return tokens.long().to(device), _core.full((b,), p, dtype=_core.int64, device=device), p
    prompt = list(prompt)
    rows = [prompt] if prompt and isinstance(prompt[0], (int, np.integer)) else [list(r) for r in prompt]
    if not rows or any(not r for r in rows):
        raise _core.ShapeError("generate: prompt must hold at least one token per row")
    p = max(len(r) for r in rows)
    padded = np.zeros((len(rows), p), dtype=np.int64)
    for i, r in enumerate(rows):
        padded[i, :len(r)] = r
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    return _core.tensor(padded).to(device), _core.tensor(lengths).to(device), p


class _Steps:
    """The prefill and decode steps over one cache, eager or as compiled plans."""

    def __init__(self, model, cache, sample):
        self.model, self.cache, self.sample = model, cache, sample

    def prefill(self, tokens, lengths):
        b, p = tokens.shape
        self.cache.reset()
        logits = self.model(tokens, self.cache)
        v = logits.shape[-1]
        last = logits.gather(1, (lengths - 1).reshape(b, 1, 1).expand(b, 1, v)).reshape(b, v)
        self.cache.reset(lengths)
        return self.sample(last)

    def decode(self, token):
        b = token.shape[0]
        logits = self.model(token.reshape(b, 1), self.cache)
        self.cache.advance(1)
        return self.sample(logits.reshape(b, logits.shape[-1]))


def _cache_geometry(model, batch, max_len):
    """(bytes per device of a cache of (batch, max_len) as model.kv_cache makes it, a cache of that
    geometry whose buffers hold no memory of their own): read from a one-row, one-position cache."""
    if not hasattr(model, "kv_cache"):
        raise TypeError(f"generate: {type(model).__name__} has no kv_cache(batch, max_len) method; pass cache=")
    probe = model.kv_cache(1, 1)
    per_position = sum(b.numel() * b.dtype.itemsize for n, b in probe.named_buffers() if n != "pos")
    total = batch * max_len * per_position + batch * probe.pos.dtype.itemsize
    # Keys and values of the full shape that hold no bytes (planning reads their shapes only); the
    # positions, batch int64 values, are real.
    for name, b in list(probe.named_buffers()):
        setattr(probe, name, _core.zeros(batch, dtype=b.dtype, device=b.device) if name == "pos" else
                _core.plan.shape_only([batch, probe.heads, max_len, probe.head_dim], b.dtype, b.device))
    probe.batch, probe.max_len = batch, max_len
    return {str(probe.pos.device): total}, probe


def _plans(steps, tokens, lengths, batch, device):
    prefill = ForwardPlan(steps.prefill, (tokens, lengths))
    decode = ForwardPlan(steps.decode, (_core.zeros(batch, dtype=_core.int64, device=device),))
    return prefill, decode


def _footprint(model, cache_bytes, plans):
    """{device: {"weights", "cache", "arena", "total"}} bytes: the model's parameters and buffers, the
    cache, the plans' arenas (plan.memory(); each plan holds its own)."""
    rows = collections.defaultdict(collections.Counter)
    seen = set()
    for _, t in list(model.named_parameters()) + list(model.named_buffers()):
        if hash(t) not in seen:
            seen.add(hash(t))
            rows[str(t.device)]["weights"] += t.numel() * t.dtype.itemsize
    for device, n in cache_bytes.items():
        rows[device]["cache"] += n
    for plan in plans:
        for device, held in plan.memory().items():
            rows[device]["arena"] += held["arena"]
    return {device: {**{key: row[key] for key in ("weights", "cache", "arena")}, "total": sum(row.values())}
            for device, row in rows.items()}


def _check_fits(report, max_memory):
    """Raises fg.OutOfMemoryError naming the parts when a device's total passes max_memory (bytes, or
    {device: bytes})."""
    if max_memory is None:
        return
    for device, row in report.items():
        bound = max_memory.get(device) if isinstance(max_memory, dict) else max_memory
        if bound is not None and row["total"] > bound:
            parts = ", ".join(f"{key} {row[key]}" for key in ("weights", "cache", "arena"))
            raise _core.OutOfMemoryError(f"generate: needs {row['total']} bytes on {device} ({parts}) but "
                                         f"max_memory allows {bound}; lower the batch, the prompt or max_new_tokens")


def _tokens(model, prompt, max_new_tokens, sample, cache, compiled, max_memory=None, dry_run=False):
    """Yields each step's (B,) int64 device tensor of new tokens; with dry_run, returns the bytes
    (_footprint) instead, allocating neither the cache nor an arena."""
    device = next(iter(model.parameters())).device
    tokens, lengths, longest = _prompt_rows(prompt, device)
    batch, max_len = tokens.shape[0], longest + max_new_tokens - 1
    if cache is None and (dry_run or max_memory is not None):
        cache_bytes, planning_cache = _cache_geometry(model, batch, max_len)
        _check_fits(_footprint(model, cache_bytes, ()), max_memory)  # before the cache is made
        if dry_run:
            with no_grad():
                plans = _plans(_Steps(model, planning_cache, sample), tokens, lengths, batch, device)
            report = _footprint(model, cache_bytes, plans)
            _check_fits(report, max_memory)
            return report
    if cache is None:
        if not hasattr(model, "kv_cache"):
            raise TypeError(f"generate: {type(model).__name__} has no kv_cache(batch, max_len) method; pass cache=")
        cache = model.kv_cache(batch, max_len)
    if cache.batch != batch or cache.max_len < max_len:
        raise _core.ShapeError(f"generate: a cache of batch {cache.batch} and max_len {cache.max_len} cannot hold "
                               f"{batch} rows of up to {longest} prompt tokens and {max_new_tokens} new ones "
                               f"(needs batch {batch}, max_len >= {max_len})")
    cache_bytes = {str(cache.pos.device): sum(b.numel() * b.dtype.itemsize for _, b in cache.named_buffers())}
    if dry_run:
        with no_grad():
            report = _footprint(model, cache_bytes, _plans(_Steps(model, cache, sample), tokens, lengths, batch, device))
        _check_fits(report, max_memory)
        return report
    return _produce(model, cache, cache_bytes, sample, tokens, lengths, max_new_tokens, compiled, max_memory)


def _produce(model, cache, cache_bytes, sample, tokens, lengths, max_new_tokens, compiled, max_memory):
    steps = _Steps(model, cache, sample)
    with no_grad():  # not across the yields: the caller's code between tokens keeps its grad mode
        prefill, decode = steps.prefill, steps.decode
        if compiled:
            prefill, decode = _plans(steps, tokens, lengths, tokens.shape[0], tokens.device)
            _check_fits(_footprint(model, cache_bytes, (prefill, decode)), max_memory)  # before they run
        token = prefill(tokens, lengths)
    yield token
    for _ in range(max_new_tokens - 1):
        with no_grad():
            token = decode(token)
        yield token


def _stream(produced, eos):
    done = None
    for token in produced:
        row = token.tolist()
        if eos is not None:
            done = [False] * len(row) if done is None else done
            row = [eos if d else t for d, t in zip(done, row)]
            done = [d or t == eos for d, t in zip(done, row)]
        yield row
        if done is not None and all(done):
            return


def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, eos=None, seed=None,
             stream=False, cache=None, compiled=True, dry_run=False, max_memory=None):
    """Samples up to max_new_tokens tokens after each row of prompt from `model` (see the module
    docstring for what the model provides) over a static KV cache.

    prompt: a (batch, length) or (length,) integer tensor, a list of token ids, or a list of such
    lists of different lengths (ragged rows: each row continues from its own last token).
    Sampling: see :func:`sample_logits` (temperature 0 or None is greedy); ``seed`` seeds the
    global generator first (``fg.manual_seed``), and the tokens equal those of the same call with
    ``compiled=False`` (each step run eagerly) from the same seed. After a row samples `eos` it
    yields eos; generation stops early once every row has.

    With ``compiled=True`` (default) the prefill is one plan and each new token one replay of the
    decode plan, sampling included: no host read per token except reading the tokens when
    streaming or checking for eos. Returns a (batch, n) int64 tensor of the new tokens (n <=
    max_new_tokens); with ``stream=True``, a generator of one list of batch ints per step.

    Memory, known before running: ``dry_run=True`` returns ``{device: {"weights", "cache", "arena",
    "total"}}`` bytes and runs nothing: the model's parameters and buffers; the KV cache of this batch
    and length (its geometry read from a one-row, one-position ``model.kv_cache(1, 1)``, the full
    cache not made); the arenas of the prefill and decode plans, planned over buffers that hold no
    memory (planning reads shapes only) and not allocated. Kernel scratch (a few KB per plan, taken on
    the first run) is not in it. ``max_memory`` (bytes, or ``{"cpu": bytes, "cuda:0": ...}``) bounds the
    total per device: past it ``fg.OutOfMemoryError`` names the weights, cache and arena bytes, raised
    before the cache is made (weights and cache) or before the plans first run (with the arenas), and
    by dry runs alike. Without max_memory nothing is bounded ahead (the allocator's own
    OutOfMemoryError still applies)."""
    _check_options(max_new_tokens, temperature, top_k, top_p)
    if seed is not None:
        _core.manual_seed(seed)

    def sample(logits):
        return sample_logits(logits, temperature, top_k, top_p)

    produced = _tokens(model, prompt, max_new_tokens, sample, cache, compiled, max_memory, dry_run)
    if dry_run:
        return produced
    if stream:
        return _stream(produced, eos)
    if eos is None:
        return _core.stack(list(produced), 1)
    rows = list(_stream(produced, eos))
    return _core.tensor(np.array(rows, dtype=np.int64).T).to(next(iter(model.parameters())).device)
