"""./dev.sh gpu-check's plan (scripts/gpu_check.py): what it would run on a GPU machine, checked here
without one, and its refusal to run without a GPU."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"
# The CUDA review's first steps (reviews/cuda-2026-11-23.md): the files whose cuda cases can crash
# the process or corrupt training silently.
CRASH_PRONE = ["tests/ops/test_cross_entropy.py", "tests/ops/test_index_add.py", "tests/plan/test_cuda_graph.py",
               "tests/ops/test_attention_fused.py"]


def dry_run(tmp_path, *args):
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "out"), "--dry-run", *args],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    steps = [re.match(r"\s*\d+\. (.+?) \(timeout (\d+) s[^)]*\): (.*)", line).groups() for line in lines]
    return header, [(name, int(timeout), command) for name, timeout, command in steps]


def test_plan_fits_eight_minutes_in_phases(tmp_path):
    header, _ = dry_run(tmp_path, "--wheel", str(tmp_path))
    budget = int(re.search(r"budget (\d+) s", header).group(1))
    phases = [int(s) for s in re.findall(r"\w+ (\d+) s", header.split("in phases", 1)[1].split(";")[0])]
    assert budget <= 480 and phases and sum(phases) <= budget


def test_with_a_wheel_it_installs_instead_of_building(tmp_path):
    wheel = tmp_path / "flowgrad-0.1.0-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(b"")
    _, steps = dry_run(tmp_path, "--wheel", str(tmp_path))
    names = [name for name, _, _ in steps]
    assert names[:2] == ["install", "probes"] and "build" not in names
    assert str(wheel) in steps[0][2] and "--no-index" in steps[0][2]


def test_files_reruns_only_those(tmp_path):
    _, steps = dry_run(tmp_path, "--wheel", str(tmp_path), "--files", "tests/ops/test_reduce.py")
    assert [name for name, _, _ in steps] == ["install", "probes", "test tests/ops/test_reduce.py"]


def test_plan_builds_then_tests_crash_prone_files_first(tmp_path):
    header, steps = dry_run(tmp_path)
    assert f"{len(steps)} steps" in header and "budget" in header
    names = [name for name, _, _ in steps]
    assert names[:2] == ["build", "install"]
    assert "FLOWGRAD_CUDA=ON" in steps[0][2] and "--no-build-isolation" in steps[0][2]
    tests = [name.removeprefix("test ") for name in names if name.startswith("test ")]
    assert tests[:len(CRASH_PRONE)] == CRASH_PRONE
    assert names[2] == "probes"
    assert names[3:3 + len(tests)] == [f"test {t}" for t in tests]  # tests right after the probes
    assert len(set(tests)) == len(tests)
    for path in tests:
        assert (ROOT / path).is_file(), path
    # every test file with cuda cases is in the plan
    for path in ("tests/cuda/test_runtime.py", "tests/ops/test_elementwise.py", "tests/ops/test_index.py"):
        assert path in tests
    assert names[-4:] == ["compute-sanitizer memcheck", "compute-sanitizer racecheck", "compute-sanitizer synccheck",
                          "bench_cuda"]
    assert "bench_cuda.py --quick --save" in steps[-1][2]


def test_plan_sanitizes_existing_test_files_and_times_out_every_step(tmp_path):
    _, steps = dry_run(tmp_path)
    for name, timeout, command in steps:
        assert 0 < timeout <= 300, name
        if name.startswith("compute-sanitizer"):
            files = [f for f in command.split() if f.startswith("tests/")]
            assert files and all((ROOT / f).is_file() for f in files), command
            assert "FLOWGRAD_CUDA_NO_CACHING=1" in command


def test_without_a_gpu_it_says_so_and_fails(tmp_path):
    # An empty PATH hides nvidia-smi even on a GPU machine.
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True,
                            env={"PATH": str(tmp_path)}, timeout=120)
    assert result.returncode == 2
    assert "no GPU: nvidia-smi not found" in result.stderr
    assert not (tmp_path / "out").exists()
