"""python -m flowgrad.distributed.run --nproc N [--hostfile FILE] script.py [args...]

Starts N copies of script.py under mpirun (Open MPI), one rank each; with --hostfile the ranks
spread over the machines it lists (Open MPI's host file format: `host slots=K` per line). Every
rank also gets MASTER_ADDR / MASTER_PORT for the NCCL rendezvous. The job's exit status is
mpirun's: a rank that fails makes mpirun stop the others and report it; --timeout ends a job
that runs too long.
"""
import argparse
import os
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
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers often run as root
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")  # see fg.distributed.init: never spin on a shared core
    cmd = [mpirun, "-n", str(args.nproc)]
    cmd += ["--hostfile", args.hostfile] if args.hostfile else ["--oversubscribe"]
    for name in ("MASTER_ADDR", "MASTER_PORT", "PYTHONPATH", "FLOWGRAD_NUM_THREADS", "OMPI_MCA_mpi_yield_when_idle"):
        if name in env:
            cmd += ["-x", name]
    cmd += args.mpirun_args + [sys.executable, args.script] + args.script_args
    return cmd, env


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
    job = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        code = job.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
        sys.stderr.write(f"flowgrad.distributed.run: the job ran past --timeout {args.timeout} s "
                         "and was stopped\n")
        return 124
    except KeyboardInterrupt:
        os.killpg(job.pid, signal.SIGTERM)
        raise
    if code != 0:
        sys.stderr.write(f"flowgrad.distributed.run: the job failed (mpirun exit status {code}); "
                         "the failing rank is named above\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
