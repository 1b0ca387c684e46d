"""Which BLAS should the build link? fg.matmul's float32 GEMM speed with each flowgrad build given,
each in its own process with the same thread count, next to NumPy's bundled OpenBLAS.

    python benchmarks/bench_blas_choice.py --build system=build/cpu/_core.cpython-311-x86_64-linux-gnu.so \\
        --build scipy-openblas32=build/cpu-scipy/_core.cpython-311-x86_64-linux-gnu.so \\
        [--coretype Haswell] [--threads 2] [--rounds 4] [--save]

--build LABEL=PATH: a built flowgrad._core to load with this checkout's python/flowgrad.
--coretype NAME: also runs every build with OPENBLAS_CORETYPE=NAME (OpenBLAS's core override).
Shapes (M, K, N): 512x512x512 and 64x784x512 (an MLP layer at batch 64). GFLOP/s = 2MKN / best time;
the load average is saved too: on a busy machine every number drops, the multi-threaded ones most.
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile

SHAPES = [(512, 512, 512), (64, 784, 512)]
REPEAT = 25  # short rounds, best one kept: a shared machine's load spoils fewer of them
HERE = pathlib.Path(__file__).resolve().parent
PACKAGE = HERE.parent / "python" / "flowgrad"


def child(kind):
    """Runs in a fresh process: prints one JSON line with GFLOP/s per shape."""
    import numpy as np
    sys.path.insert(0, str(HERE))
    from common import best_time
    rng = np.random.default_rng(0)
    threads = int(os.environ["FLOWGRAD_NUM_THREADS"])
    out = {"shapes": {}}
    if kind == "numpy":
        out["config"] = {"numpy": np.__version__, "blas": np.show_config(mode="dicts")["Build Dependencies"]["blas"]}
    else:
        import flowgrad as fg
        fg.set_num_threads(threads)
        out["config"] = fg.build_config()
    for m, k, n in SHAPES:
        a = rng.normal(size=(m, k)).astype(np.float32)
        b = rng.normal(size=(k, n)).astype(np.float32)
        gemm = lambda: a @ b  # noqa: E731
        if kind != "numpy":
            ta, tb = fg.tensor(a), fg.tensor(b)
            np.testing.assert_allclose(fg.matmul(ta, tb).numpy(), a @ b, rtol=1e-3, atol=1e-3)
            gemm = lambda: fg.matmul(ta, tb)  # noqa: E731
        seconds = best_time(gemm, repeat=REPEAT, min_time=0.5)
        out["shapes"][f"{m}x{k}x{n}"] = 2 * m * k * n / seconds / 1e9
    print(json.dumps(out))


def overlay(core, root):
    """A copy of python/flowgrad (by symlinks) whose _core is `core`."""
    package = pathlib.Path(root) / "flowgrad"
    package.mkdir(parents=True)
    for entry in PACKAGE.iterdir():
        if not (entry.name.startswith("_core.") and entry.name.endswith(".so")):
            (package / entry.name).symlink_to(entry)
    (package / pathlib.Path(core).name).symlink_to(pathlib.Path(core).resolve())
    return root


def measure(label, kind, threads, pythonpath=None, coretype=None):
    # FLOWGRAD_SGEMM=blas: the linked BLAS, not flowgrad's own AVX-512 kernel, multiplies float32.
    env = dict(os.environ, FLOWGRAD_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), FLOWGRAD_SGEMM="blas")
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run([sys.executable, __file__, "--child", kind], env=env, capture_output=True, text=True,
                          check=True)
    result = json.loads(done.stdout)
    result["label"] = label + (f" OPENBLAS_CORETYPE={coretype}" if coretype else "")
    print(result["label"], {k: round(v, 1) for k, v in result["shapes"].items()}, flush=True)
    return result


def cpu_description():
    info = {}
    for line in open("/proc/cpuinfo"):
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "cpu family", "model") and key not in info:
            info[key] = value.strip()
        if key == "flags":
            flags = value.split()
            info["simd"] = [f for f in flags if f.startswith(("avx", "amx", "fma"))]
            break
    return info


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="append", default=[], metavar="LABEL=PATH")
    parser.add_argument("--coretype")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=4, help="measure every configuration this many times")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    runs = []  # interleaved: each round measures every configuration once
    with tempfile.TemporaryDirectory() as tmp:
        paths = [(label, overlay(core, os.path.join(tmp, str(i))))
                 for i, (label, _, core) in enumerate(spec.partition("=") for spec in args.build)]
        for _ in range(args.rounds):
            runs.append(measure("numpy", "numpy", args.threads))
            for label, path in paths:
                runs.append(measure(label, "flowgrad", args.threads, path))
                if args.coretype:
                    runs.append(measure(label, "flowgrad", args.threads, path, args.coretype))
    results = {}
    for run in runs:
        entry = results.setdefault(run["label"], {"config": run["config"], "best": {}, "rounds": []})
        entry["rounds"].append(run["shapes"])
        for shape, gflops in run["shapes"].items():
            entry["best"][shape] = max(entry["best"].get(shape, 0.0), gflops)
    for label, entry in results.items():
        print("best", label, {k: round(v, 1) for k, v in entry["best"].items()})
    payload = {"machine": {**cpu_description(), "cores": os.cpu_count()}, "threads": args.threads,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "command": "python benchmarks/bench_blas_choice.py " + " ".join(sys.argv[1:]),
               "load_average": os.getloadavg(),
               "unit": f"GFLOP/s, float32 GEMM (M x K x N), best of {REPEAT} rounds", "results": results}
    if args.save:
        path = HERE / "results" / f"blas-choice-{datetime.date.today().isoformat()}.json"
        path.write_text(json.dumps(payload, indent=1) + "\n")
        print("saved", path)


if __name__ == "__main__":
    main()
