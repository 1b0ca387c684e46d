"""Generation tokens/s: fg.generate (prefill plan + one decode plan replay per token) and the same steps
run eagerly, against PyTorch eager with a static KV cache (gpt-fast's layout) and torch.compile of the same
static-cache decode step, at batch 1 and 8, greedy, on the example's TinyGPT with random weights; the
greedy tokens of every peer are compared. Then the prefill alone (flowgrad's prefill plan replayed against
PyTorch eager) at several prompt lengths.

    python benchmarks/bench_generate.py [--layers 4] [--dim 256] [--heads 4] [--vocab 512] [--prompt 32]
                                        [--tokens 200] [--rounds 5] [--threads 1] [--prefill 16 64 128]
                                        [--no-compile] [--save [NAME]]

Rounds are interleaved (each round times every peer once), medians reported. The PyTorch peers are
skipped when torch is not installed; the torch.compile peer also when inductor cannot compile (no C
compiler), with the reason printed; its compile time (the first calls, which compile) is reported.
Run it at each ISA level with FLOWGRAD_ISA=avx2 / generic (PyTorch's own kernels do not follow it).
"""
import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
from common import interleaved, load_average, machine, save  # noqa: E402
from generate import TinyGPT  # noqa: E402

import flowgrad as fg  # noqa: E402


