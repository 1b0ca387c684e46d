"""The GPU machine's check in one command (./dev.sh gpu-check [OUTDIR] [--dry-run]).

Builds and installs the CUDA configuration with every core (../shared/GPU.md's recipe: g++-13 when
present, no network), runs the cuda tests one file per process (the crash-prone ones from the CUDA
review first, so a segfault hides nothing else), compute-sanitizer memcheck, racecheck and synccheck
over the kernels that never ran on a GPU, and benchmarks/bench_cuda.py --save. Every step has a
timeout and the whole run a deadline (10 minutes on a 16-core H100); OUTDIR gets one log per step
and summary.json (GPU, driver, CUDA, and pass/fail/duration per step). Without a GPU it says so and
exits 2; --dry-run prints the plan and needs no GPU (CI runs it)."""
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
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEADLINE_S = 570  # the whole run, build included: under 10 minutes with start-up to spare

# The CUDA review's order (reviews/cuda-2026-11-23.md, "What to run first"): the files whose CUDA
# paths can crash the process (F2: device error records) or silently corrupt training (F1: capture,
# F3: attention) run first, each alone; the other files with cuda cases follow.
CRASH_PRONE = ["tests/ops/test_cross_entropy.py", "tests/ops/test_index_add.py", "tests/plan/test_cuda_graph.py",
               "tests/ops/test_attention_fused.py", "tests/plan/test_plan_exec.py", "tests/cuda/test_streams.py"]
# Kernels that never ran on a GPU, by the test file that drives them (review section 1).
MEMCHECK = ["tests/ops/test_index_add.py", "tests/ops/test_cross_entropy.py", "tests/ops/test_index.py",
            "tests/ops/test_attention_fused.py", "tests/ops/test_optim_multi.py", "tests/amp/test_half_matmul.py"]
SHARED_MEMORY = ["tests/ops/test_attention_fused.py", "tests/ops/test_cross_entropy.py", "tests/ops/test_reduce.py"]
PYTEST = ["-X", "faulthandler", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark"]


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


def plan(outdir, python, cores):
    """The steps in order: dicts with name, argv, timeout (s), env additions and, for test files,
    `parallel` (run concurrently once the crash-prone ones have run one by one)."""
    wheel_dir = str(outdir / "wheel")
    steps = [
        {"name": "build", "timeout": 240, "argv": [python, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                                                   "-w", wheel_dir, ".", "-C", "cmake.define.FLOWGRAD_CUDA=ON",
                                                   "-C", "cmake.define.FLOWGRAD_NATIVE=OFF"]},
        {"name": "install", "timeout": 60, "argv": [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                                    "--force-reinstall", "--find-links", wheel_dir, "flowgrad"]},
    ]
    for path in cuda_test_files():
        steps.append({"name": f"test {path}", "timeout": 150, "argv": [python, *PYTEST, "-k", "cuda", path],
                      "parallel": path not in CRASH_PRONE, "file": path})
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    sanitize = {"FLOWGRAD_CUDA_NO_CACHING": "1"}  # every allocation visible to the sanitizer
    for tool, files in (("memcheck", MEMCHECK), ("racecheck", SHARED_MEMORY), ("synccheck", SHARED_MEMORY)):
        steps.append({"name": f"compute-sanitizer {tool}", "timeout": 75, "env": sanitize, "files": files,
                      "argv": [sanitizer, "--tool", tool, "--error-exitcode", "86", python, *PYTEST,
                               "-x", "-k", "cuda", *files]})
    steps.append({"name": "bench_cuda", "timeout": 90, "argv": [python, "benchmarks/bench_cuda.py", "--save"]})
    return steps


def describe(step):
    env = " ".join(f"{k}={v}" for k, v in step.get("env", {}).items())
    return f"{step['name']} (timeout {step['timeout']} s{', parallel' if step.get('parallel') else ''}): " \
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
    log = outdir / (re.sub(r"[^A-Za-z0-9_.-]+", "_", step["name"]) + ".log")
    left = deadline - time.monotonic()
    record = {"name": step["name"], "command": " ".join(step["argv"]), "log": log.name}
    if left < 10:
        return {**record, "status": "not run: deadline reached", "duration_s": 0}
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
    print(f"gpu-check: {result['status']:<24} {result['duration_s']:7.1f} s  {step['name']}", flush=True)
    return result


def run(steps, outdir, cores):
    deadline = time.monotonic() + DEADLINE_S
    env = build_env(cores)
    shutil.rmtree(outdir / "wheel", ignore_errors=True)  # the install step takes the one wheel built now
    results = []
    for step in steps[:2]:  # build and install: nothing else is worth running if they fail
        results.append(run_step(step, outdir, env, deadline))
        if results[-1]["status"] != "pass":
            return results
    tests = [s for s in steps if s["name"].startswith("test ")]
    for step in (s for s in tests if not s["parallel"]):  # crash-prone files one at a time, first
        results.append(run_step(step, outdir, env, deadline))
    with concurrent.futures.ThreadPoolExecutor(max(1, min(8, cores // 2))) as pool:
        futures = [pool.submit(run_step, s, outdir, env, deadline) for s in tests if s["parallel"]]
        results += [f.result() for f in futures]
    for step in steps[2 + len(tests):]:  # the sanitizers and the benchmark want the GPU to themselves
        results.append(run_step(step, outdir, env, deadline))
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?", default="build/gpu-check", help="logs and summary.json (default %(default)s)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; needs no GPU")
    args = parser.parse_args(argv)
    outdir = pathlib.Path(args.outdir).resolve()
    cores = os.cpu_count() or 1
    steps = plan(outdir, sys.executable, cores)
    if args.dry_run:
        print(f"gpu-check plan: {len(steps)} steps, deadline {DEADLINE_S} s, {cores} cores, logs in {outdir}")
        for i, step in enumerate(steps, 1):
            print(f"{i:3d}. {describe(step)}")
        return 0
    gpu, why = gpu_info()
    if gpu is None:
        print(f"gpu-check: no GPU: {why}; nothing run (--dry-run lists the plan)", file=sys.stderr)
        return 2
    outdir.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    results = run(steps, outdir, cores)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    summary = {"gpu": gpu["name"], "gpus": gpu["count"], "driver": gpu["driver"], "cuda": cuda_version(),
               "commit": commit, "cores": cores, "started": started.isoformat(timespec="seconds"),
               "duration_s": round(time.monotonic() - t0, 1), "steps": results,
               "failed": [r["name"] for r in results if r["status"] not in ("pass", "no cuda tests")]}
    (outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"gpu-check: {len(results) - len(summary['failed'])} of {len(results)} steps passed in "
          f"{summary['duration_s']} s; {outdir / 'summary.json'}")
    return 1 if summary["failed"] or len(results) < len(steps) else 0


if __name__ == "__main__":
    sys.exit(main())
