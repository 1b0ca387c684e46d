"""python -m flowgrad.distributed._rank script.py [args...]: how the launcher starts each rank.

Runs script.py as `python script.py args` would (as __main__, its folder first on sys.path), after
two things a plain start lacks: the rank dies with the process that started it (mpirun, or Open
MPI's daemon on another machine) by a parent-death signal, so killing the launcher, even with
SIGKILL, ends every rank; and a rank that leaves with a non-zero status (sys.exit(1), raise
SystemExit(...)) after fg.distributed.init aborts the whole job naming itself, as an uncaught
exception does, instead of leaving the others waiting for it in a collective.
"""
import ctypes
import os
import runpy
import signal
import sys

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent():
    """SIGKILL this process when its parent ends (Linux; elsewhere the launcher's signals must do)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent ended before the signal was armed
        os.kill(os.getpid(), signal.SIGKILL)


def exit_status(code):
    """The process exit status SystemExit(code) gives (None: 0, an int: itself, anything else: 1)."""
    return 0 if code is None else int(code) if isinstance(code, int) else 1


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m flowgrad.distributed._rank script.py [args...]")
    die_with_parent()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        status = exit_status(e.code)
        from .. import _core
        if status != 0 and _core.distributed.is_initialized():
            if not isinstance(e.code, int):
                print(e.code, file=sys.stderr)  # what the interpreter would have printed
            sys.stderr.write(f"flowgrad.distributed: rank {_core.distributed.rank()} exited with status "
                             f"{status}; aborting the job\n")
            sys.stderr.flush()
            _core.distributed.abort(status)
        raise


if __name__ == "__main__":
    main()
