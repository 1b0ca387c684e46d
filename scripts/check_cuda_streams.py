#!/usr/bin/env python3
"""Fails, naming file:line, on any CUDA work in cpp/ or kernels/ that takes an implicit stream.

Every kernel launch, CUB call, memset, copy and cuBLAS/NCCL call must get its stream from the
KernelEnv its caller passed (kernel_stream(env) / library_stream(env) in kernels/common/launch.cuh,
env.stream for the driver launch), so that work follows fg.cuda.stream, graph branches and CUDA
graph capture, and the capture self-check can count it. The rules:

  launch      a <<<grid, block, smem, stream>>> launch names all four and its stream is
              kernel_stream(env), which counts the launch; kernel_stream appears nowhere else
  memset/copy only the Async forms, with a stream argument that is not 0 / nullptr / a legacy
              or per-thread constant
  CUB         cub::Device*::*(...) ends with library_stream(env); a call that queues work (temp
              storage not nullptr) sits in a cuda::LibraryKernels scope
  cuBLAS      a compute call uses a handle from handle_for_current_device(env) (cublasSetStream to
              the current stream) and sits in a cuda::LibraryKernels scope
  NCCL        a collective passes stream() and sits in a cuda::LibraryKernels scope
  driver      cuLaunchKernel (d.launch with 11 arguments) passes env.stream and is
              followed by cuda::count_launch()
  runtime     cudaLaunchKernel / cudaGraphLaunch with a 0 / nullptr stream

Usage: check_cuda_streams.py [ROOT]   (ROOT defaults to the repository holding this script)
"""
import pathlib
import re
import sys

SOURCE_DIRS = ("cpp", "kernels")
SUFFIXES = {".cu", ".cuh", ".cpp", ".h"}
IMPLICIT = {"0", "nullptr", "NULL", "0ull", "cudaStreamLegacy", "cudaStreamPerThread"}
LIBRARY_SCOPE = re.compile(r"\bLibraryKernels\s+\w+\s*[;({]")


