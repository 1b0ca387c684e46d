"""Who runs OpenBLAS's threaded GEMMs: flowgrad's pool (FLOWGRAD_BLAS_THREADS=pool) or OpenBLAS's own
threads (=openblas), A/B in alternating child processes, one per mode and round (issue 23).

    python benchmarks/bench_blas_threads.py [--rounds 5] [--threads 2] [--save]

Each child times, at --threads, over 7 calibrated batches: the median and best wall time per call
and the median CPU time of the whole process per call (every thread, spinning included), of
  - compiled and eager training steps and their GEMMs alone (bench_compile.py's cases: MLP
    784-512-512-10 at batch 64 and 512, the char transformer at batch 16; SGD);
  - a 1024x128x512 GEMM alone and followed by gelu on (1024, 512) or add on (1024, 128)
    (OpenBLAS's threads spin after its calls and took a core from the pool's workers there);
  - the small GEMMs of these models one by one;
and the GEMMs again at 1 thread: what threading them gains, or costs.
The parent alternates the modes every round and reports per-mode medians over rounds, the ratio
openblas/pool (above 1: the pool is faster or burns less CPU) and the load average.
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


def timed(fn, batches=7, min_time=0.05):
    """(median wall seconds, best wall seconds, median CPU seconds of the whole process) per call of
    fn over calibrated batches. On a loaded machine the best batch is the least disturbed one and
    CPU time counts the cores a call kept busy, spinning included, whoever else runs."""
    from common import calibrate
    calls = calibrate(fn, min_time)
    wall, cpu = [], []
    for _ in range(batches):
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            fn()
        wall.append((time.perf_counter() - start) / calls)
        cpu.append((time.process_time() - start_cpu) / calls)
    return statistics.median(wall), min(wall), statistics.median(cpu)


def record(out, name, fn, scale, unit):
    wall, best, cpu = timed(fn)
    out[f"{name}_{unit}"], out[f"{name}_best_{unit}"], out[f"{name}_cpu_{unit}"] = wall * scale, best * scale, cpu * scale


def after_gemm(op, x, a, b):
    """op(x) issued right after a GEMM a @ b: the pair minus the GEMM alone is what op costs there."""
    import flowgrad as fg
    return lambda: (fg.matmul(a, b), op(x))


# The small products of the char transformer (B*T = 1024 rows, d = 128, MLP 512; attention
# T = 64, head dim 32, 16 x 4 heads) and of the MLP at batch 64.
SMALL_GEMMS = {"1024x128x128": ((1024, 128), (128, 128)), "1024x128x512": ((1024, 128), (128, 512)),
               "1024x512x128": ((1024, 512), (512, 128)), "64x784x512": ((64, 784), (784, 512)),
               "batched64_64x32x64": ((64, 64, 32), (64, 32, 64))}


def child(threads):
    import flowgrad as fg
    from bench_compile import flowgrad_steps, plan_gemms
    fg.set_num_threads(threads)
    out = {"blas_threads": fg.build_config()["blas_threads"]}
    gemm_sets = {}
    for case, batch in (("mlp", 64), ("mlp", 512), ("transformer", 16)):
        eager, compiled, step = flowgrad_steps(case, batch, "sgd", "cpu")
        gemms, _ = plan_gemms(step, "cpu")
        name = f"{case}_b{batch}"
        gemm_sets[name] = gemms
        record(out, f"{name}_compiled", compiled, 1e3, "ms")
        record(out, f"{name}_eager", eager, 1e3, "ms")
        record(out, f"{name}_gemms", gemms, 1e3, "ms")
    a, b = fg.randn(1024, 128), fg.randn(128, 512)
    record(out, "gemm_1024x128x512", lambda: fg.matmul(a, b), 1e6, "us")
    record(out, "gemm_then_gelu_1024x512", after_gemm(fg.gelu, fg.randn(1024, 512), a, b), 1e6, "us")
    record(out, "gemm_then_add_1024x128", after_gemm(lambda x: x + x, fg.randn(1024, 128), a, b), 1e6, "us")
    record(out, "gelu_1024x512", lambda x=fg.randn(1024, 512): fg.gelu(x), 1e6, "us")
    small = {name: (fg.randn(*sa), fg.randn(*sb)) for name, (sa, sb) in SMALL_GEMMS.items()}
    for name, (x, y) in small.items():
        record(out, f"gemm_{name}", lambda x=x, y=y: fg.matmul(x, y), 1e6, "us")
    fg.set_num_threads(1)
    for name, gemms in gemm_sets.items():
        record(out, f"{name}_gemms_1thread", gemms, 1e3, "ms")
    for name, (x, y) in small.items():
        record(out, f"gemm_{name}_1thread", lambda x=x, y=y: fg.matmul(x, y), 1e6, "us")
    print(json.dumps(out))


def run_child(mode, threads):
    env = dict(os.environ, FLOWGRAD_BLAS_THREADS=mode, FLOWGRAD_SGEMM="blas")  # float32 on OpenBLAS too
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
        print(f"{key:44s} pool {pool:9.3f}  openblas {own:9.3f}  openblas/pool {own / pool:5.2f}x", flush=True)
    print(f"load average {loads}; medians of {args.rounds} rounds, {args.threads} threads")
    if args.save:
        payload = {"machine": machine(), "threads": args.threads, "rounds": args.rounds, "load_average": loads,
                   "command": "python " + " ".join(sys.argv), "rows": rows, "runs": runs}
        print(f"saved {save('bench_blas_threads', payload)}")


if __name__ == "__main__":
    sys.exit(main())
