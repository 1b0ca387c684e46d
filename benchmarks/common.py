"""Shared benchmark helpers: timing, machine description, JSON results."""
import atexit
import datetime
import json
import os
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

RESULTS = pathlib.Path(__file__).parent / "results"

# A forced FLOWGRAD_ISA (which also holds flowgrad's OpenBLAS to the level) sets the peers' own
# switches too, where the user did not, before PyTorch loads: both sides measured at one level.
# MKL ignores MKL_ENABLE_INSTRUCTIONS on AMD CPUs, where its Zen path is AVX2 (the avx2 level's
# own); only its reproducibility path MKL_CBWR=COMPATIBLE (SSE2) holds it to generic there
# (torch.mm 1024x512x128 on 1 thread of an AMD EPYC: 80-89 GFLOPS with MKL_ENABLE_INSTRUCTIONS=SSE4_2,
# as unset; 27 with MKL_CBWR=COMPATIBLE, OpenBLAS's SSE kernels 23).
PEER_LEVELS = {
    "generic": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "MKL_CBWR": "COMPATIBLE",
                "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
for _name, _value in PEER_LEVELS.get(os.environ.get("FLOWGRAD_ISA", ""), {}).items():
    os.environ.setdefault(_name, _value)


# The variables that pin flowgrad and its peers (OpenBLAS, PyTorch, MKL, oneDNN) to one instruction-set level
# (the ones PEER_LEVELS set included).
LEVEL_VARIABLES = ("FLOWGRAD_ISA", "OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR",
                   "ONEDNN_MAX_CPU_ISA")


def command_line():
    """This run's command as a result file records it: the level variables set, then python and its
    arguments (no paths of the machine)."""
    pinned = [f"{k}={os.environ[k]}" for k in LEVEL_VARIABLES if k in os.environ]
    return " ".join(pinned + ["python", "benchmarks/" + pathlib.Path(sys.argv[0]).name] + sys.argv[1:])


def _print_isa():
    """Every benchmark that ran flowgrad says at its end which instruction-set level its CPU
    kernels ran at (FLOWGRAD_ISA forces a lower one than the machine's)."""
    fg = sys.modules.get("flowgrad")
    if fg is not None:
        config = fg.build_config()
        print(f"flowgrad CPU kernels ran at {config['isa']} (FLOWGRAD_ISA; this machine runs "
              f"{', '.join(config['isa_levels'])}), float32 GEMM: {config['sgemm']}")


atexit.register(_print_isa)


def best_time(fn, repeat=5, min_time=0.2):
    """Best per-call seconds over `repeat` rounds of enough calls to last min_time each."""
    calls = calibrate(fn, min_time / repeat)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


# Seconds to sleep before timing a different library. OpenBLAS's worker threads (ours with
# FLOWGRAD_BLAS_THREADS=openblas; by default its jobs run on flowgrad's pool, whose workers spin
# for 1 ms at most) and OpenMP's (PyTorch's) keep spinning for a while after a parallel region; without a pause they
# steal the cores from whichever library is timed next, which made PyTorch look up to 2x slower
# when it ran right after our GEMMs (seen in bench_eager's MLP step on 2 cores).
SWITCH_GAP = 0.3


def calibrate(fn, min_time=0.05):
    """How many back-to-back calls of fn last at least min_time seconds (after one warm-up call)."""
    fn()
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - start >= min_time or calls > 1 << 24:
            return calls
        calls *= 2


def interleaved(peers, rounds=7, min_time=0.05, gap=SWITCH_GAP):
    """Per-call seconds of each function in `peers` ({name: fn}), timed in alternating rounds: each
    round times every peer once (a calibrated batch of calls, after a `gap` pause so that no
    library's spinning threads overlap another's timing). Returns {name: {"median", "samples"}}:
    load changes during the run hit every peer alike, and the median drops the outliers."""
    calls = {name: calibrate(fn, min_time) for name, fn in peers.items()}
    samples = {name: [] for name in peers}
    for _ in range(rounds):
        for name, fn in peers.items():
            time.sleep(gap)
            fn()  # one untimed call: wakes the threads the pause put to sleep
            start = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            samples[name].append((time.perf_counter() - start) / calls[name])
    return {name: {"median": statistics.median(values), "samples": values} for name, values in samples.items()}


def add_min_time(parser):
    """--min-time for a benchmark's parser: the seconds of back-to-back calls per peer and round
    (interleaved's min_time). At the default a step of 50 ms or more is one call per round, timed
    right after the pause; 0.4 gives several (bench_cnn_rnn's CNN ratios had moved by up to 0.25
    between runs at the default)."""
    parser.add_argument("--min-time", type=float, default=0.05,
                        help="seconds of back-to-back calls per peer and round (default 0.05)")


def torch_peer():
    """PyTorch on flowgrad's thread count, or None when it is not installed (its peer is skipped)."""
    try:
        import torch
    except ImportError:
        return None
    import flowgrad as fg
    torch.set_num_threads(fg.get_num_threads())
    return torch


def load_average():
    return round(os.getloadavg()[0], 2)


def machine():
    import flowgrad as fg  # here, so that timing NumPy alone (bench_blas_choice.py) loads no flowgrad
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "flowgrad_threads": fg.get_num_threads(), "blas": fg.blas_name(),
            "isa": fg.build_config()["isa"], "sgemm": fg.build_config()["sgemm"],
            "blas_core": fg.build_config()["blas_core"],
            "level_variables": {k: os.environ[k] for k in LEVEL_VARIABLES if k in os.environ},
            "load_average": load_average(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        import torch
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        info["torch"] = None
    return info


def save(name, payload):
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.date.today().isoformat()
    path = RESULTS / f"{name}-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def transformer_lm(vocab, seq, dim, heads, layers):
    """The benchmarks' causal transformer LM, built as a user would: token embedding + learned
    positions, `layers` nn.TransformerBlocks, LayerNorm, an untied head; logits (batch * seq, vocab)."""
    import flowgrad as fg
    from flowgrad import nn

    class TransformerLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(vocab, dim)
            self.positions = nn.Parameter(fg.randn(seq, dim) * 0.02)
            self.blocks = nn.ModuleList([nn.TransformerBlock(dim, heads, causal=True) for _ in range(layers)])
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab)

        def forward(self, idx):
            x = self.tokens(idx) + self.positions
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x)).reshape(-1, vocab)

    return TransformerLM()
