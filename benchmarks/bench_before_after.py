"""Two builds of flowgrad, one benchmark script, one run: is the change faster, slower or the same?

    python benchmarks/bench_before_after.py --before DIR [--rounds 3] [--save] bench_ops.py [bench_compile.py ...]

DIR holds an older installed `flowgrad` package (a copy of site-packages/flowgrad from before the
change, with what its _core links beside it); "after" is the flowgrad this Python imports. Each
round runs every script once per build, alternating which build goes first, each in a fresh
process writing its usual --save JSON into a scratch copy of benchmarks/. Prints, per script, the
median of every timing (keys ending in _ms, _us, _s or _us_per_op) and rate (_gflops, _gbs) the scripts
report, before and after, and the speedup (above 1: the change is faster), with the load average.
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

from common import machine, save

HERE = pathlib.Path(__file__).resolve().parent
TIMINGS = ("_ms", "_us", "_s", "_us_per_op")  # lower is better
RATES = ("_gflops", "_gbs")    # higher is better


def timings(node, path=""):
    """{path: number} for every timing or rate leaf of a results JSON (rows keyed by their labels)."""
    out = {}
    if isinstance(node, dict):
        label = ",".join(f"{k}={v}" for k, v in node.items() if isinstance(v, (str, int)) and k in ("case", "batch", "optimizer", "n", "op", "shape", "size", "name", "layers"))
        for k, v in node.items():
            key = f"{path}[{label}].{k}" if label else f"{path}.{k}"
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k.endswith(TIMINGS + RATES):
                out[key] = float(v)
            elif isinstance(v, (dict, list)) and k != "machine":
                out.update(timings(v, key))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.update(timings(v, f"{path}[{i}]"))
    return out


def run_once(script, build_dir, args):
    """Runs `script --save` from a scratch copy of benchmarks/; returns its results JSON."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = pathlib.Path(scratch) / "benchmarks"
        shutil.copytree(HERE, copy, ignore=shutil.ignore_patterns("results", "__pycache__"))
        env = dict(os.environ)
        if build_dir:
            env["PYTHONPATH"] = str(build_dir) + os.pathsep + env.get("PYTHONPATH", "")
        subprocess.run([sys.executable, script, "--save", *args], cwd=copy, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        saved = sorted((copy / "results").glob("*.json"))
        if len(saved) != 1:
            raise SystemExit(f"{script} wrote {len(saved)} result files, expected one")
        return json.loads(saved[0].read_text())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scripts", nargs="+")
    parser.add_argument("--before", required=True, type=pathlib.Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--args", default="", help="extra arguments for every script, e.g. '--only transformer'")
    parser.add_argument("--save", action="store_true")
    opts = parser.parse_args()
    if not (opts.before / "flowgrad" / "__init__.py").exists():
        raise SystemExit(f"--before {opts.before}: no flowgrad package there")
    loads = [os.getloadavg()[0]]
    samples = {s: {"before": {}, "after": {}} for s in opts.scripts}
    for r in range(opts.rounds):
        for script in opts.scripts:
            order = [("before", opts.before), ("after", None)]
            for label, build in (order if r % 2 == 0 else order[::-1]):
                for key, value in timings(run_once(script, build, opts.args.split())).items():
                    samples[script][label].setdefault(key, []).append(value)
                loads.append(os.getloadavg()[0])
    report = {"machine": machine(), "load_average": loads, "rounds": opts.rounds, "before": str(opts.before.name),
              "command": "python benchmarks/bench_before_after.py " + " ".join(  # no machine paths
                  opts.before.name if a == str(opts.before) else a for a in sys.argv[1:]), "scripts": {}}
    print(f"load average during the run: {min(loads):.2f}-{max(loads):.2f}")
    for script, by in samples.items():
        rows = []
        print(f"\n{script}: median of {opts.rounds} rounds; speedup > 1: the change is faster")
        for key in sorted(set(by["before"]) & set(by["after"])):
            before, after = statistics.median(by["before"][key]), statistics.median(by["after"][key])
            rate = key.endswith(RATES)
            speedup = (after / before if rate else before / after) if min(before, after) > 0 else float("nan")
            rows.append({"metric": key, "before": before, "after": after, "speedup": speedup})
            print(f"  {speedup:6.2f}x  {before:12.4g} -> {after:<12.4g} {key}")
        report["scripts"][script] = rows
    if opts.save:
        save("bench_before_after", report)


if __name__ == "__main__":
    main()
