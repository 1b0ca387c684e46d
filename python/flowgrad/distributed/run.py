"""python -m flowgrad.distributed.run --nproc N [--hostfile FILE] script.py [args...]

Starts N copies of script.py under mpirun (Open MPI), one rank each; with --hostfile the ranks
spread over the machines it lists (Open MPI's host file format: `host slots=K` per line). Every
rank also gets MASTER_ADDR / MASTER_PORT and a fresh secret FLOWGRAD_RENDEZVOUS_TOKEN for the
NCCL rendezvous. The job's exit status is mpirun's: a rank that fails (an uncaught exception, a
non-zero exit status, a signal) makes the job stop and names it; --timeout ends a job that runs
too long. Ending the launcher (Ctrl-C, SIGTERM, even SIGKILL) ends mpirun and every rank.
"""
import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _first_host(hostfile):
    with open(hostfile) as f:
        for line in f:
            words = line.split("#")[0].split()
            if words:
                return words[0]
    raise SystemExit(f"flowgrad.distributed.run: host file {hostfile} lists no host")


def command(args, mpirun):
    """The mpirun command line and the environment for one launch."""
    env = dict(os.environ)
    env.setdefault("MASTER_ADDR", _first_host(args.hostfile) if args.hostfile else "127.0.0.1")
    env.setdefault("MASTER_PORT", str(_free_port()))
    env.setdefault("FLOWGRAD_RENDEZVOUS_TOKEN", secrets.token_hex(16))  # in the environment, not on a command line
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers often run as root
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")  # see fg.distributed.init: never spin on a shared core
    cmd = [mpirun, "-n", str(args.nproc)]
    cmd += ["--hostfile", args.hostfile] if args.hostfile else ["--oversubscribe"]
    for name in ("MASTER_ADDR", "MASTER_PORT", "FLOWGRAD_RENDEZVOUS_TOKEN", "PYTHONPATH", "FLOWGRAD_NUM_THREADS",
                 "OMPI_MCA_mpi_yield_when_idle"):
        if name in env:
            cmd += ["-x", name]
    cmd += args.mpirun_args + [sys.executable, "-m", "flowgrad.distributed._rank", args.script] + args.script_args
    return cmd, env


def _arm_parent_death_signal():
    """In the child before exec: mpirun gets SIGTERM (and then stops its ranks) when the launcher
    ends, even by SIGKILL, which the launcher itself cannot catch."""
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _interrupt(signum, frame):
    """SIGTERM (a scheduler's or a harness's stop) ends the job as Ctrl-C does."""
    raise KeyboardInterrupt


def _stop(job, grace_s=10):
    """SIGTERM to mpirun's process group (mpirun stops its ranks), SIGKILL after grace_s."""
    try:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    except ProcessLookupError:
        pass


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m flowgrad.distributed.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, required=True, help="number of processes (ranks)")
    parser.add_argument("--hostfile", help="MPI host file for a job across machines")
    parser.add_argument("--timeout", type=float, help="end the job after this many seconds")
    parser.add_argument("--mpirun-arg", dest="mpirun_args", action="append", default=[],
                        help="extra argument passed to mpirun (repeatable)")
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.nproc < 1:
        parser.error(f"--nproc must be at least 1, got {args.nproc}")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("flowgrad.distributed.run: mpirun not found; install Open MPI "
                         "(apt-get install openmpi-bin libopenmpi-dev)")
    cmd, env = command(args, mpirun)
    signal.signal(signal.SIGTERM, _interrupt)
    job = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=_arm_parent_death_signal)
    try:
        code = job.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        _stop(job)
        sys.stderr.write(f"flowgrad.distributed.run: the job ran past --timeout {args.timeout} s "
                         "and was stopped\n")
        return 124
    except KeyboardInterrupt:
        _stop(job)
        sys.stderr.write("flowgrad.distributed.run: interrupted; the job was stopped\n")
        return 130
    if code != 0:
        sys.stderr.write(f"flowgrad.distributed.run: the job failed (mpirun exit status {code}); "
                         "the failing rank is named above\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
