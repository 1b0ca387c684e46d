"""The CPU kernels compiled per instruction-set level (kernels/common/cpu_dispatch.h), read from the
disassembly of the built module.

Spills (the default): every function compiled for avx2 or avx512 (isa_detail::at_avx2, at_avx512)
with its widest register and its instructions that move a whole register of the level (ymm, zmm)
to or from the stack (spills, reloads, vectors built lane by lane through memory), most first.

Widths (--widths): what each level reaches. From every copy of a dispatched kernel at a level,
through the functions it calls directly, no instruction may use a register wider than the level's:
no zmm or AVX-512 mask register from at_avx2, no ymm or zmm from the generic copy (at_isa, which
holds it, up to its calls of the avx2 and avx512 copies). Prints the functions that do; exit 1
when there are any (tests/test_isa.py runs it).

    python scripts/isa_spills.py [PATH] [--match TEXT] [--top N] [--widths]

PATH: an object file or the built module (default: the flowgrad/_core*.so that Python imports);
--match: only functions whose demangled name contains TEXT (e.g. rows_product).
"""
import argparse
import collections
import re
import subprocess
import sys

STACK = re.compile(r"\((%rsp|%rbp)\)|\(%rsp,|\(%rbp,")
VECTOR = re.compile(r"%([xyz])mm\d+")
LEVEL = re.compile(r"isa_detail::at_(avx2|avx512)<")
FULL = {"avx2": "%ymm", "avx512": "%zmm"}  # a whole register of the level
CALL = re.compile(r"^(?:call|jmp)\w*\s+([0-9a-f]+) <")
GENERIC = re.compile(r"^decltype\(auto\) fg::at_isa<")
# Registers above each level: what its copies, and what they call, must not touch.
ABOVE = {"generic": re.compile(r"%[yz]mm\d|%k[0-7]\b"), "avx2": re.compile(r"%zmm\d|%k[0-7]\b")}


def functions(path):
    """{demangled name: (address, [instruction text])} for each function in the disassembly."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", path], capture_output=True, text=True,
                         check=True).stdout
    found, body = {}, None
    for line in out.splitlines():
        head = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
        if head:
            body = []
            found.setdefault(head.group(2), (int(head.group(1), 16), body))
        elif body is not None and "\t" in line:
            body.append(line.split("\t", 1)[1].strip())
    return found


def reachable(found, roots, stop):
    """The functions roots call directly (calls and tail jumps), transitively, roots included; not
    entering those stop(name) is true for."""
    named = {address: name for name, (address, _) in found.items()}
    seen, todo = set(roots), list(roots)
    while todo:
        for ins in found[todo.pop()][1]:
            call = CALL.match(ins)
            callee = named.get(int(call.group(1), 16)) if call else None
            if callee and callee not in seen and not stop(callee):
                seen.add(callee)
                todo.append(callee)
    return seen


def too_wide(found):
    """{level: (copies checked, functions reached, [(function, first instruction above the level)])}."""
    copies = {"avx2": [n for n in found if "isa_detail::at_avx2<" in n],
              "generic": [n for n in found if GENERIC.match(n)]}
    result = {}
    for level, roots in copies.items():
        stop = (lambda n: False) if level == "avx2" else (lambda n: LEVEL.search(n) is not None)
        reached = reachable(found, roots, stop)
        first = {n: next((i for i in found[n][1] if ABOVE[level].search(i)), None) for n in sorted(reached)}
        result[level] = (len(roots), len(reached), [(n, i) for n, i in first.items() if i is not None])
    return result


def spills(found, match, top):
    rows = collections.defaultdict(list)
    for name, (_, body) in found.items():
        level = LEVEL.search(name)
        if not level or match not in name:
            continue
        widths = {w for ins in body for w in VECTOR.findall(ins)}
        count = sum(1 for ins in body if STACK.search(ins) and FULL[level.group(1)] in ins)
        widest = "zmm" if "z" in widths else "ymm" if "y" in widths else "xmm" if "x" in widths else "-"
        rows[level.group(1)].append((count, len(body), widest, name))
    for level in ("avx2", "avx512"):
        found_level = sorted(rows[level], reverse=True)
        print(f"{level}: {len(found_level)} functions, {sum(r[0] for r in found_level)} vector accesses at the "
              f"stack; widest registers: {dict(collections.Counter(r[2] for r in found_level))}")
        for count, size, widest, name in found_level[:top]:
            print(f"  {count:5d} of {size:6d} instructions, {widest}: {shorten(name)}")


def shorten(name):
    """The kernel a dispatch runs (the call inside FG_AT_ISA's lambda) and where: argument lists dropped."""
    name = re.sub(r"\((?:[^()]|\([^()]*\))*\)", "()", re.sub(r"\((?:[^()]|\([^()]*\))*\)", "()", name))
    return name.replace("fg::(anonymous namespace)::", "").replace("decltype(auto) fg::isa_detail::", "")[:200]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("path", nargs="?")
    parser.add_argument("--match", default="")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--widths", action="store_true")
    args = parser.parse_args()
    if not args.path:
        import flowgrad._core as core
        args.path = core.__file__
    found = functions(args.path)
    if not args.widths:
        return spills(found, args.match, args.top)
    failed = False
    for level, (roots, reached, bad) in too_wide(found).items():
        print(f"{level}: {roots} copies, {reached} functions reached, {len(bad)} with wider registers")
        for name, ins in bad[:args.top]:
            print(f"  {shorten(name)}: {ins}")
        failed |= bool(bad)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
