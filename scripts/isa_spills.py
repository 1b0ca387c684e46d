"""Vector registers spilled to the stack in the CPU kernels compiled per instruction-set level
(kernels/common/cpu_dispatch.h): every function compiled for avx2 or avx512 (isa_detail::at_avx2,
at_avx512) with its widest register and its instructions that move a whole register of the level (ymm,
zmm) to or from the stack (spills, reloads, vectors built lane by lane through memory), most first.

    python scripts/isa_spills.py [PATH] [--match TEXT] [--top N]

PATH: an object file or the built module (default: the flowgrad/_core*.so that Python imports);
--match: only functions whose demangled name contains TEXT (e.g. rows_product).
"""
import argparse
import collections
import re
import subprocess

STACK = re.compile(r"\((%rsp|%rbp)\)|\(%rsp,|\(%rbp,")
VECTOR = re.compile(r"%([xyz])mm\d+")
LEVEL = re.compile(r"isa_detail::at_(avx2|avx512)<")
FULL = {"avx2": "%ymm", "avx512": "%zmm"}  # a whole register of the level


def functions(path):
    """(demangled name, [instruction text]) for each function in the disassembly."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", path], capture_output=True, text=True,
                         check=True).stdout
    name, body = None, []
    for line in out.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if head:
            if name:
                yield name, body
            name, body = head.group(1), []
        elif name and "\t" in line:
            body.append(line.split("\t", 1)[1])
    if name:
        yield name, body


def shorten(name):
    """The kernel a dispatch runs (the call inside FG_AT_ISA's lambda) and where: argument lists dropped."""
    name = re.sub(r"\((?:[^()]|\([^()]*\))*\)", "()", re.sub(r"\((?:[^()]|\([^()]*\))*\)", "()", name))
    return name.replace("fg::(anonymous namespace)::", "").replace("decltype(auto) fg::isa_detail::", "")[:200]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("path", nargs="?")
    parser.add_argument("--match", default="")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    if not args.path:
        import flowgrad._core as core
        args.path = core.__file__
    rows = collections.defaultdict(list)
    for name, body in functions(args.path):
        level = LEVEL.search(name)
        if not level or args.match not in name:
            continue
        widths = {w for ins in body for w in VECTOR.findall(ins)}
        spills = sum(1 for ins in body if STACK.search(ins) and FULL[level.group(1)] in ins)
        widest = "zmm" if "z" in widths else "ymm" if "y" in widths else "xmm" if "x" in widths else "-"
        rows[level.group(1)].append((spills, len(body), widest, name))
    for level in ("avx2", "avx512"):
        found = sorted(rows[level], reverse=True)
        print(f"{level}: {len(found)} functions, {sum(r[0] for r in found)} vector accesses at the stack; "
              f"widest registers: {dict(collections.Counter(r[2] for r in found))}")
        for spills, size, widest, name in found[:args.top]:
            print(f"  {spills:5d} of {size:6d} instructions, {widest}: {shorten(name)}")


if __name__ == "__main__":
    main()
