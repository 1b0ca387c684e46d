"""The GPU machine's check in one command (./dev.sh gpu-check [--wheel PATH] [OUTDIR] [--dry-run]).

Installs the CUDA wheel built beforehand on a CPU machine (./dev.sh gpu-wheel; without --wheel it
builds one there with every core, ../shared/GPU.md's recipe: g++-13 when present, no network), runs
the CUDA review's first-run probes (scripts/gpu_probes.py), every test file with cuda cases in a
process of its own (the crash-prone ones first, so a segfault hides nothing else) beside
compute-sanitizer memcheck, racecheck and synccheck over the kernels that never ran, and then a
short benchmarks/bench_cuda.py. The run is planned in phases whose budgets add up to at most 8
minutes; every step has a timeout clipped to its phase. OUTDIR gets summary.json (GPU, driver,
CUDA, commit and pass/fail/seconds per step) and logs.tar.gz (one log per step, the probes' and the
benchmark's JSON): two files, as a GPU machine's output folder wants. --files reruns only the given
test files. Without a GPU it says so and exits 2; --dry-run prints the plan and needs no GPU (CI
runs it)."""
import argparse
import concurrent.futures
import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUDGET_S = 480  # the whole check on the GPU machine: 8 minutes (issue 39)

# The CUDA review's order (reviews/cuda-2026-11-28.md, section 4): the files whose CUDA paths can
# crash the process (device error records) or silently corrupt training (capture, attention) start
# first; every file runs in a process of its own.
CRASH_PRONE = ["tests/ops/test_cross_entropy.py", "tests/ops/test_index_add.py", "tests/plan/test_cuda_graph.py",
               "tests/ops/test_attention_fused.py", "tests/plan/test_plan_exec.py", "tests/cuda/test_streams.py"]
# Kernels that never ran on a GPU, by the test file that drives them (review section 1).
MEMCHECK = ["tests/ops/test_index_add.py", "tests/ops/test_cross_entropy.py", "tests/ops/test_attention_fused.py",
            "tests/ops/test_optim_multi.py"]
SHARED_MEMORY = ["tests/ops/test_attention_fused.py", "tests/ops/test_reduce.py"]
PYTEST = ["-X", "faulthandler", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark"]
# Phase budgets (s): their sum is the whole run's.
PHASES = {"setup": 60, "probes": 60, "tests": 240, "bench": 60}
assert sum(PHASES.values()) <= BUDGET_S


def cuda_test_files():
    """Test files with cuda cases (they take the `device` fixture or name cuda), crash-prone first."""
    found = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("tests/**/test_*.py")
                   if re.search(r"\bdevice\b|cuda", p.read_text()))
    return CRASH_PRONE + [f for f in found if f not in CRASH_PRONE]


def build_env(cores):
    env = dict(os.environ, PYTHONUNBUFFERED="1", CMAKE_BUILD_PARALLEL_LEVEL=str(cores))
    if os.path.exists("/usr/bin/g++-13"):  # the image's default g++ mixes GCC 13 headers with another libstdc++
        env.update(CXX="/usr/bin/g++-13", CUDAHOSTCXX="/usr/bin/g++-13")
    return env


def plan(outdir, python, cores, wheel=None, files=None):
    """The steps in order: dicts with name, phase, argv, timeout (s), env additions and, for test
    files, `file`. Steps of the tests phase run concurrently, each in a process of its own."""
    wheel_dir = str(outdir / "wheel")
    if wheel:
        steps = [{"name": "install", "phase": "setup", "timeout": 60,
                  "argv": [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--force-reinstall",
                           *(str(w) for w in sorted(pathlib.Path(wheel).glob("flowgrad-*.whl")) or [wheel])]}]
    else:
        steps = [
            {"name": "build", "phase": "setup", "timeout": 300,
             "argv": [python, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", wheel_dir, ".",
                      "-C", "cmake.define.FLOWGRAD_CUDA=ON", "-C", "cmake.define.FLOWGRAD_NATIVE=OFF",
                      "-C", "cmake.define.CMAKE_CUDA_ARCHITECTURES=90"]},
            {"name": "install", "phase": "setup", "timeout": 60,
             "argv": [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--force-reinstall",
                      "--find-links", wheel_dir, "flowgrad"]},
        ]
    steps.append({"name": "probes", "phase": "probes", "timeout": PHASES["probes"],
                  "argv": [python, "scripts/gpu_probes.py", str(outdir / "probes.json")]})
    for path in files or cuda_test_files():
        steps.append({"name": f"test {path}", "phase": "tests", "timeout": 180, "file": path,
                      "argv": [python, *PYTEST, "-k", "cuda", "--timeout", "120", path]})
    if not files:
        sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
        sanitize = {"FLOWGRAD_CUDA_NO_CACHING": "1"}  # every allocation visible to the sanitizer
        for tool, checked in (("memcheck", MEMCHECK), ("racecheck", SHARED_MEMORY), ("synccheck", SHARED_MEMORY)):
            steps.append({"name": f"compute-sanitizer {tool}", "phase": "tests", "timeout": 240, "env": sanitize,
                          "files": checked, "argv": [sanitizer, "--tool", tool, "--error-exitcode", "86", python,
                                                     *PYTEST, "-x", "-k", "cuda", *checked]})
        steps.append({"name": "bench_cuda", "phase": "bench", "timeout": PHASES["bench"],
                      "argv": [python, "benchmarks/bench_cuda.py", "--quick", "--save",
                               "--cases", "mlp,adamw,capture,transformer_ops"]})
    return steps


