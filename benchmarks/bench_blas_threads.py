"""Who runs OpenBLAS's threaded GEMMs: flowgrad's pool (FLOWGRAD_BLAS_THREADS=pool) or OpenBLAS's own
threads (=openblas), A/B in alternating child processes, one per mode and round (issue 23).

    python benchmarks/bench_blas_threads.py [--rounds 5] [--threads 2] [--save]

Each child times, at --threads (medians of 5 calibrated batches):
  - compiled and eager training steps and their GEMMs alone (bench_compile.py's cases: MLP
    784-512-512-10 at batch 64 and 512, the char transformer at batch 16; SGD);
  - elementwise ops right after a GEMM: a 1024x128x512 GEMM, then gelu on (1024, 512) or add on
    (1024, 128), only the elementwise op timed (OpenBLAS's threads spin after its calls and took
    a core from the pool's workers there);
  - the GEMMs of these models alone at 1 thread, to show what threading them gains.
The parent alternates the modes every round and reports per-mode medians over rounds, the ratio
openblas/pool (above 1: the pool is faster) and the load average.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
MODES = ("pool", "openblas")


def median_time(fn, batches=5, min_time=0.05):
    from common import calibrate
    calls = calibrate(fn, min_time)
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def after_gemm(op, x, a, b, repeat=400):
    """Median seconds of op(x) issued right after a GEMM a @ b (the GEMM not timed)."""
    import flowgrad as fg
    samples = []
    for _ in range(repeat):
        fg.matmul(a, b)
        start = time.perf_counter()
        op(x)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def child(threads):
    import flowgrad as fg
    from bench_compile import flowgrad_steps, plan_gemms
    fg.set_num_threads(threads)
    out = {"blas_threads": fg.build_config()["blas_threads"]}
    gemm_sets = {}
    for case, batch in (("mlp", 64), ("mlp", 512), ("transformer", 16)):
        eager, compiled, step = flowgrad_steps(case, batch, "sgd", "cpu")
        gemms, _ = plan_gemms(step, "cpu")
        gemm_sets[f"{case}_b{batch}"] = gemms
        out[f"{case}_b{batch}_compiled_ms"] = median_time(compiled) * 1e3
        out[f"{case}_b{batch}_eager_ms"] = median_time(eager) * 1e3
        out[f"{case}_b{batch}_gemms_ms"] = median_time(gemms) * 1e3
    a, b = fg.randn(1024, 128), fg.randn(128, 512)
    out["gelu_1024x512_after_gemm_us"] = after_gemm(fg.gelu, fg.randn(1024, 512), a, b) * 1e6
    out["add_1024x128_after_gemm_us"] = after_gemm(lambda x: x + x, fg.randn(1024, 128), a, b) * 1e6
    out["gelu_1024x512_alone_us"] = median_time(lambda x=fg.randn(1024, 512): fg.gelu(x)) * 1e6
    fg.set_num_threads(1)
    for name, gemms in gemm_sets.items():
        out[f"{name}_gemms_1thread_ms"] = median_time(gemms) * 1e3
    print(json.dumps(out))


def run_child(mode, threads):
    env = dict(os.environ, FLOWGRAD_BLAS_THREADS=mode)
    done = subprocess.run([sys.executable, __file__, "--child", "--threads", str(threads)], capture_output=True,
                          text=True, env=env, cwd=HERE, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    if args.child:
        return child(args.threads)
    from common import load_average, machine, save
    runs = {mode: [] for mode in MODES}
    loads = [load_average()]
    for r in range(args.rounds):
        for mode in (MODES if r % 2 == 0 else MODES[::-1]):  # alternate which mode goes first
            runs[mode].append(run_child(mode, args.threads))
            assert runs[mode][-1]["blas_threads"] == mode, runs[mode][-1]
        loads.append(load_average())
    rows = []
    for key in runs["pool"][0]:
        if key == "blas_threads":
            continue
        pool, own = (statistics.median(run[key] for run in runs[m]) for m in MODES)
        rows.append({"measure": key, "pool": pool, "openblas": own, "openblas_over_pool": own / pool})
        print(f"{key:38s} pool {pool:9.3f}  openblas {own:9.3f}  openblas/pool {own / pool:5.2f}x", flush=True)
    print(f"load average {loads}; medians of {args.rounds} rounds, {args.threads} threads")
    if args.save:
        payload = {"machine": machine(), "threads": args.threads, "rounds": args.rounds, "load_average": loads,
                   "command": "python " + " ".join(sys.argv), "rows": rows, "runs": runs}
        print(f"saved {save('bench_blas_threads', payload)}")


if __name__ == "__main__":
    sys.exit(main())