def strip_code(text):
    """`text` with comments and string/char literals blanked to spaces (newlines kept)."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            blank(i + 1, end)
            i = end
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator, 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def split_args(text, start):
    """The top-level comma-separated arguments of the call whose '(' is at `start`, and the
    offset just past its ')'."""
    depth, args, current = 0, [], start + 1
    for i in range(start, len(text)):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[current:i].strip())
                return ([] if args == [""] else args), i + 1
        elif c == "," and depth == 1:
            args.append(text[current:i].strip())
            current = i + 1
    return args, len(text)


def launch_config(text, start):
    """The arguments between <<< at `start` and the matching >>>."""
    end = text.find(">>>", start)
    inner = text[start + 3:end]
    args, depth, current = [], 0, 0
    for i, c in enumerate(inner):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(inner[current:i].strip())
            current = i + 1
    args.append(inner[current:].strip())
    return args, end


def library_scopes(code):
    """For each offset of `code`, whether a cuda::LibraryKernels scope is live there."""
    live = [False] * (len(code) + 1)
    stack = []  # per open brace: whether a LibraryKernels was declared in it so far
    declared = {m.start() for m in LIBRARY_SCOPE.finditer(code)}
    for i, c in enumerate(code):
        if i in declared and stack:
            stack[-1] = True
        if c == "{":
            stack.append(False)
        elif c == "}" and stack:
            stack.pop()
        live[i] = any(stack)
    return live


def check_source(text, name="<source>"):
    """Violations in one file's text, as 'name:line: message' strings."""
    code = strip_code(text)
    problems = []

    def line_of(pos):
        return code.count("\n", 0, pos) + 1

    def report(pos, message):
        problems.append(f"{name}:{line_of(pos)}: {message}")

    live = library_scopes(code)
    launch_streams = set()
    for m in re.finditer(r"<<<", code):
        args, end = launch_config(code, m.start())
        if len(args) != 4:
            report(m.start(), f"kernel launch <<<{', '.join(args)}>>> without a stream argument (pass kernel_stream(env))")
        elif args[3] != "kernel_stream(env)":
            report(m.start(), f"kernel launch on stream '{args[3]}': launches take kernel_stream(env)")
        else:
            launch_streams.add(code.rfind("kernel_stream(env)", m.start(), end))
    for m in re.finditer(r"\bkernel_stream\s*\(([^()]*)\)", code):
        defining = re.search(r"cudaStream_t\s*$", code[max(0, m.start() - 40):m.start()]) and "{" in code[m.end():m.end() + 4]
        if m.start() not in launch_streams and not defining:
            report(m.start(), "kernel_stream(env) outside a <<<...>>> launch counts a launch that never happens "
                              "(library calls and memsets take library_stream(env))")
    for m in re.finditer(r"\bcuda(Memset|Memcpy)(\w*)\s*\(", code):
        kind, suffix = m.group(1), m.group(2)
        args, _ = split_args(code, m.end() - 1)
        if not suffix.endswith("Async"):
            report(m.start(), f"synchronous cuda{kind}{suffix} runs on the legacy default stream: use "
                              f"cuda{kind}{suffix}Async on library_stream() (and synchronise that stream if needed)")
            continue
        minimum = {"MemsetAsync": 4, "MemcpyAsync": 5}.get(kind + suffix, 0)
        if len(args) < minimum or (args and args[-1] in IMPLICIT):
            report(m.start(), f"cuda{kind}{suffix} without an explicit stream")
    for m in re.finditer(r"\bcub::Device\w+::\w+\s*\(", code):
        args, _ = split_args(code, m.end() - 1)
        if not args or args[-1] != "library_stream(env)":
            report(m.start(), "CUB call without library_stream(env) as its stream")
        elif args[0] != "nullptr" and not live[m.start()]:
            report(m.start(), "CUB call that queues kernels outside a cuda::LibraryKernels scope")
    cublas_call = r"\bcublas\(\)\.(?!create\b|set_stream\b|set_workspace\b|set_math_mode\b|error\b)(\w+)\s*\("
    direct_cublas = r"\bcublas(?!Create|SetStream|SetWorkspace|SetMathMode|Destroy|GetStatus)[A-Z]\w*(?<!_t)\s*\("
    for m in list(re.finditer(cublas_call, code)) + list(re.finditer(direct_cublas, code)):
        args, _ = split_args(code, m.end() - 1)
        handle = args[0] if args else ""
        assigned = re.findall(rf"\b{re.escape(handle)}\s*=\s*([^;]*);", code[max(0, m.start() - 3000):m.start()])
        if not handle or not assigned or not re.fullmatch(r"handle_for_current_device\s*\(\s*env\s*\)", assigned[-1].strip()):
            report(m.start(), f"cuBLAS call on handle '{handle}' not taken from handle_for_current_device(env) "
                              "(which binds the current stream with cublasSetStream)")
        if not live[m.start()]:
            report(m.start(), "cuBLAS call outside a cuda::LibraryKernels scope")
    # The MPI backend's function pointers share these names (MPI_Recv as Recv_): host calls, no stream.
    nccl_calls = [] if name.endswith("_mpi.cpp") else re.finditer(
        r"\b(AllReduce|Broadcast|AllGather|ReduceScatter|Reduce|Send|Recv)_\s*\(", code)
    for m in nccl_calls:
        args, _ = split_args(code, m.end() - 1)
        if not args or args[-1] != "stream()":
            report(m.start(), "NCCL call without stream() (the current stream) as its stream")
        if not live[m.start()]:
            report(m.start(), "NCCL call outside a cuda::LibraryKernels scope")
    for m in re.finditer(r"(\.launch|\bcuLaunchKernel)\s*\(", code):
        args, end = split_args(code, m.end() - 1)
        if len(args) != 11:
            continue
        if "env.stream" not in args[8]:
            report(m.start(), f"cuLaunchKernel on stream '{args[8]}': pass env.stream")
        if not re.match(r"[\s\S]{0,80}?cuda::count_launch\s*\(\s*\)", code[end:]):
            report(m.start(), "cuLaunchKernel not followed by cuda::count_launch() (the capture self-check)")
    for m in re.finditer(r"\b(cudaLaunchKernel|cudaLaunchCooperativeKernel|cudaGraphLaunch)\s*\(", code):
        args, _ = split_args(code, m.end() - 1)
        position = 1 if m.group(1) == "cudaGraphLaunch" else 5
        if len(args) <= position or args[position] in IMPLICIT:
            report(m.start(), f"{m.group(1)} without an explicit stream")
    return problems


def check_tree(root):
    problems = []
    for top in SOURCE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file():
                problems += check_source(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
    return problems


def main(argv):
    root = pathlib.Path(argv[1]) if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent
    problems = check_tree(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_cuda_streams: {len(problems)} call(s) with an implicit stream", file=sys.stderr)
        return 1
    print("check_cuda_streams: every launch, CUB, memset, copy, cuBLAS and NCCL call takes an explicit stream")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
