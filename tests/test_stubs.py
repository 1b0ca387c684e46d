"""The seam between Python and the compiled engine: the committed stubs of flowgrad._core are
exactly what scripts/gen_stubs.py generates from the built module (run it after changing a
binding), they parse, they type a user's script cleanly, and every public binding documents
itself (the stubs carry those docstrings)."""
import ast
import importlib.util
import inspect
import os
import pathlib
import subprocess
import sys

import pytest

import flowgrad as fg

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUBS = ROOT / "python" / "flowgrad" / "_core"
needs_stubgen = pytest.mark.skipif(importlib.util.find_spec("pybind11_stubgen") is None,
                                   reason="pybind11-stubgen is not installed (pip install '.[test]')")
needs_mypy = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy is not installed (pip install '.[test]')")


def _gen_stubs():
    spec = importlib.util.spec_from_file_location("gen_stubs", ROOT / "scripts" / "gen_stubs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_stubgen
def test_committed_stubs_are_a_fresh_generation(tmp_path):
    written = _gen_stubs().generate(tmp_path)
    fresh = {p.relative_to(tmp_path / "flowgrad" / "_core"): p.read_text() for p in written}
    committed = {p.relative_to(STUBS): p.read_text() for p in STUBS.rglob("*.pyi")}
    assert sorted(fresh) == sorted(committed), "run scripts/gen_stubs.py: the stub files differ"
    stale = [str(name) for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"run scripts/gen_stubs.py after building: {stale} differ from the compiled module"


def test_every_stub_is_generated_and_parses():
    stubs = sorted((ROOT / "python" / "flowgrad").rglob("*.pyi"))
    assert STUBS / "__init__.pyi" in stubs
    for stub in stubs:
        text = stub.read_text()
        assert text.startswith(_gen_stubs().HEADER), f"{stub.name} lacks the generated-file header"
        ast.parse(text, filename=str(stub))


def test_the_stubs_know_every_public_binding():
    tree = ast.parse((STUBS / "__init__.pyi").read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    defined |= {a.asname or a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    missing = [n for n in dir(fg._core) if not n.startswith("_") and n not in defined]
    assert not missing, f"names missing from _core/__init__.pyi: {missing}"


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("mypy_cache")


def _mypy(script, cache):
    """mypy's report on `script`, with flowgrad (its stubs included) read from the source tree."""
    env = dict(os.environ, MYPYPATH=str(ROOT / "python"))
    return subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary",
                           "--cache-dir", str(cache), str(script)],
                          capture_output=True, text=True, env=env, cwd=cache)


@needs_mypy
def test_mypy_accepts_a_user_script(mypy_cache):
    done = _mypy(ROOT / "tests" / "typing" / "user_script.py", mypy_cache)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_mypy
def test_mypy_finds_a_wrong_call(tmp_path, mypy_cache):
    """The check above can fail: the stubs give mypy real signatures."""
    script = tmp_path / "wrong.py"
    script.write_text("import flowgrad as fg\nfg.manual_seed('zero')\nt: fg.Tensor = fg.zeros(2, 3)\nt.no_such_method()\n")
    done = _mypy(script, mypy_cache)
    assert done.returncode == 1
    assert 'wrong.py:2: error: Argument 1 to "manual_seed" has incompatible type "str"' in done.stdout, done.stdout
    assert 'wrong.py:4: error: "Tensor" has no attribute "no_such_method"' in done.stdout, done.stdout


def _public_callables(owner, prefix, seen):
    for name, obj in inspect.getmembers(owner):
        if name.startswith("_") or id(obj) in seen:
            continue
        if inspect.ismodule(obj) and obj.__name__.startswith("flowgrad._core"):
            seen.add(id(obj))
            yield from _public_callables(obj, f"{prefix}{name}.", seen)
        elif isinstance(obj, type) and obj.__module__.startswith("flowgrad._core"):
            seen.add(id(obj))
            yield prefix + name, obj
            yield from _public_callables(obj, f"{prefix}{name}.", seen)
        elif callable(obj) or isinstance(obj, property):
            yield prefix + name, obj


def _own_doc(name, obj):
    """The docstring a binding was given, without the signature lines pybind11 puts first."""
    lines = (getattr(obj, "__doc__", None) or "").splitlines()
    short = name.rsplit(".", 1)[-1]
    kept = [line for line in lines if line.strip() != "Overloaded function."
            and not line.strip().lstrip("0123456789. ").startswith(short + "(")]
    return "\n".join(kept).strip()


def test_every_public_binding_has_a_docstring():
    pybind11s_own = {"dtype.name", "dtype.value"}  # every py::enum_ has them, undocumented
    undocumented = [name for name, obj in _public_callables(fg._core, "", set())
                    if not _own_doc(name, obj) and name not in pybind11s_own]
    assert not undocumented, f"bindings without a docstring: {undocumented}"


def test_the_docstring_check_sees_a_missing_one():
    assert _own_doc("f", type("X", (), {"__doc__": "f(self: X, n: int) -> None\n"})) == ""
    assert _own_doc("f", type("X", (), {"__doc__": "f(self: X) -> None\n\nDoes it."})) == "Does it."
