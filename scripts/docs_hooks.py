"""MkDocs hooks (mkdocs.yml `hooks:`) that generate parts of pages from the code, so they cannot drift.

`<!-- op-table -->` becomes the op table, parsed from cpp/flowgrad/base/ops.def (no build needed).
`<!-- api: MODULE -->` becomes one mkdocstrings directive per public name of MODULE (its `__all__`,
else its names without a leading underscore), grouped into classes, functions and other objects;
submodules are left to their own pages. This imports flowgrad, so the docs are built after it
(`./dev.sh docs` and `./dev.sh test` build it first).
"""
import importlib
import inspect
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPS_DEF = ROOT / "cpp" / "flowgrad" / "base" / "ops.def"
ROW = re.compile(r"^(FG_OP|FG_UNARY|FG_BINARY|FG_UNARY_NODIFF|FG_BINARY_NODIFF)\((.*)\)\s*$")


def op_rows(text):
    """(macro, name, groups, autocast, doc) for each row of ops.def."""
    rows = []
    for line in text.splitlines():
        m = ROW.match(line.strip())
        if not m:
            continue
        macro, args = m.groups()
        doc = ""
        if args.endswith('"'):
            args, doc = args[:args.index('"')].rstrip(", "), args[args.index('"') + 1:-1]
        fields = [f.strip() for f in args.split(",")]
        if macro == "FG_OP":
            name, groups, autocast = fields[0], fields[1], fields[2]
        else:
            name, groups, autocast = fields[0], "Elementwise | " + fields[2] if fields[2] != "None" else "Elementwise", fields[3]
        rows.append((macro, name, groups.replace("None", "").strip(" |"), autocast, doc))
    return rows


def op_table_markdown():
    rows = op_rows(OPS_DEF.read_text())
    out = [f"{len(rows)} ops, in the order of `cpp/flowgrad/base/ops.def`.", "",
           "| op | row | groups | autocast | doc |", "| --- | --- | --- | --- | --- |"]
    for macro, name, groups, autocast, doc in rows:
        out.append(f"| `{name}` | `{macro}` | {groups.replace('|', ',')} | {autocast} | {doc.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def public_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    return sorted(set(names))


def api_markdown(module_name):
    module = importlib.import_module(module_name)
    classes, functions, others, submodules = [], [], [], []
    for name in public_names(module):
        obj = getattr(module, name)
        if inspect.ismodule(obj):
            submodules.append(name)
        elif inspect.isclass(obj):
            classes.append(name)
        elif callable(obj):
            functions.append(name)
        else:
            others.append(name)
    out = []
    if submodules:
        out += ["Submodules: " + ", ".join(f"`{module_name}.{n}`" for n in submodules) + ".", ""]
    for title, names in (("Classes", classes), ("Functions", functions), ("Other objects", others)):
        if not names:
            continue
        out += [f"## {title}", ""]
        for name in names:
            out += [f"::: {module_name}.{name}", ""]
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    if "<!-- op-table -->" in markdown:
        markdown = markdown.replace("<!-- op-table -->", op_table_markdown())
    return re.sub(r"<!-- api: ([\w.]+) -->", lambda m: api_markdown(m.group(1)), markdown)
