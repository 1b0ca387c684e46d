"""Generation tokens/s: fg.generate (prefill plan + one decode plan replay per token) and the same steps
run eagerly, against PyTorch eager with a static KV cache (gpt-fast's layout), at batch 1 and 8, greedy,
on the example's TinyGPT with random weights; the greedy tokens of all three are compared.

    python benchmarks/bench_generate.py [--layers 4] [--dim 256] [--heads 4] [--vocab 512] [--prompt 32]
                                        [--tokens 200] [--rounds 5] [--threads 1] [--save]

Rounds are interleaved (each round times every peer once), medians reported. The PyTorch peer is
skipped when torch is not installed.
"""
import argparse
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
from common import interleaved, load_average, machine, save  # noqa: E402
from generate import TinyGPT  # noqa: E402

import flowgrad as fg  # noqa: E402


def torch_peer(model, args):
    """The same model in PyTorch, greedy decoding over a preallocated cache written with index_copy_."""
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

    def forward(idx, cache, pos):
        b, t = idx.shape
        at = torch.arange(pos, pos + t)
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

    @torch.no_grad()
    def generate(prompt):
        b, length = prompt.shape
        shape = (b, heads, length + args.tokens, args.dim // heads)
        cache = [torch.zeros(shape) for _ in range(2 * layers)]
        token = forward(prompt, cache, 0)[:, -1].argmax(-1)
        out = [token]
        for i in range(args.tokens - 1):
            token = forward(token.view(b, 1), cache, length + i)[:, -1].argmax(-1)
            out.append(token)
        return torch.stack(out, 1)

    return lambda prompt: generate(torch.from_numpy(prompt)).numpy()


def compile_seconds(model, batch, prompt_len, max_len):
    """Seconds to compile fg.generate's prefill and decode plans (trace + plan build), as it does per call."""
    from flowgrad._generate import _Steps, sample_logits
    steps = _Steps(model, model.kv_cache(batch, max_len), lambda logits: sample_logits(logits, 0))
    with fg.no_grad():
        prefill = fg.ForwardPlan(steps.prefill, (fg.zeros(batch, prompt_len, dtype=fg.int64),
                                                 fg.full((batch,), prompt_len, dtype=fg.int64)))
        decode = fg.ForwardPlan(steps.decode, (fg.zeros(batch, dtype=fg.int64),))
    return {name: sum(plan.compile_seconds.values()) for name, plan in (("prefill", prefill), ("decode", decode))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()

    fg.set_num_threads(args.threads)
    fg.manual_seed(0)
    model = TinyGPT(args.vocab, args.dim, args.heads, args.layers, context=args.prompt + args.tokens).eval()
    with fg.no_grad():
        for p in model.parameters():  # larger than the initialisation: tokens vary, ties are unlikely
            p.mul_(2.0)
    torch_generate = torch_peer(model, args)
    rows = []
    for batch in args.batches:
        prompt = np.random.default_rng(batch).integers(0, args.vocab, size=(batch, args.prompt))
        peers = {"flowgrad plan": lambda: fg.generate(model, fg.tensor(prompt), args.tokens, temperature=0).numpy(),
                 "flowgrad eager": lambda: fg.generate(model, fg.tensor(prompt), args.tokens, temperature=0,
                                                       compiled=False).numpy()}
        if torch_generate is not None:
            peers["torch eager kv"] = lambda: torch_generate(prompt)
        tokens = {name: fn() for name, fn in peers.items()}
        same = {name: int((t == tokens["flowgrad plan"]).sum()) for name, t in tokens.items()}
        times = interleaved(peers, rounds=args.rounds, min_time=0.0)
        row = {"batch": batch, "load": load_average(), "greedy_tokens_equal_to_plan": same,
               "tokens_total": batch * args.tokens,
               "compile_seconds": compile_seconds(model, batch, args.prompt, args.prompt + args.tokens)}
        for name, t in times.items():
            row[name] = {"tokens_per_s": batch * args.tokens / t["median"], "seconds": t["median"],
                         "samples": t["samples"]}
        rows.append(row)
        line = "  ".join(f"{name} {row[name]['tokens_per_s']:.0f} tok/s" for name in peers)
        ratio = ""
        if torch_generate is not None:
            ratio = f"  plan/torch {row['flowgrad plan']['tokens_per_s'] / row['torch eager kv']['tokens_per_s']:.2f}x"
        print(f"batch {batch}: {line}{ratio}  greedy tokens equal to the plan's: {same} of {batch * args.tokens}  "
              f"compile s: {row['compile_seconds']}")
    if args.save:
        payload = {"machine": machine(), "command": "python " + " ".join(["benchmarks/bench_generate.py"] + sys.argv[1:]),
                   "config": vars(args), "results": rows}
        print("saved", save("bench_generate", payload))


if __name__ == "__main__":
    main()