def describe(step):
    env = " ".join(f"{k}={v}" for k, v in step.get("env", {}).items())
    return f"{step['name']} (timeout {step['timeout']} s, phase {step['phase']}): " \
           f"{(env + ' ') if env else ''}{' '.join(step['argv'])}"


def gpu_info():
    """(name, driver) of the first GPU from nvidia-smi, or None with the reason when there is none."""
    if shutil.which("nvidia-smi") is None:
        return None, "nvidia-smi not found: no NVIDIA driver on this machine"
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60)
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not lines:
        return None, f"nvidia-smi lists no GPU (exit {out.returncode}): {out.stderr.strip() or out.stdout.strip()}"
    name, driver = (s.strip() for s in lines[0].split(",", 1))
    return {"name": name, "driver": driver, "count": len(lines)}, ""


def cuda_version():
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        return "no nvcc"
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"release ([\d.]+)", out)
    return match.group(1) if match else out.strip()


def run_step(step, outdir, env, deadline):
    log = outdir / "logs" / (re.sub(r"[^A-Za-z0-9_.-]+", "_", step["name"]) + ".log")
    left = deadline - time.monotonic()
    record = {"name": step["name"], "command": " ".join(step["argv"]), "log": log.name}
    if left < 10:
        return {**record, "status": "not run: phase budget spent", "duration_s": 0}
    start = time.monotonic()
    with open(log, "w") as out:
        try:
            rc = subprocess.run(step["argv"], cwd=ROOT, env={**env, **step.get("env", {})}, stdout=out,
                                stderr=subprocess.STDOUT, timeout=min(step["timeout"], left)).returncode
            status = {0: "pass", 5: "no cuda tests"}.get(rc, f"fail (exit {rc})")
        except subprocess.TimeoutExpired:
            rc, status = None, f"timeout after {min(step['timeout'], left):.0f} s"
        except FileNotFoundError as e:
            rc, status = None, f"fail ({e.strerror}: {e.filename})"
    result = {**record, "status": status, "rc": rc, "duration_s": round(time.monotonic() - start, 1)}
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
    print(f"gpu-check: {result['status']:<24} {result['duration_s']:7.1f} s  {step['name']}  {tail[0][:100] if tail else ''}",
          flush=True)
    return result


def run(steps, outdir, cores):
    env = build_env(cores)
    shutil.rmtree(outdir / "wheel", ignore_errors=True)  # the install step takes the one wheel built now
    results = []
    for phase, budget in PHASES.items():
        deadline = time.monotonic() + budget
        todo = [s for s in steps if s["phase"] == phase]
        if phase == "tests":  # each file in a process of its own, the GPU shared by several; the
            # sanitizers (the longest steps) start first, then the crash-prone files
            todo.sort(key=lambda s: not s["name"].startswith("compute-sanitizer"))
            with concurrent.futures.ThreadPoolExecutor(max(1, min(12, cores - 2))) as pool:
                results += list(pool.map(lambda s: run_step(s, outdir, env, deadline), todo))
            continue
        for step in todo:
            results.append(run_step(step, outdir, env, deadline))
            if phase == "setup" and results[-1]["status"] != "pass":
                return results  # nothing else is worth running without the build and install
    return results


def pack(outdir):
    """outdir/logs.tar.gz: every step's log, the probes' JSON and the benchmark's saved JSON."""
    with tarfile.open(outdir / "logs.tar.gz", "w:gz") as tar:
        tar.add(outdir / "logs", arcname="logs")
        for extra in [outdir / "probes.json", *(ROOT / "benchmarks" / "results").glob("bench_cuda-*.json")]:
            if extra.exists():
                tar.add(extra, arcname=extra.name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?", default="build/gpu-check", help="summary.json and logs.tar.gz (default %(default)s)")
    parser.add_argument("--wheel", help="a CUDA wheel (or a folder holding one) from ./dev.sh gpu-wheel, installed instead of building")
    parser.add_argument("--files", nargs="+", help="rerun only these test files (no sanitizers, no benchmark)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; needs no GPU")
    args = parser.parse_args(argv)
    outdir = pathlib.Path(args.outdir).resolve()
    cores = os.cpu_count() or 1
    steps = plan(outdir, sys.executable, cores, args.wheel, args.files)
    if args.dry_run:
        print(f"gpu-check plan: {len(steps)} steps, budget {BUDGET_S} s in phases "
              f"{', '.join(f'{k} {v} s' for k, v in PHASES.items())}; {cores} cores, output in {outdir}")
        for i, step in enumerate(steps, 1):
            print(f"{i:3d}. {describe(step)}")
        return 0
    gpu, why = gpu_info()
    if gpu is None:
        print(f"gpu-check: no GPU: {why}; nothing run (--dry-run lists the plan)", file=sys.stderr)
        return 2
    (outdir / "logs").mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    results = run(steps, outdir, cores)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    summary = {"gpu": gpu["name"], "gpus": gpu["count"], "driver": gpu["driver"], "cuda": cuda_version(),
               "commit": commit, "cores": cores, "started": started.isoformat(timespec="seconds"),
               "duration_s": round(time.monotonic() - t0, 1), "wheel": args.wheel, "steps": results,
               "failed": [r["name"] for r in results if r["status"] not in ("pass", "no cuda tests")]}
    (outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    pack(outdir)
    print(f"gpu-check: {len(results) - len(summary['failed'])} of {len(results)} steps passed in "
          f"{summary['duration_s']} s; {outdir / 'summary.json'}")
    return 1 if summary["failed"] or len(results) < len(steps) else 0


if __name__ == "__main__":
    sys.exit(main())
