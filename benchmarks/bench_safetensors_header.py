"""Loading a safetensors file whose header names many tensors (issue 22: 400 000 names took 3.2 s):

    python benchmarks/bench_safetensors_header.py [--save] [--names 100000 400000]

fg.load against the safetensors package (safetensors.numpy.load_file) on the same file of
zero-size F32 tensors, so that only the header counts. Each time is the best of three loads;
wall time and this process's CPU time are both printed, since on a loaded machine the wall time
mostly measures the wait for a core. Equal time per name at every size means linear.
"""
import argparse
import os
import struct
import tempfile
import time

import flowgrad as fg
from common import machine, save

try:
    import safetensors.numpy as st_numpy
except ImportError:
    st_numpy = None


def header_file(path, names):
    entries = ",".join(f'"layer.{i}.weight":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}' for i in range(names))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(entries) + 2) + b"{" + entries.encode() + b"}")


def best(load, path):
    runs = []
    for _ in range(3):
        wall, cpu = time.perf_counter(), time.process_time()
        assert len(load(path)) > 0
        runs.append((time.perf_counter() - wall, time.process_time() - cpu))
    return min(runs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--names", type=int, nargs="+", default=[100_000, 400_000])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "header.safetensors")
        for names in args.names:
            header_file(path, names)
            for library, load in [("flowgrad", fg.load), ("safetensors", st_numpy and st_numpy.load_file)]:
                if load is None:
                    continue
                wall, cpu = best(load, path)
                rows.append({"names": names, "library": library, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                             "cpu_us_per_name": round(cpu / names * 1e6, 2)})
                print(f"{names:>8} names  {library:<12} wall {wall:6.3f} s  cpu {cpu:6.3f} s  "
                      f"({cpu / names * 1e6:.2f} us cpu per name)")
    if args.save:
        print("saved", save("bench_safetensors_header", {"machine": machine(), "rows": rows}))


if __name__ == "__main__":
    main()
