"""GPU benchmarks against the PyTorch installed on the same machine, one run.

    python benchmarks/bench_cuda.py [--save] [--quick] [--cases gemm,chain,mlp,transformer_ops,adamw,capture,chain_graph,while]

Measures what the CUDA backend runs today (issue 5 targets in brackets):
  - GEMM float32 (and TF32) at 1024..8192: TFLOP/s vs torch.matmul          [>= 0.95x]
  - a chain of 100 small elementwise ops, eager: us/op vs PyTorch eager     [<= 1.0x the time]
  - MLP 784-512-512-10 training step (mse loss, AdamW), batch 64 and 512    [>= 1.0x]
  - fused AdamW over 124M float32 parameters: GB/s as a fraction of the
    GPU's peak memory bandwidth                                             [>= 0.8]
Whole-step CUDA graph capture (issue 11 targets in brackets):
  - capture: MLP 784-512-512-10 step (mse, AdamW), batch 64 and 512: our captured step vs our
    eager step vs PyTorch eager vs PyTorch's own CUDA graph of the step (torch.cuda.graph)
                                                     [b64 <= 120 us on an H100, >= 1.5x torch's
                                                      graph, >= 4x PyTorch eager]
  - chain_graph: a replayed chain of 100 small elementwise ops              [<= 1 us per node]
  - while: a FlowBuilder graph with a while_ loop (data-dependent halt), iterations/s eager, and
    captured once compiled plans hold branch instructions (the reason is printed until then)
  - fwd+bwd of embedding, cross_entropy and the column sum at the GPT-shaped step's sizes
    (issue 12): time vs PyTorch                          [<= 1.5x, <= 1.2x, <= 1.2x the time]
The GPT-2-small-shaped bf16 run waits for the attention, layer-norm, cross-entropy and
autocast kernels. Without a GPU (or without PyTorch built with CUDA) the script says why and
exits with status 2.
"""
import argparse
import sys
import time

import numpy as np

import flowgrad as fg
from flowgrad import nn

from common import machine, save

# Peak memory bandwidth (GB/s) of the GPUs this project is measured on.
PEAK_GBPS = {"H100": 3350.0, "H200": 4800.0, "A100": 2039.0}


