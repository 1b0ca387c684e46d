"""Where the CUDA configuration's compile time goes, per file and per nvcc phase.

    python scripts/nvcc_times.py NVCC_TIME_CSV NINJA_LOG [--label TEXT] [--out results.json]

NVCC_TIME_CSV comes from building with -C "cmake.define.CMAKE_CUDA_FLAGS=-time=FILE" (nvcc appends
one row per phase: cudafe++, gcc, cicc and ptxas per architecture); NINJA_LOG is the build
directory's .ninja_log (wall time of every step). Times are wall-clock: on a loaded machine they
are inflated, but the shares between files and phases hold."""
import argparse
import collections
import csv
import json
import os
import platform
import sys



def phases(csv_path):
    per_file = collections.defaultdict(lambda: collections.defaultdict(float))
    for row in csv.reader(open(csv_path)):
        if len(row) < 8 or row[7].strip() != "ms" or row[1].strip() == "nvcc":
            continue
        name, phase, arch = row[0].strip().lstrip("./"), row[1].strip().split(" (")[0], row[4].strip()
        if not name.startswith("CMake"):  # CMake's compiler checks
            per_file[name][f"{phase} {arch}".strip()] += float(row[6]) / 1000
    return per_file


def ninja_steps(log_path):
    steps = {}
    for line in open(log_path):
        if not line.startswith("#"):
            start, end, _, target, _ = line.split("\t")
            steps[target] = (int(end) - int(start)) / 1000
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("ninja_log")
    parser.add_argument("--label", default="")
    parser.add_argument("--out")
    args = parser.parse_args()
    steps = ninja_steps(args.ninja_log)
    files = []
    for name, by_phase in phases(args.csv).items():
        wall = next((s for t, s in steps.items() if t.endswith(name + ".o")), None)
        files.append({"file": name, "ninja_wall_s": wall, "phases_s": {k: round(v, 1) for k, v in
                                                                       sorted(by_phase.items(), key=lambda kv: -kv[1])}})
    files.sort(key=lambda f: -(f["ninja_wall_s"] or 0))
    cu = sum(f["ninja_wall_s"] or 0 for f in files)
    result = {"label": args.label, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                               "load_avg_at_save": os.getloadavg()},
              "all_steps_wall_s": round(sum(steps.values()), 1), "cuda_files_wall_s": round(cu, 1), "files": files}
    for f in files:
        print(f"{f['ninja_wall_s'] or 0:8.1f} s  {f['file']}  " +
              ", ".join(f"{k} {v}" for k, v in list(f["phases_s"].items())[:4]))
    print(f"{cu:8.1f} s  all .cu files; {result['all_steps_wall_s']} s every ninja step")
    if args.out:
        with open(args.out, "w") as out:
            json.dump(result, out, indent=1)
            out.write("\n")


if __name__ == "__main__":
    main()
