#!/usr/bin/env python3
"""Fails, naming file:line, on any #include in cpp/ or kernels/ that points up or sideways in the
declared layer order, so that no two folders lean on each other (no folder cycle).

A file's folder is its directory under cpp/flowgrad/ (base, core, ...), "kernels" for anything
under kernels/, "bindings" for cpp/bindings/. An include may name its own folder or a folder of a
lower layer; folders that share a layer stay independent of each other. Includes in quotes are
read ("flowgrad/<folder>/...", "kernels/...", or a path relative to the including file); system
includes in angle brackets are not. A folder missing from LAYERS is an error too: a new folder
takes its place in the order on purpose.

Usage: check_layers.py [ROOT]   (ROOT defaults to the repository holding this script)
"""
import pathlib
import posixpath
import re
import sys

# Lowest first. base: dtype, half types, errors, device-error records, the stream handle, the
# thread pool, the op table; core: tensors, storage, devices, env; cuda: the device runtime
# (streams, allocator, captured graphs); kernels: CPU and CUDA compute, launched by ops.
LAYERS = [
    ("base",),
    ("core",),
    ("cuda",),
    ("kernels",),
    ("ops",),
    ("autograd",),
    ("io", "nn", "optim", "distributed"),
    ("observe",),
    ("graph",),
    ("plan",),
    ("bindings",),
]
RANK = {folder: rank for rank, group in enumerate(LAYERS) for folder in group}
SOURCE_DIRS = ("cpp", "kernels")
SUFFIXES = {".h", ".cuh", ".cpp", ".cu", ".def", ".in"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(rel):
    """The layer folder of a repository-relative path (a PurePosixPath), or None outside cpp/ and kernels/."""
    parts = rel.parts
    if parts[0] == "kernels":
        return "kernels"
    if parts[:2] == ("cpp", "bindings"):
        return "bindings"
    if parts[:2] == ("cpp", "flowgrad") and len(parts) > 3:
        return parts[2]
    return None


def included_folder(name, rel):
    """The folder an include names, seen from the file at `rel`."""
    first = name.split("/", 1)[0]
    if first == "flowgrad" and name.count("/") >= 2:
        return name.split("/")[1]
    if first == "kernels":
        return "kernels"
    return folder_of(pathlib.PurePosixPath(posixpath.normpath(posixpath.join(*rel.parts[:-1], name))))


def check_source(text, rel):
    """The violations in one file's text, as 'file:line: message' strings."""
    rel = pathlib.PurePosixPath(rel)
    here = folder_of(rel)
    if here is None:
        return []
    if here not in RANK:
        return [f"{rel}:1: folder '{here}' is not in the layer order (add it to LAYERS in scripts/check_layers.py)"]
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        target = included_folder(m.group(1), rel)
        if target is None or target == here:
            continue
        if target not in RANK:
            problems.append(f"{rel}:{number}: includes \"{m.group(1)}\" from folder '{target}', "
                            "which is not in the layer order")
        elif RANK[target] >= RANK[here]:
            where = "the same layer as" if RANK[target] == RANK[here] else "a layer above"
            problems.append(f"{rel}:{number}: {here} includes \"{m.group(1)}\": {target} is {where} {here}")
    return problems


def check_tree(root):
    problems = []
    for top in SOURCE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES:
                rel = path.relative_to(root).as_posix()
                problems += check_source(path.read_text(encoding="utf-8", errors="replace"), rel)
    return problems


def main(argv):
    root = pathlib.Path(argv[1]) if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[1]
    problems = check_tree(root)
    for p in problems:
        print(p)
    order = " < ".join("/".join(group) for group in LAYERS)
    if problems:
        print(f"{len(problems)} include(s) against the layer order {order}", file=sys.stderr)
        return 1
    print(f"every include follows the layer order {order}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
