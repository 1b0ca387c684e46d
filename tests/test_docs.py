"""The documentation cannot drift: the Python code blocks of docs/ and of the README run, every
public name has an API reference page, the op table page parses every row of ops.def, and the
README stays a short entry point.

Code blocks: every ```python block of a page runs, in order, in one fresh interpreter per page
(in a temporary directory). A comment on the lines just before a block changes that:
  <!-- docs-test: skip REASON -->   the block is a fragment (REASON says what it lacks);
  <!-- docs-test: cuda -->          the block runs only where a CUDA device is usable;
  <!-- docs-test: setup             hidden code run before the block (the rest of the comment).
  ... -->
"""
import importlib
import pathlib
import re
import subprocess
import sys

import pytest

import flowgrad as fg

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "scripts"))
import docs_hooks  # noqa: E402

FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
DIRECTIVE = re.compile(r"<!-- docs-test: (skip|cuda|setup)(.*?)-->$", re.S)
PAGES = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]
REFERENCE_MODULES = ["flowgrad", "flowgrad.nn", "flowgrad.nn.functional", "flowgrad.optim", "flowgrad.data",
                     "flowgrad.cuda", "flowgrad.distributed"]


def code_blocks(text):
    """(line, code, directives) for each column-0 ```python block of a page; directives maps skip, cuda
    and setup to their text, from the comments on the lines just before the block."""
    blocks = []
    for m in FENCE.finditer(text):
        before, directives = text[:m.start()].rstrip("\n"), {}
        while before.endswith("-->") and "<!--" in before:
            start = before.rindex("<!--")
            d = DIRECTIVE.match(before[start:])
            if not d:
                break
            directives[d.group(1)] = d.group(2).strip()
            before = before[:start].rstrip("\n")
        blocks.append((text.count("\n", 0, m.start()) + 1, m.group(1), directives))
    return blocks


def page_script(page):
    """The page's runnable blocks as one script (with markers naming each block's line), or None."""
    parts = []
    for line, code, directives in code_blocks(page.read_text()):
        if "skip" in directives:
            assert directives["skip"], f"{page.name}:{line}: a skipped block must say why"
            continue
        if "cuda" in directives and not fg.cuda.is_available():
            continue
        setup = directives["setup"] + "\n" if "setup" in directives else ""
        parts.append(f"# --- {page.relative_to(ROOT)}:{line}\n{setup}{code}")
    return "\n".join(parts) if parts else None


RUNNABLE = [p for p in PAGES if page_script(p)]


@pytest.mark.parametrize("page", RUNNABLE, ids=[str(p.relative_to(ROOT)) for p in RUNNABLE])
def test_code_blocks_run(page, tmp_path):
    script = page_script(page)
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    if result.returncode != 0:
        failing = [m for m in re.finditer(r'File "<string>", line (\d+)', result.stderr)]
        where = ""
        if failing:
            n = int(failing[-1].group(1))
            markers = [ln for ln in script.splitlines()[:n] if ln.startswith("# --- ")]
            where = markers[-1][6:] if markers else ""
        pytest.fail(f"a code block of {page.name} failed (block at {where}):\n{result.stderr[-3000:]}")


def test_every_guide_page_has_a_block_that_runs():
    guides = sorted((DOCS / "guide").glob("*.md")) + [DOCS / "getting-started.md"]
    without = [p.name for p in guides
               if not any("skip" not in d and "cuda" not in d for _, _, d in code_blocks(p.read_text()))]
    assert not without, f"guide pages whose every code block is skipped or CUDA-only: {without}"


def test_code_block_directives_parse():
    text = ("x\n<!-- docs-test: skip needs a dataset -->\n```python\nA\n```\n<!-- docs-test: cuda -->\n"
            "<!-- docs-test: setup\nimport os\n-->\n```python\nB\n```\n<!-- a plain comment -->\n```python\nC\n```\n")
    assert [(line, code, d) for line, code, d in code_blocks(text)] == [
        (3, "A\n", {"skip": "needs a dataset"}), (10, "B\n", {"cuda": "", "setup": "import os"}), (14, "C\n", {})]


def documented_names():
    """Every 'module.name' that a reference page's <!-- api: module --> marker renders, and the modules."""
    names, modules = set(), set()
    for page in (DOCS / "reference").glob("*.md"):
        for module in re.findall(r"<!-- api: ([\w.]+) -->", page.read_text()):
            modules.add(module)
            names.update(re.findall(r"^<!-- name: ([\w.]+) -->\n\n::: [\w.]+$", docs_hooks.api_markdown(module), re.M))
    return names, modules


def test_api_reference_lists_every_public_name():
    names, modules = documented_names()
    missing = []
    for module_name in REFERENCE_MODULES:
        assert module_name in modules, f"no reference page has <!-- api: {module_name} -->"
        module = importlib.import_module(module_name)
        for name in docs_hooks.public_names(module):
            obj = getattr(module, name)
            if isinstance(obj, type(fg)):
                if obj.__name__.startswith("flowgrad.") and not {obj.__name__, f"{module_name}.{name}"} & modules:
                    missing.append(f"{module_name}.{name} (module {obj.__name__}: no page)")
            elif f"{module_name}.{name}" not in names:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"public names on no API reference page: {missing}"


def test_op_table_page_has_every_registered_op():
    rows = docs_hooks.op_rows((ROOT / "cpp" / "flowgrad" / "base" / "ops.def").read_text())
    registry = fg._core._op_registry()
    registered = {op["name"] for op in registry}
    assert [r[1] for r in rows] and {r[1] for r in rows} == registered
    assert "<!-- op-table -->" in (DOCS / "dev" / "ops.md").read_text()


def test_readme_is_a_short_entry_point():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 15_000, f"README.md is {len(text.encode())} bytes; move detail into docs/"
    assert not re.search(r"20\d\d-\d\d-\d\d", text), "dated measurements belong on docs/benchmarks.md"
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert links, "the README links into docs/"
    assert all((ROOT / link).is_file() for link in links), [link for link in links if not (ROOT / link).is_file()]


def test_docs_pages_are_all_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages and not {p for p in pages if p not in nav}


def test_guide_pages_stay_short():
    sizes = {p.name: len(p.read_bytes()) for p in (DOCS / "guide").glob("*.md")}
    assert sizes and all(size <= 15_000 for size in sizes.values()), {n: s for n, s in sizes.items() if s > 15_000}
