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


def _tokens(model, prompt, max_new_tokens, sample, cache, compiled):
    """Yields each step's (B,) int64 device tensor of new tokens."""
    device = next(iter(model.parameters())).device
    tokens, lengths, longest = _prompt_rows(prompt, device)
    batch = tokens.shape[0]
    if cache is None:
        if not hasattr(model, "kv_cache"):
            raise TypeError(f"generate: {type(model).__name__} has no kv_cache(batch, max_len) method; pass cache=")
        cache = model.kv_cache(batch, longest + max_new_tokens - 1)
    if cache.batch != batch or cache.max_len < longest + max_new_tokens - 1:
        raise _core.ShapeError(f"generate: a cache of batch {cache.batch} and max_len {cache.max_len} cannot hold "
                               f"{batch} rows of up to {longest} prompt tokens and {max_new_tokens} new ones "
                               f"(needs batch {batch}, max_len >= {longest + max_new_tokens - 1})")
    steps = _Steps(model, cache, sample)
    with no_grad():  # not across the yields: the caller's code between tokens keeps its grad mode
        prefill, decode = steps.prefill, steps.decode
        if compiled:
            prefill = ForwardPlan(steps.prefill, (tokens, lengths))
            decode = ForwardPlan(steps.decode, (_core.zeros(batch, dtype=_core.int64, device=device),))
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
             stream=False, cache=None, compiled=True):
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
    max_new_tokens); with ``stream=True``, a generator of one list of batch ints per step."""
    _check_options(max_new_tokens, temperature, top_k, top_p)
    if seed is not None:
        _core.manual_seed(seed)

    def sample(logits):
        return sample_logits(logits, temperature, top_k, top_p)

    produced = _tokens(model, prompt, max_new_tokens, sample, cache, compiled)
    if stream:
        return _stream(produced, eos)
    if eos is None:
        return _core.stack(list(produced), 1)
    rows = list(_stream(produced, eos))
    return _core.tensor(np.array(rows, dtype=np.int64).T).to(next(iter(model.parameters())).device)
