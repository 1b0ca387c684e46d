"""scaled_dot_product_attention forward+backward: the fused flash_attention op against the
composite (matmul + softmax, scaled_dot_product_attention_reference), PyTorch's
scaled_dot_product_attention ("torch") and PyTorch's eager softmax(q k^T / sqrt(E)) v ("torch_composite"),
same threads, in interleaved rounds (the median of the rounds is reported, with the load average;
0.3 s pauses between implementations, so that OpenBLAS's spinning workers do not slow the next one).

    python benchmarks/bench_attention.py [--save] [--device cpu|cuda] [--cpu-time] [--rounds N]
                                         [--cases N] [--tag NAME]
    FLOWGRAD_ISA=avx2 python benchmarks/bench_attention.py --sweep [--save] [--cpu-time]

Wall clock: benchmarks/common.py's interleaved() (alternating rounds, a pause before each).
--cpu-time: one thread on each side, timed by the process's CPU time instead of the wall clock,
for a machine shared with other jobs (wall-clock timings there mostly measure the neighbours).
--cases N: only the first N cases; --tag: appended to the saved file's name.
--sweep: causal forward+backward of (16, 4, T, 32) at T from 16 to 512, block boundaries among
them (64/65, 127/128/129), fused against PyTorch's SDPA; exits 1 when the time of two neighbouring
T differs by more than 2x (neighbours at most 1.25x apart, so at most ~1.6x the work): a cliff.
--long goes on to T = 2048 with batch 16 * (512 / T)^2 (the step then compares time per batch
element). It
runs at the instruction-set level in force (printed; FLOWGRAD_ISA forces a lower one) and saves
bench_attention-sweep-<level>-<date>.json. A forced level holds flowgrad's OpenBLAS and, through
common.PEER_LEVELS, PyTorch's kernels, MKL and oneDNN to it too (sweeps before 2026-12-06 left MKL
at AVX-512; those before 2026-12-07 left it at AVX2 at generic on AMD CPUs, where only
MKL_CBWR=COMPATIBLE holds it to SSE2).

The first four cases are the char transformer's attention in bench_compile.py (B=16, 4 heads of
32) at T = 64..512; T <= 128 runs the CPU's single-tile kernels, beyond that the flash loop.
"fused_packed" is F.scaled_dot_product_attention_packed on one (B, T, 3 * H * E) projection, the op
MultiheadAttention runs (q, k, v read in place, their gradient written into one buffer);
"fused_qkv_views" feeds F.scaled_dot_product_attention head views of such a projection (chunk,
reshape, transpose), whose gradient autograd assembles from the three slices.
"""
import argparse
import os
import time

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from common import SWITCH_GAP, interleaved, machine, save, torch_peer

CASES = [  # (batch, heads, L, S, head dim, causal)
    (16, 4, 64, 64, 32, True), (16, 4, 128, 128, 32, True), (16, 4, 256, 256, 32, True),
    (16, 4, 512, 512, 32, True), (16, 4, 64, 64, 64, False), (8, 4, 128, 128, 128, True),
    (2, 2, 1024, 1024, 64, True), (16, 4, 96, 96, 32, True), (16, 8, 64, 64, 16, True),
]


def cpu_time(fn, repeat=5, calls=3):
    """Best process CPU seconds per call (all threads of this process, none of the neighbours')."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls)
    return best


def fwd_bwd(attend, q, k, v, causal):
    def step():
        out = attend(q, k, v, is_causal=causal)
        out.backward(fg.ones_like(out))
    return step


def torch_fwd_bwd(tq, tk, tv, causal):
    import torch

    def step():
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        out.backward(torch.ones_like(out))
    return step


def torch_composite_fwd_bwd(tq, tk, tv, causal):
    """PyTorch eager softmax(q k^T / sqrt(E) + causal mask) v."""
    import torch

    L, S = tq.shape[-2], tk.shape[-2]
    cut = torch.ones(L, S, dtype=torch.bool, device=tq.device).triu(1) if causal else None

    def step():
        s = tq @ tk.transpose(-1, -2) / tq.shape[-1] ** 0.5
        if cut is not None:
            s = s.masked_fill(cut, float("-inf"))
        out = torch.softmax(s, -1) @ tv
        out.backward(torch.ones_like(out))
    return step


def packed_fwd_bwd(b, h, L, e, causal, device, rng):
    """F.scaled_dot_product_attention_packed on one (b, L, 3 * h * e) projection: the op
    MultiheadAttention's self-attention runs (on the CPU q, k, v read in place, one gradient buffer)."""
    qkv = fg.tensor(rng.standard_normal((b, L, 3 * h * e)).astype(np.float32)).to(device)
    qkv.requires_grad = True

    def step():
        out = F.scaled_dot_product_attention_packed(qkv, h, is_causal=causal)
        out.backward(fg.ones_like(out))
    return step


