"""The CUDA review's first-run checks (reviews/cuda-2026-11-28.md section 4), one JSON line each.

    python scripts/gpu_probes.py [OUT.json]

Each probe runs alone and records what it saw (a value, a time, an error); a probe that fails does
not stop the others. Timed probes compare with PyTorch on the same GPU when it is installed:
medians of synchronised calls after a warm-up. Needs a GPU (exit 2 without one)."""
import json
import statistics
import subprocess
import sys
import textwrap
import time
import traceback

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

G2_SNIPPET = textwrap.dedent("""
    import gc, flowgrad as fg
    x = fg.ones(1 << 20, device="cuda"); s = fg.cuda.Stream()
    with fg.cuda.stream(s): y = x * 2
    x.record_stream(s); del s; gc.collect(); del x
    fg.cuda.synchronize(); print("survived", float(y.sum().item()))
""")


def median_ms(fn, sync, repeat=15, warmup=3):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def torch_or_none():
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def g2_record_stream_then_destroy():
    out = subprocess.run([sys.executable, "-c", G2_SNIPPET], capture_output=True, text=True, timeout=60)
    return {"rc": out.returncode, "stdout": out.stdout.strip()[-300:], "stderr": out.stderr.strip()[-600:]}


def timed_pair(ours, theirs):
    """{'flowgrad_ms', 'torch_ms', 'time_ratio'} for two zero-argument callables."""
    result = {"flowgrad_ms": median_ms(ours, fg.cuda.synchronize)}
    torch = torch_or_none()
    if torch is not None and theirs is not None:
        result["torch_ms"] = median_ms(theirs(torch), torch.cuda.synchronize)
        result["time_ratio"] = result["flowgrad_ms"] / result["torch_ms"]
    return result


def sum_1e8():
    x = fg.ones(100_000_000, device="cuda")
    value = x.sum().item()

    def theirs(torch):
        t = torch.ones(100_000_000, device="cuda")
        return lambda: t.sum()
    return {"value": value, "expected": 1e8, **timed_pair(lambda: x.sum(), theirs)}


def layer_norm_backward():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16384, 1024)).astype(np.float32)
    x = fg.tensor(a, device="cuda", requires_grad=True)
    w = fg.ones(1024, device="cuda", requires_grad=True)
    b = fg.zeros(1024, device="cuda", requires_grad=True)
    g = fg.tensor(rng.standard_normal((16384, 1024)).astype(np.float32), device="cuda")

    def ours():
        y = F.layer_norm(x, (1024,), w, b)
        fg.autograd.grad([y], [x, w, b], [g])

    def theirs(torch):
        tx = torch.tensor(a, device="cuda", requires_grad=True)
        tw = torch.ones(1024, device="cuda", requires_grad=True)
        tb = torch.zeros(1024, device="cuda", requires_grad=True)
        tg = torch.tensor(g.cpu().numpy(), device="cuda")

        def run():
            y = torch.nn.functional.layer_norm(tx, (1024,), tw, tb)
            torch.autograd.grad([y], [tx, tw, tb], [tg])
        return run
    return timed_pair(ours, theirs)


def cumsum_rows():
    x = fg.ones((4096, 4096), device="cuda")

    def theirs(torch):
        t = torch.ones((4096, 4096), device="cuda")
        return lambda: t.cumsum(1)
    return {"last": x.cumsum(1)[0, -1].item(), **timed_pair(lambda: x.cumsum(1), theirs)}


def captured_mlp_step():
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to("cuda")
    opt = fg.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(1)
    x = fg.tensor(rng.standard_normal((64, 784)).astype(np.float32), device="cuda")
    y = fg.tensor(rng.integers(0, 10, 64), device="cuda")
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(x, y))
    losses = [step(x, y).item() for _ in range(4)]
    syncs = fg.cuda.sync_count()
    us = median_ms(lambda: step(x, y), fg.cuda.synchronize, repeat=50) * 1e3
    stats = {k: v for k, v in step.stats.items() if isinstance(v, (int, float, str))}
    return {"losses": losses, "step_us_synced": us, "syncs_during_timing": fg.cuda.sync_count() - syncs, "stats": stats}


def same_seed_same_bits():
    out = {}
    for dtype in (fg.float32, fg.float64):
        fg.manual_seed(7)
        a = fg.randn((1000, 1001), dtype=dtype).numpy()
        fg.manual_seed(7)
        b = fg.randn((1000, 1001), dtype=dtype, device="cuda").cpu().numpy()
        out[str(dtype)] = {"equal": bool(np.array_equal(a, b)), "differing": int((a != b).sum())}
    return out


PROBES = [g2_record_stream_then_destroy, sum_1e8, layer_norm_backward, cumsum_rows, captured_mlp_step,
          same_seed_same_bits]


def main():
    if not fg.cuda.is_available():
        print(f"gpu_probes: no usable GPU ({fg.cuda.unavailable_reason()})")
        return 2
    results = {"build_config": fg.build_config()}
    for probe in PROBES:
        start = time.perf_counter()
        try:
            results[probe.__name__] = {"ok": True, **probe()}
        except Exception:
            results[probe.__name__] = {"ok": False, "error": traceback.format_exc()[-1500:]}
        results[probe.__name__]["seconds"] = round(time.perf_counter() - start, 2)
        print(probe.__name__, json.dumps(results[probe.__name__], default=str), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0 if all(r["ok"] for r in results.values() if isinstance(r, dict) and "ok" in r) else 1


if __name__ == "__main__":
    sys.exit(main())
