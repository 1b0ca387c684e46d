"""Compiles every C++ file of a CMake build with clang++ -fsyntax-only, with the same include
directories, definitions and warning options as the build's own compiler (from its
compile_commands.json), warnings made errors: a file clang warns about fails.

    python scripts/clang_syntax_check.py build/<dir>/compile_commands.json
"""
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

# GCC-only options clang rejects or warns about, and the output options a syntax check has no use for.
DROP = {"-fno-semantic-interposition", "-fno-fat-lto-objects", "-Wno-restrict"}
DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}


def clang_command(entry, clang):
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    while args and os.path.basename(args[0]) in ("ccache", "sccache"):
        args.pop(0)
    out, skip = [clang, "-fsyntax-only", "-Werror"], False
    for arg in args[1:]:
        if skip:
            skip = False
        elif arg in DROP_WITH_VALUE:
            skip = True
        elif arg not in DROP and arg not in ("-c", "-MD", "-MMD"):
            out.append(arg)
    return out


def main(paths):
    clang = shutil.which("clang++")
    if clang is None:
        sys.exit("clang_syntax_check: clang++ is not on PATH")
    jobs = []
    for path in paths:
        with open(path) as f:
            jobs += [(e["file"], e["directory"], clang_command(e, clang)) for e in json.load(f) if e["file"].endswith(".cpp")]
    if not jobs:
        sys.exit(f"clang_syntax_check: no C++ files in {' '.join(paths)}")

    def check(job):
        file, directory, command = job
        return file, subprocess.run(command, cwd=directory, capture_output=True, text=True)

    failed, start = 0, time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        for file, result in pool.map(check, jobs):
            if result.returncode != 0:
                failed += 1
                print(f"clang: {file} failed:\n{result.stderr[-4000:]}")
    print(f"clang: {len(jobs) - failed} of {len(jobs)} C++ files compile ({clang}, syntax only, "
          f"{time.monotonic() - start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
