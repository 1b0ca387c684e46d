"""Helpers for multi-process tests: each test runs a small job script under mpirun in a
subprocess with a timeout, so a hang fails the test instead of stalling the suite."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import flowgrad as fg

HERE = pathlib.Path(__file__).parent
JOB_TIMEOUT_S = 120


def _skip_reason():
    if not fg._core.distributed.built_with_mpi():
        return "flowgrad was built without MPI (CMake found no mpi.h)"
    if shutil.which("mpirun") is None:
        return "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
    return None


needs_mpi = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def job_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(pathlib.Path(fg.__file__).parent.parent), env.get("PYTHONPATH", "")])
    env["FLOWGRAD_NUM_THREADS"] = "1"  # several ranks share this machine's cores
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_btl", "self,vader,tcp")
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")  # no ptrace rights in containers
    return env


def launch(script, nproc, *args, timeout=JOB_TIMEOUT_S, unset=()):
    """Runs tests/distributed/<script> on nproc ranks with the launcher (without the environment
    variables in `unset`); returns the result."""
    cmd = [sys.executable, "-m", "flowgrad.distributed.run", "--nproc", str(nproc), "--timeout", str(timeout),
           str(HERE / script), *map(str, args)]
    env = {k: v for k, v in job_env().items() if k not in unset}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout + 30)


def check(result):
    assert result.returncode == 0, f"job failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result.stdout