def qkv_views_fwd_bwd(b, h, L, e, causal, device, rng):
    """The fused op on head views of one packed projection, as MultiheadAttention calls it."""
    qkv = fg.tensor(rng.standard_normal((b, L, 3 * h * e)).astype(np.float32)).to(device)
    qkv.requires_grad = True

    def step():
        q, k, v = (p.reshape(b, L, h, e).transpose(1, 2) for p in qkv.chunk(3, -1))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out.backward(fg.ones_like(out))
    return step


SWEEP_T = [16, 20, 24, 30, 32, 40, 48, 56, 63, 64, 65, 80, 96, 112, 127, 128, 129, 160, 192, 224, 256, 320, 384, 448,
           512]
LONG_T = [640, 800, 1024, 1280, 1600, 2048]  # --long (at most 1.28x apart): batch 16 * (512 / T)^2, at least 1
MAX_STEP = 2.0  # the largest ratio allowed between neighbouring T's times


def sweep(args, torch):
    """Fused (and PyTorch SDPA) causal forward+backward over SWEEP_T; returns the exit status."""
    isa = fg.build_config()["isa"]
    timer = "process CPU time, 1 thread" if args.cpu_time else "wall clock"
    # The peers' own dispatch at the level in force (common.PEER_LEVELS).
    peers = {"blas_core": fg.build_config()["blas_core"],
             "torch_capability": torch.backends.cpu.get_cpu_capability() if torch is not None else None,
             "mkl_instructions": os.environ.get("MKL_ENABLE_INSTRUCTIONS"), "mkl_cbwr": os.environ.get("MKL_CBWR"),
             "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA")}
    print(f"instruction-set level {isa} (FLOWGRAD_ISA), {fg.get_num_threads()} threads, {timer}, "
          f"OpenBLAS core {peers['blas_core']}, PyTorch CPU capability {peers['torch_capability']}, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    rng = np.random.default_rng(0)
    rows = []
    for T in SWEEP_T + (LONG_T if args.long else []):
        batch = max(1, 16 * 512 * 512 // (T * T)) if T > 512 else 16
        arrays = [rng.standard_normal((batch, 4, T, 32)).astype(np.float32) for _ in range(3)]
        q, k, v = (fg.tensor(a, requires_grad=True) for a in arrays)
        steps = {"fused": fwd_bwd(F.scaled_dot_product_attention, q, k, v, True)}
        if torch is not None:
            steps["torch"] = torch_fwd_bwd(*(torch.tensor(a, requires_grad=True) for a in arrays), True)
        if args.cpu_time:  # interleaved rounds of each side's best CPU time (one thread each)
            times = {name: [] for name in steps}
            for _ in range(args.rounds):
                for name, step in steps.items():
                    times[name].append(1e3 * cpu_time(step))
            medians = {name: float(np.median(t)) for name, t in times.items()}
        else:
            medians = {name: 1e3 * r["median"] for name, r in interleaved(steps, args.rounds).items()}
        row = {"T": T, "batch": batch, "load_average": os.getloadavg()[0],
               **{f"{name}_ms": t for name, t in medians.items()}}
        if rows:
            now, before = row["fused_ms"] / batch, rows[-1]["fused_ms"] / rows[-1]["batch"]
            row["step"] = max(now / before, before / now)
        rows.append(row)
        ratio = f", torch/fused {row['torch_ms'] / row['fused_ms']:.2f}x" if "torch_ms" in row else ""
        step = f", step {row['step']:.2f}x" if "step" in row else ""
        print(f"T={T} B={batch}: fused {row['fused_ms']:.3f} ms{ratio}{step} (load {row['load_average']:.1f})", flush=True)
    cliffs = [(a["T"], b["T"], b["step"]) for a, b in zip(rows, rows[1:]) if b["step"] > MAX_STEP]
    print("cliffs (T, next T, step): " + (", ".join(f"{a}->{b} {s:.2f}x" for a, b, s in cliffs) or "none"))
    if args.save:
        print("saved", save(f"bench_attention-sweep-{isa}" + (f"-{args.tag}" if args.tag else ""), {
            "machine": machine(), "isa": isa, "command": f"FLOWGRAD_ISA={isa} python benchmarks/bench_attention.py --sweep --save"
            + (" --cpu-time" if args.cpu_time else "") + (" --long" if args.long else ""),
            "shape": "(B, 4, T, 32) causal, forward+backward; B = 16, beyond T = 512 16 * (512 / T)^2",
            "rounds": args.rounds, "timer": timer, "statistic": "median of interleaved rounds", **peers,
            "load_average_end": os.getloadavg(),
            "max_step": MAX_STEP, "cliffs": cliffs, "sweep": rows}))
    return 1 if cliffs else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cpu-time", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=1 << 30, help="skip cases with longer sequences")
    parser.add_argument("--cases", type=int, default=len(CASES), help="run only the first N cases")
    parser.add_argument("--tag", default="", help="appended to the saved file's name")
    parser.add_argument("--sweep", action="store_true", help="T from 16 to 512; exit 1 on a step of more than 2x")
    parser.add_argument("--long", action="store_true", help="--sweep on to T = 2048 (smaller batches beyond 512)")
    args = parser.parse_args()
    if args.cpu_time:
        fg.set_num_threads(1)
    torch = torch_peer()
    if args.sweep:
        raise SystemExit(sweep(args, torch))
    rng = np.random.default_rng(0)
    rows = []
    for b, h, L, S, e, causal in CASES[:args.cases]:
        if max(L, S) > args.max_len:
            continue
        arrays = [rng.standard_normal((b, h, n, e)).astype(np.float32) for n in (L, S, S)]
        q, k, v = (fg.tensor(a).to(args.device) for a in arrays)
        for t in (q, k, v):
            t.requires_grad = True
        steps = {"fused": fwd_bwd(F.scaled_dot_product_attention, q, k, v, causal),
                 "composite": fwd_bwd(F.scaled_dot_product_attention_reference, q, k, v, causal)}
        if L == S:
            steps["fused_qkv_views"] = qkv_views_fwd_bwd(b, h, L, e, causal, args.device, rng)
            if hasattr(F, "scaled_dot_product_attention_packed"):  # absent from builds before 2026-11-24
                steps["fused_packed"] = packed_fwd_bwd(b, h, L, e, causal, args.device, rng)
        if torch is not None:
            dev = "cuda" if args.device == "cuda" else "cpu"
            tq, tk, tv = (torch.tensor(a, device=dev, requires_grad=True) for a in arrays)
            steps["torch"] = torch_fwd_bwd(tq, tk, tv, causal)
            steps["torch_composite"] = torch_composite_fwd_bwd(tq, tk, tv, causal)
        if args.cpu_time:
            times = {name: [] for name in steps}
            for _ in range(args.rounds):  # interleaved: each round times every implementation once
                for name, step in steps.items():
                    time.sleep(SWITCH_GAP)
                    times[name].append(1e3 * cpu_time(step))
            medians = {name: float(np.median(t)) for name, t in times.items()}
        else:  # wall clock: alternating rounds with pauses between libraries
            medians = {name: 1e3 * r["median"] for name, r in interleaved(steps, args.rounds).items()}
        row = {"shape": [b, h, L, S, e], "causal": causal, "load_average": os.getloadavg()}
        row.update({f"{name}_ms": t for name, t in medians.items()})
        rows.append(row)
        line = ", ".join(f"{name} {row[name + '_ms']:.3f} ms" for name in steps)
        ratio = row["torch_ms"] / row["fused_ms"] if "torch_ms" in row else float("nan")
        packed = row["torch_ms"] / row["fused_packed_ms"] if "torch_ms" in row and "fused_packed_ms" in row else float("nan")
        eager = row["torch_composite_ms"] / row["fused_ms"] if "torch_ms" in row else float("nan")
        print(f"B={b} H={h} L={L} S={S} E={e} causal={causal}: {line} (torch/fused {ratio:.2f}x, "
              f"torch/fused_packed {packed:.2f}x, torch_composite/fused {eager:.2f}x, "
              f"composite/fused {row['composite_ms'] / row['fused_ms']:.2f}x; load {row['load_average'][0]:.1f})",
              flush=True)
    if args.save:
        save("bench_attention" + (f"-{args.tag}" if args.tag else ""), {"machine": machine(), "device": args.device, "load_average": os.getloadavg(),
                                 "timer": "process CPU time, 1 thread" if args.cpu_time else "wall clock",
                                 "rounds": args.rounds, "statistic": "median of interleaved rounds",
                                 "tag": args.tag,
                                 "fwd_bwd": rows})


if __name__ == "__main__":
    main()