def torch_forward(model, args):
    """The model in PyTorch over a preallocated cache written with index_copy_: forward(idx, cache, at) with
    at (t,) int64 the positions of the t new tokens. None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(args.threads)
    weights = {name: torch.from_numpy(np.array(p.numpy())) for name, p in model.named_parameters()}
    heads, layers = args.heads, args.layers

    def linear(x, name):
        return torch.nn.functional.linear(x, weights[name + ".weight"], weights[name + ".bias"])

    def norm(x, name):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), weights[name + ".weight"], weights[name + ".bias"])

    def forward(idx, cache, at):
        b, t = idx.shape
        x = weights["tokens.weight"][idx] + weights["positions.weight"][at]
        mask = torch.arange(cache[0].shape[2]).view(1, -1) <= at.view(-1, 1)
        for i in range(layers):
            p = f"blocks.{i}."
            h = norm(x, p + "norm1")
            q, k, v = (z.reshape(b, t, heads, -1).transpose(1, 2) for z in linear(h, p + "attn.qkv").split(x.shape[-1], -1))
            cache[2 * i].index_copy_(2, at, k)
            cache[2 * i + 1].index_copy_(2, at, v)
            y = torch.nn.functional.scaled_dot_product_attention(q, cache[2 * i], cache[2 * i + 1], attn_mask=mask)
            x = x + linear(y.transpose(1, 2).reshape(b, t, -1), p + "attn.proj")
            h = torch.nn.functional.gelu(linear(norm(x, p + "norm2"), p + "mlp.0"))
            x = x + linear(h, p + "mlp.2")
        return linear(norm(x, "norm"), "head")

    return forward


def torch_generator(forward, args, step=None):
    """Greedy generation with PyTorch: the prefill eager, each decode step `step(token, cache, at)` (default:
    forward eagerly) over a cache of the longest length (one static shape for torch.compile)."""
    import torch

    step = step or forward

    @torch.no_grad()
    def generate(prompt):
        b, length = prompt.shape
        shape = (b, args.heads, args.prompt + args.tokens, args.dim // args.heads)
        cache = [torch.zeros(shape) for _ in range(2 * args.layers)]
        token = forward(prompt, cache, torch.arange(length))[:, -1].argmax(-1)
        out = [token]
        for i in range(args.tokens - 1):
            token = step(token.view(b, 1), cache, torch.tensor([length + i]))[:, -1].argmax(-1)
            out.append(token)
        return torch.stack(out, 1)

    return lambda prompt: generate(torch.from_numpy(prompt)).numpy()


def torch_compiled(forward):
    """torch.compile of the decode step (gpt-fast's static cache, the position a tensor), or the reason it
    cannot run here."""
    import torch
    try:
        return torch.compile(forward, dynamic=False), None
    except Exception as e:  # noqa: BLE001 (inductor's errors have no common base)
        return None, f"{type(e).__name__}: {e}"


def compile_seconds(model, batch, prompt_len, max_len):
    """Seconds to compile fg.generate's prefill and decode plans (trace + plan build), as it does per call."""
    from flowgrad._generate import _Steps, sample_logits
    steps = _Steps(model, model.kv_cache(batch, max_len), lambda logits: sample_logits(logits, 0))
    with fg.no_grad():
        prefill = fg.ForwardPlan(steps.prefill, (fg.zeros(batch, prompt_len, dtype=fg.int64),
                                                 fg.full((batch,), prompt_len, dtype=fg.int64)))
        decode = fg.ForwardPlan(steps.decode, (fg.zeros(batch, dtype=fg.int64),))
    return {name: sum(plan.compile_seconds.values()) for name, plan in (("prefill", prefill), ("decode", decode))}


def prefill_rows(model, forward, args):
    """Prefill alone at each prompt length (batch 1): flowgrad's prefill plan replayed against PyTorch eager."""
    from flowgrad._generate import _Steps, sample_logits
    rows = []
    for length in args.prefill:
        prompt = np.random.default_rng(length).integers(0, args.vocab, size=(1, length))
        steps = _Steps(model, model.kv_cache(1, length), lambda logits: sample_logits(logits, 0))
        tokens, lengths = fg.tensor(prompt), fg.full((1,), length, dtype=fg.int64)
        with fg.no_grad():
            plan = fg.ForwardPlan(steps.prefill, (tokens, lengths))
        peers = {"flowgrad plan": lambda: plan(tokens, lengths).numpy()}
        if forward is not None:
            import torch
            cache = [torch.zeros(1, args.heads, length, args.dim // args.heads) for _ in range(2 * args.layers)]
            idx, at = torch.from_numpy(prompt), torch.arange(length)

            def torch_prefill():
                with torch.no_grad():
                    return forward(idx, cache, at)[:, -1].argmax(-1).numpy()
            peers["torch eager"] = torch_prefill
        same = len({int(fn()[0]) for fn in peers.values()}) == 1
        times = interleaved(peers, rounds=args.rounds, min_time=0.05)
        row = {"prompt": length, "load": load_average(), "first_token_equal": same,
               **{name: {"tokens_per_s": length / t["median"], "seconds": t["median"]} for name, t in times.items()}}
        line = "  ".join(f"{name} {row[name]['tokens_per_s']:.0f} tok/s" for name in peers)
        if forward is not None:
            line += f"  plan/torch {row['flowgrad plan']['tokens_per_s'] / row['torch eager']['tokens_per_s']:.2f}x"
        print(f"prefill {length} tokens: {line}  first token equal: {same}", flush=True)
        rows.append(row)
    return rows


def torch_compiled_peer(forward, args, batch):
    """(generate, compile seconds, None) for torch.compile of the decode step at this batch, or (None, None,
    reason) where it cannot compile here. The compile seconds are those of the first call (which compiles)."""
    import torch
    step, reason = torch_compiled(forward)
    if step is None:
        return None, None, reason
    shape = (batch, args.heads, args.prompt + args.tokens, args.dim // args.heads)
    cache = [torch.zeros(shape) for _ in range(2 * args.layers)]
    start = time.perf_counter()
    try:
        with torch.no_grad():
            step(torch.zeros(batch, 1, dtype=torch.int64), cache, torch.tensor([args.prompt]))
    except Exception as e:  # noqa: BLE001 (no C compiler, an inductor failure: the peer is skipped)
        return None, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return torch_generator(forward, args, step), time.perf_counter() - start, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prefill", type=int, nargs="*", default=[16, 64, 128])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile peer")
    parser.add_argument("--save", nargs="?", const="", default=None,
                        help="save as benchmarks/results/bench_generate[-NAME]-<date>.json")
    args = parser.parse_args()

    fg.set_num_threads(args.threads)
    fg.manual_seed(0)
    model = TinyGPT(args.vocab, args.dim, args.heads, args.layers, context=args.prompt + args.tokens).eval()
    with fg.no_grad():
        for p in model.parameters():  # larger than the initialisation: tokens vary, ties are unlikely
            p.mul_(2.0)
    forward = torch_forward(model, args)
    torch_generate = torch_generator(forward, args) if forward is not None else None
    rows = []
    for batch in args.batches:
        prompt = np.random.default_rng(batch).integers(0, args.vocab, size=(batch, args.prompt))
        peers = {"flowgrad plan": lambda: fg.generate(model, fg.tensor(prompt), args.tokens, temperature=0).numpy(),
                 "flowgrad eager": lambda: fg.generate(model, fg.tensor(prompt), args.tokens, temperature=0,
                                                       compiled=False).numpy()}
        row = {"batch": batch}
        if torch_generate is not None:
            peers["torch eager kv"] = lambda: torch_generate(prompt)
            if not args.no_compile:
                compiled, row["torch_compile_seconds"], reason = torch_compiled_peer(forward, args, batch)
                if compiled is None:
                    row["torch_compile_skipped"] = reason
                    print(f"batch {batch}: torch.compile peer skipped: {reason}")
                else:
                    peers["torch.compile kv"] = lambda: compiled(prompt)
        tokens = {name: fn() for name, fn in peers.items()}
        same = {name: int((t == tokens["flowgrad plan"]).sum()) for name, t in tokens.items()}
        times = interleaved(peers, rounds=args.rounds, min_time=0.0)
        row.update({"load": load_average(), "greedy_tokens_equal_to_plan": same, "tokens_total": batch * args.tokens,
                    "compile_seconds": compile_seconds(model, batch, args.prompt, args.prompt + args.tokens)})
        for name, t in times.items():
            row[name] = {"tokens_per_s": batch * args.tokens / t["median"], "seconds": t["median"],
                         "samples": t["samples"]}
        rows.append(row)
        line = "  ".join(f"{name} {row[name]['tokens_per_s']:.0f} tok/s" for name in peers)
        ratios = "".join(f"  plan/{name} {row['flowgrad plan']['tokens_per_s'] / row[name]['tokens_per_s']:.2f}x"
                         for name in peers if name.startswith("torch"))
        compiled_s = f"  torch.compile s: {row['torch_compile_seconds']:.1f}" if row.get("torch_compile_seconds") else ""
        print(f"batch {batch}: {line}{ratios}  greedy tokens equal to the plan's: {same} of {batch * args.tokens}  "
              f"compile s: {row['compile_seconds']}{compiled_s}", flush=True)
    prefill = prefill_rows(model, forward, args)
    if args.save is not None:
        payload = {"machine": machine(), "command": "python " + " ".join(["benchmarks/bench_generate.py"] + sys.argv[1:]),
                   "config": vars(args), "results": rows, "prefill": prefill}
        print("saved", save("bench_generate" + (f"-{args.save}" if args.save else ""), payload))


if __name__ == "__main__":
    main()
