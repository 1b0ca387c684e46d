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
ROW = re.compile(r"^(FG_OP|FG_UNARY|FG_BINARY|FG_UNARY_NODIFF|FG_BINARY_NODIFF)\(", re.M)


def split_arguments(text, start):
    """The comma-separated arguments of the call whose '(' is at text[start - 1], and where it ends;
    commas and parentheses inside string literals do not count."""
    args, depth, quoted, current, i = [], 0, False, "", start
    while True:
        c = text[i]
        if quoted:
            current += c
            if c == "\\":
                current += text[i + 1]
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted, current = True, current + c
        elif c == "(":
            depth, current = depth + 1, current + c
        elif c == ")" and depth:
            depth, current = depth - 1, current + c
        elif c == ")":
            return args + [current.strip()], i
        elif c == "," and not depth:
            args, current = args + [current.strip()], ""
        else:
            current += c
        i += 1


def op_rows(text):
    """(macro, name, groups, autocast, doc) for each row of ops.def, rows spanning lines included."""
    rows = []
    for m in ROW.finditer(text):
        args, _ = split_arguments(text, m.end())
        macro = m.group(1)
        if macro == "FG_OP":
            name, groups, autocast, doc = args[0], args[1], args[2], ""
        else:
            name, autocast = args[0], args[3]
            groups = "Elementwise" + (" | " + args[2] if args[2] != "None" else "")
            doc = " ".join(s.strip().strip('"') for s in re.findall(r'"(?:[^"\\]|\\.)*"', args[6]))
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


def core_paths():
    """{id(object): 'flowgrad._core[.sub].name'} for the compiled module's attributes, whose stubs
    (python/flowgrad/_core/*.pyi) carry their signatures and docstrings."""
    core = importlib.import_module("flowgrad._core")
    paths = {}
    for sub_name in [""] + [n for n in dir(core) if inspect.ismodule(getattr(core, n))]:
        sub = getattr(core, sub_name) if sub_name else core
        prefix = "flowgrad._core" + ("." + sub_name if sub_name else "")
        for name in dir(sub):
            if not name.startswith("_"):
                paths.setdefault(id(getattr(sub, name)), f"{prefix}.{name}")
    return paths


def reference_target(module_name, name, obj, core):
    """The path mkdocstrings should render for module_name.name: where the object is defined (a
    Python function or class, or a binding in the stubs), so that no alias needs resolving."""
    qualname = getattr(obj, "__qualname__", "")
    if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", "").startswith("flowgrad") \
            and "<" not in qualname and not obj.__module__.startswith("flowgrad._core"):
        return f"{obj.__module__}.{qualname}"
    if inspect.isbuiltin(obj) and getattr(obj, "__module__", "").startswith("flowgrad._core"):
        return f"{obj.__module__}.{obj.__name__}"
    if inspect.isclass(obj) and obj.__module__.startswith("flowgrad._core"):
        return f"{obj.__module__}.{qualname}"
    kind = type(obj)
    if kind.__module__.startswith("flowgrad") and not kind.__module__.startswith("flowgrad._core") \
            and not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
        return f"{kind.__module__}.{kind.__qualname__}"  # a namespace object (fg.backends.cuda): its class
    return core.get(id(obj), f"{module_name}.{name}")


def api_entries(module_name):
    """[(section, public name, target)] for module_name's public names; submodules as section None."""
    module = importlib.import_module(module_name)
    core, entries = core_paths(), []
    for name in public_names(module):
        obj = getattr(module, name)
        if inspect.ismodule(obj):
            entries.append((None, name, obj.__name__))
            continue
        section = "Classes" if inspect.isclass(obj) else "Functions" if callable(obj) else "Other objects"
        entries.append((section, name, reference_target(module_name, name, obj, core)))
    return entries


def api_markdown(module_name):
    entries = api_entries(module_name)
    submodules = [f"`{module_name}.{name}`" for section, name, _ in entries if section is None]
    out = ["Submodules: " + ", ".join(submodules) + ".", ""] if submodules else []
    for title in ("Classes", "Functions", "Other objects"):
        names = [(name, target) for section, name, target in entries if section == title]
        if not names:
            continue
        out += [f"## {title}", ""]
        for name, target in names:
            out += [f"<!-- name: {module_name}.{name} -->", "", f"::: {target}", ""]
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    if "<!-- op-table -->" in markdown:
        markdown = markdown.replace("<!-- op-table -->", op_table_markdown())
    return re.sub(r"<!-- api: ([\w.]+) -->", lambda m: api_markdown(m.group(1)), markdown)
