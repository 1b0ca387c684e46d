"""The .pyi stubs beside the extension list every public binding (regenerate with
pybind11-stubgen flowgrad._core when this fails)."""
import pathlib

import flowgrad as fg

STUBS = pathlib.Path(fg.__file__).parent / "_core"


def test_stubs_cover_every_public_binding():
    text = (STUBS / "__init__.pyi").read_text()
    missing = [n for n in dir(fg._core) if not n.startswith("_") and n not in text]
    assert not missing, f"names missing from _core/__init__.pyi: {missing}"
    functional = (STUBS / "functional.pyi").read_text()
    missing = [n for n in dir(fg._core.functional) if not n.startswith("_") and f"def {n}(" not in functional]
    assert not missing, f"names missing from _core/functional.pyi: {missing}"
    flow = (STUBS / "flow.pyi").read_text()
    missing = [n for n in dir(fg._core.flow) if not n.startswith("_") and f"class {n}(" not in flow]
    assert not missing, f"names missing from _core/flow.pyi: {missing}"


def test_every_public_binding_has_a_docstring():
    undocumented = []
    owners = ((fg._core, ""), (fg._core.functional, "functional."), (fg._core.Tensor, "Tensor."),
              (fg._core.Graph, "Graph."), (fg._core.FlowBuilder, "FlowBuilder."), (fg._core.Trend, "Trend."),
              (fg._core.TrendGroup, "TrendGroup."))
    for owner, prefix in owners:
        for name in dir(owner):
            if name.startswith("_"):
                continue
            obj = getattr(owner, name)
            if callable(obj) and not isinstance(obj, type) and not (obj.__doc__ or "").strip():
                undocumented.append(prefix + name)
    assert not undocumented, undocumented
