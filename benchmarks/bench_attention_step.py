"""flash_attention_packed and its backward per call inside a compiled step (step.profile()), at the
char transformer's attention (B=16, 4 heads of 32, packed qkv) and neighbouring shapes; with
--ab, two flowgrad builds timed in alternating subprocesses (rounds interleaved, medians).

    python benchmarks/bench_attention_step.py [--threads N] [--steps N]
    python benchmarks/bench_attention_step.py --ab BEFORE_SITE AFTER_SITE [--rounds N] [--save] [--tag NAME]

BEFORE_SITE / AFTER_SITE: directories holding a `flowgrad` package (a site-packages, or a copy of
one), put first on PYTHONPATH of each subprocess. The step is x * w -> the packed attention ->
cross-entropy with SGD, so the op's inputs come fresh from the previous op as in a model.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CASES = [  # (batch, heads, T, head dim, causal)
    (16, 4, 64, 32, True), (16, 4, 128, 32, True), (16, 4, 256, 32, True), (16, 4, 64, 32, False),
    (16, 4, 64, 64, False),
]
OPS = ("flash_attention_packed", "flash_attention_packed_backward")


def measure(threads, steps):
    """{case: {op: median microseconds per call}} for the flowgrad on sys.path."""
    import numpy as np

    import flowgrad as fg
    import flowgrad.nn.functional as F

    fg.set_num_threads(threads)
    rng = np.random.default_rng(0)
    results = {}
    for b, h, t, e, causal in CASES:
        class Attend(fg.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = fg.nn.Parameter(fg.ones(3 * h * e))

            def forward(self, x):
                out = F.scaled_dot_product_attention_packed(x * self.w, h, is_causal=causal)
                return out.transpose(1, 2).reshape(b * t, h * e)

        x = fg.tensor(rng.standard_normal((b, t, 3 * h * e)).astype(np.float32))
        y = fg.tensor(rng.integers(0, h * e, b * t))
        model = Attend()
        step = fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.01), example_inputs=(x, y))
        for _ in range(5):
            step(x, y)
        per = {op: [] for op in OPS}
        for _ in range(steps):
            for r in step.profile(x, y):
                if r["op"] in per:
                    per[r["op"]].append(r["ms"] * 1e3)
        results[f"B={b} H={h} T={t} E={e} causal={causal}"] = {op: statistics.median(v) for op, v in per.items()}
    return results


def ab(args):
    """Alternating subprocess rounds of the two builds; medians of the rounds' medians."""
    import datetime

    from common import machine, save

    runs = {"before": [], "after": []}
    for _ in range(args.rounds):
        for name, site in (("before", args.ab[0]), ("after", args.ab[1])):
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, os.path.dirname(__file__)]))
            out = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--steps", str(args.steps)],
                                 env=env, check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(out))
    rows = []
    for case in runs["before"][0]:
        row = {"case": case}
        for name in runs:
            for op in OPS:
                row[f"{name}_{op}_us"] = statistics.median(r[case][op] for r in runs[name])
        before = sum(row[f"before_{op}_us"] for op in OPS)
        after = sum(row[f"after_{op}_us"] for op in OPS)
        row["speedup_fwd_bwd"] = before / after
        rows.append(row)
        print(f"{case}: forward {row['before_flash_attention_packed_us']:.1f} -> {row['after_flash_attention_packed_us']:.1f} us, "
              f"backward {row['before_flash_attention_packed_backward_us']:.1f} -> "
              f"{row['after_flash_attention_packed_backward_us']:.1f} us, forward+backward {before / after:.2f}x", flush=True)
    print(f"load {os.getloadavg()[0]:.2f}")
    if args.save:
        save("bench_attention_step" + (f"-{args.tag}" if args.tag else ""), {
            "machine": machine(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": " ".join(sys.argv), "threads": args.threads, "rounds": args.rounds, "steps": args.steps,
            "statistic": "median over alternating subprocess rounds of each round's median per call",
            "load_average": os.getloadavg(), "cases": rows})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200, help="profiled steps per case")
    parser.add_argument("--ab", nargs=2, metavar=("BEFORE_SITE", "AFTER_SITE"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    if args.ab:
        ab(args)
    else:
        print(json.dumps(measure(args.threads, args.steps)))


if __name__ == "__main__":
    main()
