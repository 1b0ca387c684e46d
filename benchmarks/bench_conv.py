"""Convolution per shape on the CPU: flowgrad's conv2d op (image by image: at avx2 and avx512 with
stride 1 the columns read in place from the padded image by packed products, no im2col; elsewhere
each image's columns in a cache-sized workspace, then one GEMM; backward as the conv2d_input_grad
and conv2d_weight_grad ops),
the composition it replaced (im2col of the whole batch + a batched matmul, from F.unfold) and
PyTorch's F.conv2d (oneDNN on the CPU), forward and forward + backward (input, weight and bias
gradients), interleaved rounds, medians, the load average and the instruction-set level printed.
In a build with oneDNN (fg.build_config()["onednn"]), "flowgrad" is what FLOWGRAD_CONV picks for
the shape (the row's "onednn": whether that is oneDNN's forward) and "flowgrad_own" flowgrad's own
kernels alone (FLOWGRAD_CONV=own); own_over_onednn_fwd is their ratio where oneDNN ran.

    python benchmarks/bench_conv.py [--save] [--rounds N] [--threads N] [--tag NAME] [--min-time SECONDS]
    FLOWGRAD_ISA=avx2 python benchmarks/bench_conv.py    (common.py holds PyTorch, oneDNN and OpenBLAS to the level)

Shapes: the three convolutions of bench_cnn_rnn.py's CNN (B=64, 32x32, 3x3 padding 1) and a few
others (stride 2, 1x1, 5x5, one image). Ratios are PyTorch's time over ours (higher is better).
--save writes results/bench_conv-<level>[-tag]-<date>.json.
"""
import argparse

import numpy as np

import flowgrad as fg
import flowgrad.nn.functional as F
from common import add_min_time, command_line, interleaved, load_average, machine, save, torch_peer

# (name, N, C, O, H, W, k, stride, padding)
SHAPES = [
    ("cnn1 3->16", 64, 3, 16, 32, 32, 3, 1, 1),
    ("cnn2 16->32", 64, 16, 32, 32, 32, 3, 1, 1),
    ("cnn3 32->32", 64, 32, 32, 32, 32, 3, 1, 1),
    ("s2 32->64", 64, 32, 64, 32, 32, 3, 2, 1),
    ("1x1 64->64", 64, 64, 64, 16, 16, 1, 1, 0),
    ("5x5 16->32", 32, 16, 32, 28, 28, 5, 1, 2),
    ("b1 64->64", 1, 64, 64, 56, 56, 3, 1, 1),
]


def im2col_conv(x, w, b, stride, padding):
    """The composition fg::conv2d used before the op: im2col of the batch, then a batched matmul."""
    n, o, k = x.shape[0], w.shape[0], w.shape[2]
    cols = F.unfold(x, (k, k), padding=padding, stride=stride)
    out_h = (x.shape[2] + 2 * padding - k) // stride + 1
    y = (w.reshape(o, -1) @ cols).reshape(n, o, out_h, -1)
    return y + b.reshape(1, o, 1, 1)


def peers(shape, torch):
    _, n, c, o, h, w, k, stride, padding = shape
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((n, c, h, w), (o, c, k, k), (o,))]
    out = {}
    chosen = fg.build_config()["conv"]

    def own_conv(*args):  # flowgrad's own kernels, oneDNN aside (FLOWGRAD_CONV=own)
        fg._core._set_conv_kernel("own")
        try:
            return F.conv2d(*args)
        finally:
            fg._core._set_conv_kernel(chosen)

    convs = [("flowgrad", F.conv2d), ("flowgrad_im2col", im2col_conv)]
    if fg.build_config()["onednn"]:
        convs.append(("flowgrad_own", own_conv))
    for name, conv in convs:
        x, wt, b = (fg.tensor(a, requires_grad=True) for a in arrays)
        g = fg.ones(*conv(x, wt, b, stride, padding).shape)

        def forward(conv=conv, x=x, wt=wt, b=b):
            with fg.no_grad():
                conv(x, wt, b, stride, padding)

        def both(conv=conv, x=x, wt=wt, b=b, g=g):
            x.grad = wt.grad = b.grad = None
            conv(x, wt, b, stride, padding).backward(g)
        out[f"{name}_fwd"], out[f"{name}_fwd_bwd"] = forward, both
    if torch is not None:
        x, wt, b = (torch.tensor(a, requires_grad=True) for a in arrays)
        g = torch.ones_like(torch.nn.functional.conv2d(x, wt, b, stride, padding))

        def t_forward():
            with torch.no_grad():
                torch.nn.functional.conv2d(x, wt, b, stride, padding)

        def t_both():
            x.grad = wt.grad = b.grad = None
            torch.nn.functional.conv2d(x, wt, b, stride, padding).backward(g)
        out["torch_fwd"], out["torch_fwd_bwd"] = t_forward, t_both
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="threads of each library (default: flowgrad's)")
    parser.add_argument("--tag", default="")
    add_min_time(parser)
    args = parser.parse_args()
    if args.threads:
        fg.set_num_threads(args.threads)
    torch = torch_peer()
    isa = fg.build_config()["isa"]
    print(f"instruction-set level {isa} (FLOWGRAD_ISA), {fg.get_num_threads()} threads, load {load_average()}, "
          f"PyTorch {torch.__version__ if torch else 'absent'}"
          + (f" (CPU capability {torch.backends.cpu.get_cpu_capability()})" if torch else ""), flush=True)
    results = {"machine": machine(), "command": command_line(), "isa": isa, "onednn": fg.build_config()["onednn"],
               "conv": fg.build_config()["conv"], "rounds": args.rounds, "min_time_s": args.min_time, "statistic": "median of interleaved rounds",
               "torch_capability": torch.backends.cpu.get_cpu_capability() if torch else None, "shapes": {}}
    for shape in SHAPES:
        load_start = load_average()
        times = {name: 1e3 * t["median"] for name, t in interleaved(peers(shape, torch), args.rounds, args.min_time).items()}
        row = {"shape": dict(zip(("n", "c", "o", "h", "w", "k", "stride", "padding"), shape[1:])),
               "onednn": fg._core._conv_takes_onednn([shape[1], shape[2], shape[4], shape[5]], shape[3], shape[6],
                                                     shape[6], shape[7], shape[8])}
        row.update({f"{name}_ms": round(ms, 3) for name, ms in times.items()})
        if torch is not None:
            for part in ("fwd", "fwd_bwd"):
                row[f"torch_over_flowgrad_{part}"] = round(times[f"torch_{part}"] / times[f"flowgrad_{part}"], 3)
        if "flowgrad_own_fwd" in times:
            row["own_over_onednn_fwd"] = round(times["flowgrad_own_fwd"] / times["flowgrad_fwd"], 3) if row["onednn"] else None
        row["load_average"] = [load_start, load_average()]
        print(f"{shape[0]:12s} " + "  ".join(f"{k} {v}" for k, v in row.items() if k != "shape"), flush=True)
        results["shapes"][shape[0]] = row
    if args.save:
        print("saved", save(f"bench_conv-{isa}" + (f"-{args.tag}" if args.tag else ""), results))


if __name__ == "__main__":
    main()