def cuda_time(fn, sync, repeat=20, warmup=3):
    """Best seconds per call over `repeat` synchronised calls."""
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def per_call(fn, sync, calls=50, repeat=5, warmup=3):
    """Best seconds per call over `repeat` rounds of `calls` queued calls and one sync: small
    steps are measured by their throughput, not by a sync after each."""
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def gemm(torch, sizes, tf32):
    rows = []
    fg.cuda.set_allow_tf32(tf32)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    for n in sizes:
        a_np = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
        a, b = fg.tensor(a_np, device="cuda"), fg.tensor(a_np.T.copy(), device="cuda")
        ta, tb = torch.tensor(a_np, device="cuda"), torch.tensor(a_np.T.copy(), device="cuda")
        t_fg = cuda_time(lambda: a @ b, fg.cuda.synchronize)
        t_torch = cuda_time(lambda: ta @ tb, torch.cuda.synchronize)
        flops = 2.0 * n ** 3
        rows.append({"n": n, "tf32": tf32, "flowgrad_tflops": flops / t_fg / 1e12,
                     "torch_tflops": flops / t_torch / 1e12, "ratio": t_torch / t_fg})
    fg.cuda.set_allow_tf32(False)
    torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def launch_chain(torch, ops=100):
    x, tx = fg.ones(1024, device="cuda"), torch.ones(1024, device="cuda")

    def chain(v):
        for _ in range(ops // 2):
            v = v * 1.0001
            v = v + 0.5
        return v
    t_fg = cuda_time(lambda: chain(x), fg.cuda.synchronize)
    t_torch = cuda_time(lambda: chain(tx), torch.cuda.synchronize)
    return {"ops": ops, "flowgrad_us_per_op": t_fg / ops * 1e6, "torch_us_per_op": t_torch / ops * 1e6,
            "time_ratio": t_fg / t_torch}


def mlp(torch, batch):
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((batch, 784)).astype(np.float32)
    y_np = rng.standard_normal((batch, 10)).astype(np.float32)
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to("cuda")
    opt = fg.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = fg.tensor(x_np, device="cuda"), fg.tensor(y_np, device="cuda")

    def step():
        opt.zero_grad()
        fg.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    tmodel = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                 torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    topt = torch.optim.AdamW(tmodel.parameters(), lr=1e-3)
    tx, ty = torch.tensor(x_np, device="cuda"), torch.tensor(y_np, device="cuda")

    def tstep():
        topt.zero_grad()
        torch.nn.functional.mse_loss(tmodel(tx), ty).backward()
        topt.step()
    t_fg = cuda_time(step, fg.cuda.synchronize)
    t_torch = cuda_time(tstep, torch.cuda.synchronize)
    return {"batch": batch, "flowgrad_samples_per_s": batch / t_fg, "torch_samples_per_s": batch / t_torch,
            "ratio": t_torch / t_fg}


def transformer_ops(torch):
    """fwd+bwd of the GPT-shaped step's embedding (8192x768 table, batch 8 x T 256 tokens),
    cross_entropy over (2048, 8192) logits and the bias-gradient column sum (sum over dim 0 of
    (2048, 3072)): our time / PyTorch's [targets: embedding <= 1.5x, the others <= 1.2x]."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 8192, size=(8, 256))
    table = rng.standard_normal((8192, 768)).astype(np.float32)
    logits = rng.standard_normal((2048, 8192)).astype(np.float32)
    target = rng.integers(0, 8192, size=2048)
    wide = rng.standard_normal((2048, 3072)).astype(np.float32)

    def fg_case(build):
        def run():
            build().backward()
        return run

    def fg_leaf(a):
        return fg.tensor(a, device="cuda", requires_grad=True)

    def torch_leaf(a):
        return torch.tensor(a, device="cuda", requires_grad=True)
    w, tw = fg_leaf(table), torch_leaf(table)
    x, tx = fg_leaf(logits), torch_leaf(logits)
    c, tc = fg_leaf(wide), torch_leaf(wide)
    idx, tidx = fg.tensor(tokens, device="cuda"), torch.tensor(tokens, device="cuda")
    tgt, ttgt = fg.tensor(target, device="cuda"), torch.tensor(target, device="cuda")
    cases = {
        "embedding": (lambda: fg.nn.functional.embedding(idx, w).sum(),
                      lambda: torch.nn.functional.embedding(tidx, tw).sum()),
        "cross_entropy": (lambda: fg.nn.functional.cross_entropy(x, tgt),
                          lambda: torch.nn.functional.cross_entropy(tx, ttgt)),
        "column_sum": (lambda: (c.sum(0) * c.sum(0)).sum(), lambda: (tc.sum(0) * tc.sum(0)).sum()),
    }
    rows = []
    for name, (ours, theirs) in cases.items():
        t_fg = cuda_time(fg_case(ours), fg.cuda.synchronize)
        t_torch = cuda_time(fg_case(theirs), torch.cuda.synchronize)
        rows.append({"op": name, "flowgrad_ms": t_fg * 1e3, "torch_ms": t_torch * 1e3, "time_ratio": t_fg / t_torch})
    return rows


def adamw_bandwidth(gpu_name, params=124_000_000, tensors=148):
    sizes = [params // tensors] * tensors
    ps = [fg.nn.Parameter(fg.zeros(n, device="cuda")) for n in sizes]
    for p in ps:
        p.grad = fg.ones(p.shape[0], device="cuda")
    opt = fg.optim.AdamW(ps, lr=1e-3)
    t = cuda_time(opt.step, fg.cuda.synchronize, repeat=10)
    moved = sum(sizes) * 4 * 7  # read p, g, m, v; write p, m, v
    peak = next((v for k, v in PEAK_GBPS.items() if k in gpu_name), None)
    gbps = moved / t / 1e9
    return {"parameters": sum(sizes), "seconds": t, "gb_per_s": gbps, "peak_gb_per_s": peak,
            "fraction_of_peak": gbps / peak if peak else None}


def mlp_capture(torch, batch):
    """One AdamW step of MLP 784-512-512-10 (mse loss) four ways; microseconds per step."""
    import os
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((batch, 784)).astype(np.float32)
    y_np = rng.standard_normal((batch, 10)).astype(np.float32)
    x, y = fg.tensor(x_np, device="cuda"), fg.tensor(y_np, device="cuda")

    def ours():
        fg.manual_seed(0)
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10)).to("cuda")
        return model, fg.optim.AdamW(model.parameters(), lr=1e-3)

    model, opt = ours()

    def eager():
        opt.zero_grad()
        fg.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    m2, o2 = ours()
    captured = fg.compile(m2, fg.nn.functional.mse_loss, o2, example_inputs=(x, y))
    os.environ["FLOWGRAD_NO_CUDA_GRAPH"] = "1"  # read when the plan is built
    try:
        m3, o3 = ours()
        plain = fg.compile(m3, fg.nn.functional.mse_loss, o3, example_inputs=(x, y))
    finally:
        del os.environ["FLOWGRAD_NO_CUDA_GRAPH"]
    t_eager = per_call(eager, fg.cuda.synchronize)
    t_captured = per_call(lambda: captured(x, y), fg.cuda.synchronize)
    t_plain = per_call(lambda: plain(x, y), fg.cuda.synchronize)

    tmodel = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                 torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    topt = torch.optim.AdamW(tmodel.parameters(), lr=1e-3, capturable=True)
    tx, ty = torch.tensor(x_np, device="cuda"), torch.tensor(y_np, device="cuda")

    def tstep():
        topt.zero_grad(set_to_none=False)
        torch.nn.functional.mse_loss(tmodel(tx), ty).backward()
        topt.step()
    t_torch = per_call(tstep, torch.cuda.synchronize)
    side = torch.cuda.Stream()  # PyTorch's whole-network capture recipe: warm up on a side stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            tstep()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tstep()
    t_torch_graph = per_call(graph.replay, torch.cuda.synchronize)
    return {"batch": batch, "captured_us": t_captured * 1e6, "compiled_uncaptured_us": t_plain * 1e6,
            "eager_us": t_eager * 1e6, "torch_eager_us": t_torch * 1e6, "torch_graph_us": t_torch_graph * 1e6,
            "vs_torch_graph": t_torch_graph / t_captured, "vs_torch_eager": t_torch / t_captured,
            "cuda_graph": captured.stats["cuda_graph"]}


class _Chain(nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.ops = ops

    def forward(self, v):
        for _ in range(self.ops // 2):
            v = v * 1.0001
            v = v + 0.5
        return v


def chain_graph(torch, ops=100):
    """A forward plan of `ops` small elementwise ops, replayed as one graph: microseconds per node."""
    from flowgrad.compile import ForwardPlan
    x = fg.ones(1024, device="cuda")
    plan = ForwardPlan(_Chain(ops), (x,))
    t_fg = per_call(lambda: plan(x), fg.cuda.synchronize)
    tx = torch.ones(1024, device="cuda")
    graph = torch.cuda.CUDAGraph()
    chain = _Chain(ops).forward
    with torch.cuda.graph(graph):
        chain(tx)
    t_torch = per_call(graph.replay, torch.cuda.synchronize)
    return {"ops": ops, "flowgrad_us_per_node": t_fg / ops * 1e6, "torch_graph_us_per_node": t_torch / ops * 1e6,
            "cuda_graph": plan.stats["cuda_graph"]}


class _Halt(nn.Module):
    def forward(self, x):
        return x.abs().mean() - 4.0


def while_loop(iterations=20):
    """A FlowBuilder while_ loop whose halt depends on the data: loop iterations per second."""
    fg.manual_seed(0)
    body = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256))
    g = fg.flow(nn.Identity()).loop(body).while_(_Halt(), iterations).tag("loop").build().to("cuda")
    x = fg.randn(64, 256, device="cuda")
    with fg.no_grad():
        g(x)
        ran = len(g.traces("loop"))
        t_eager = per_call(lambda: g(x), fg.cuda.synchronize, calls=10)
    row = {"iterations_per_call": ran, "eager_iterations_per_s": max(ran, 1) / t_eager}
    try:
        from flowgrad.compile import ForwardPlan
        plan = ForwardPlan(g, (x,))
        t_captured = per_call(lambda: plan(x), fg.cuda.synchronize, calls=10)
        row.update(captured_iterations_per_s=max(ran, 1) / t_captured, cuda_graph=plan.stats["cuda_graph"])
    except fg.FlowgradError as e:  # compiled plans do not hold branch instructions yet
        row["captured"] = f"not available: {e}"
    return row


CASES = ("gemm", "chain", "mlp", "transformer_ops", "adamw", "capture", "chain_graph", "while")


def parse_cases(text):
    cases = [c for c in text.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--quick", action="store_true", help="smaller GEMM sizes")
    parser.add_argument("--cases", type=parse_cases, default=list(CASES),
                        help="comma-separated subset of " + ",".join(CASES) + " (default: all)")
    args = parser.parse_args()
    if not fg.cuda.is_available():
        print(f"bench_cuda: no usable GPU ({fg.cuda.unavailable_reason()})")
        return 2
    try:
        import torch
    except ImportError:
        print("bench_cuda: PyTorch is not installed; it is the peer every number is compared with")
        return 2
    if not torch.cuda.is_available():
        print("bench_cuda: this PyTorch cannot use the GPU")
        return 2
    gpu = torch.cuda.get_device_name(0)
    result = {"machine": machine(), "gpu": gpu, "torch_cuda": torch.version.cuda,
              "command": "python benchmarks/bench_cuda.py --save"}
    sizes = [1024, 2048] if args.quick else [1024, 2048, 4096, 8192]
    if "gemm" in args.cases:
        result["gemm"] = gemm(torch, sizes, False) + gemm(torch, sizes, True)
        for r in result["gemm"]:
            print(f"GEMM n={r['n']}{' tf32' if r['tf32'] else ''}: {r['flowgrad_tflops']:.1f} vs torch "
                  f"{r['torch_tflops']:.1f} TFLOP/s -> {r['ratio']:.2f}x")
    if "chain" in args.cases:
        result["launch_chain"] = c = launch_chain(torch)
        print(f"100-op chain: {c['flowgrad_us_per_op']:.2f} vs torch {c['torch_us_per_op']:.2f} us/op "
              f"-> {c['time_ratio']:.2f}x the time")
    if "mlp" in args.cases:
        result["mlp"] = [mlp(torch, b) for b in (64, 512)]
        for r in result["mlp"]:
            print(f"MLP b{r['batch']}: {r['flowgrad_samples_per_s']:.0f} vs torch {r['torch_samples_per_s']:.0f} "
                  f"samples/s -> {r['ratio']:.2f}x")
    if "adamw" in args.cases:
        result["adamw"] = a = adamw_bandwidth(gpu)
        print(f"AdamW 124M: {a['gb_per_s']:.0f} GB/s" + (f" = {a['fraction_of_peak']:.2f} of peak" if a["peak_gb_per_s"] else ""))
    if "capture" in args.cases:
        result["mlp_capture"] = [mlp_capture(torch, b) for b in (64, 512)]
        for r in result["mlp_capture"]:
            print(f"MLP step b{r['batch']} (us): captured {r['captured_us']:.0f}, compiled uncaptured "
                  f"{r['compiled_uncaptured_us']:.0f}, our eager {r['eager_us']:.0f}, torch eager "
                  f"{r['torch_eager_us']:.0f}, torch graph {r['torch_graph_us']:.0f} -> {r['vs_torch_graph']:.2f}x "
                  f"torch's graph, {r['vs_torch_eager']:.2f}x torch eager [{r['cuda_graph']}]")
    if "chain_graph" in args.cases:
        result["chain_graph"] = c = chain_graph(torch)
        print(f"100-node replayed chain: {c['flowgrad_us_per_node']:.2f} vs torch graph "
              f"{c['torch_graph_us_per_node']:.2f} us/node [{c['cuda_graph']}]")
    if "while" in args.cases:
        result["while_loop"] = w = while_loop()
        print(f"while_ loop: {w['iterations_per_call']} iterations/call, eager {w['eager_iterations_per_s']:.0f} it/s; "
              + (f"captured {w['captured_iterations_per_s']:.0f} it/s" if "captured_iterations_per_s" in w
                 else w["captured"]))
    if "transformer_ops" in args.cases:
        result["transformer_ops"] = transformer_ops(torch)
        for r in result["transformer_ops"]:
            print(f"{r['op']} fwd+bwd: {r['flowgrad_ms']:.3f} vs torch {r['torch_ms']:.3f} ms -> {r['time_ratio']:.2f}x the time")
    if args.save:
        print("saved", save("bench_cuda", result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
