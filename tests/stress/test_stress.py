"""Stress checks, each in its own interpreter so that a crash or a hang is a failure, not the end
of the run: a seeded fuzz of the public API, a training soak, and a differential fuzz of compiled
against eager training steps.

Quick by default (6 000 fuzz calls over 3 seeds, a 5 000-step soak and 120 compiled-vs-eager
cases, well under a minute each on 2 cores). FLOWGRAD_STRESS=long runs 150 000 fuzz calls over
30 seeds, a 50 000-step soak and 5 000 compiled-vs-eager cases.
"""
import json
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
LONG = os.environ.get("FLOWGRAD_STRESS", "") == "long"
FUZZ_SEEDS = range(30) if LONG else range(3)
FUZZ_CALLS = 5000 if LONG else 2000
SOAK_STEPS = 50000 if LONG else 5000
COMPILED_CASES = 5000 if LONG else 120


def run_script(name, *args, timeout):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), FLOWGRAD_NUM_THREADS="1")
    return subprocess.run([sys.executable, os.path.join(HERE, name), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_fuzzed_calls_raise_only_typed_errors_that_name_the_op(seed):
    with tempfile.NamedTemporaryFile("r") as record:
        try:
            done = run_script("fuzz_api.py", "--seed", seed, "--calls", FUZZ_CALLS, "--record", record.name,
                              timeout=600 if LONG else 120)
        except subprocess.TimeoutExpired:
            pytest.fail("hung at " + record.read().strip())
        last = record.read().strip()
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode in (0, 1), f"crashed (exit status {done.returncode}) at {last}\n{done.stderr[-2000:]}"
    problems = [line for line in lines if "problem" in line]
    assert not problems, "\n".join(json.dumps(p) for p in problems[:20])
    summary = lines[-1]["summary"]
    assert summary["ok"] > FUZZ_CALLS // 10 and summary["typed"] > FUZZ_CALLS // 10  # both paths exercised


def test_training_soak_does_not_grow_memory():
    done = run_script("soak_train.py", "--steps", SOAK_STEPS, timeout=1200 if LONG else 120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    warm, end = result["marks"]["200"], result["marks"][str(SOAK_STEPS)]
    assert end["allocated"] == warm["allocated"]  # the same tensors are alive at every step boundary
    assert end["rss"] - warm["rss"] < 16 << 20, result  # and the process does not grow either
    assert result["last_loss"] < result["first_loss"]  # it did train


def test_compiled_steps_train_as_the_eager_loop():
    done = run_script("fuzz_compiled.py", "--cases", COMPILED_CASES, "--batch", 20,
                      timeout=7200 if LONG else 300)
    summary = dict(item.split("=") for item in done.stdout.splitlines()[-1].split())
    assert summary["cases"] == str(COMPILED_CASES), done.stdout[-3000:]
    assert summary["mismatch"] == summary["crash"] == summary["refused"] == "0", done.stdout[-3000:]
    assert done.returncode == 0, done.stderr[-2000:]
