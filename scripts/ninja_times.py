"""Where a build spent its time, from ninja's log: python scripts/ninja_times.py BUILD_DIR [--top N].

Reads BUILD_DIR/.ninja_log (the last entry of each output), and prints the wall-clock span of the
build, the summed compile time per folder and for the test-only targets (GoogleTest), and the
slowest targets. The sums are CPU-ish time (one job each); on N cores the wall time is about sum / N
when the machine is otherwise idle. Pass the log of a cold build (CCACHE_DISABLE=1 and a fresh
build directory): with ccache hits the numbers are the cache's, not the compiler's.
"""
import argparse
import collections
import pathlib


def read_log(path):
    """{output: (start_ms, end_ms)}, the last build of each output."""
    entries = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _mtime, output, _hash = line.split("\t")
        entries[output] = (int(start), int(end))
    return entries


def group_of(output):
    if "flowgrad_cpp_tests" in output:
        return "C++ tests (test builds only)"
    name = output.split(".dir/", 1)[-1]
    parts = name.split("/")
    depth = 3 if parts[:2] == ["cpp", "flowgrad"] else 2  # cpp/flowgrad/<layer>, kernels/<family>
    return "/".join(parts[:depth]) if len(parts) > depth else "/".join(parts[:-1]) or parts[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dir")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    entries = read_log(pathlib.Path(args.build_dir) / ".ninja_log")
    if not entries:
        raise SystemExit("the log is empty")
    span = (max(e for _, e in entries.values()) - min(s for s, _ in entries.values())) / 1000
    total = sum(e - s for s, e in entries.values()) / 1000
    groups = collections.Counter()
    for output, (s, e) in entries.items():
        groups[group_of(output)] += (e - s) / 1000
    print(f"{len(entries)} targets, wall span {span:.0f} s, summed {total:.0f} s")
    print("\nsummed seconds per folder:")
    for group, seconds in groups.most_common():
        print(f"  {seconds:8.1f} s {100 * seconds / total:5.1f}%  {group}")
    print(f"\nslowest {args.top} targets:")
    for output, (s, e) in sorted(entries.items(), key=lambda kv: kv[1][0] - kv[1][1])[:args.top]:
        print(f"  {(e - s) / 1000:8.1f} s  {output}")


if __name__ == "__main__":
    main()
