"""The compatibility corpus: training scripts written in PyTorch's idiom (scripts/), each run in a
subprocess with flowgrad under torch's names, only the import lines rewritten (IMPORTS), and,
when PyTorch is installed, run as written first: both start from PyTorch's initial weights and
their first losses must agree. Every flowgrad run must train (its loss falls)."""
import importlib.util
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

SCRIPTS = pathlib.Path(__file__).parent / "scripts"
CORPUS = sorted(p.name for p in SCRIPTS.glob("*.py") if p.name != "compat_harness.py")
HAVE_TORCH = importlib.util.find_spec("torch") is not None

# The whole port: each PyTorch import line and the flowgrad line that replaces it.
IMPORTS = {
    "import torch": "import flowgrad as torch",
    "import torch.nn as nn": "import flowgrad.nn as nn",
    "import torch.nn.functional as F": "import flowgrad.nn.functional as F",
    "from torch.utils.data import": "from flowgrad.data import",
}


def ported(source):
    """source with its torch import lines pointed at flowgrad; nothing else changes."""
    lines = []
    for line in source.splitlines():
        for theirs, ours in IMPORTS.items():
            if line == theirs or line.startswith(theirs + " "):
                line = ours + line[len(theirs):]
                break
        else:
            if re.match(r"\s*(import|from)\s+torch\b", line):
                raise AssertionError(f"an import the port does not know: {line!r}")
        lines.append(line)
    return "\n".join(lines) + "\n"


def run(script, tmp_path, env_extra):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPTS), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", **env_extra}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, f"{script.name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("COMPAT "))
    return json.loads(line[len("COMPAT "):])


def test_the_port_rewrites_only_import_lines():
    for name in CORPUS:
        source = (SCRIPTS / name).read_text()
        changed = [(a, b) for a, b in zip(source.splitlines(), ported(source).splitlines()) if a != b]
        assert changed and all(re.match(r"(import|from) ", a) for a, _ in changed), name
    with pytest.raises(AssertionError, match="an import the port does not know: 'import torch.distributed'"):
        ported("import torch.distributed\n")


@pytest.mark.parametrize("name", CORPUS)
def test_script_trains_under_flowgrad_and_matches_torch(name, tmp_path):
    script = tmp_path / name
    script.write_text(ported((SCRIPTS / name).read_text()))
    init = tmp_path / "init.npz"
    theirs = run(SCRIPTS / name, tmp_path, {"COMPAT_SAVE": str(init)}) if HAVE_TORCH else None
    ours = run(script, tmp_path, {"COMPAT_LOAD": str(init)} if HAVE_TORCH else {})
    losses = ours["losses"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0], losses
    if theirs is not None:
        assert ours["first_loss"] == pytest.approx(theirs["first_loss"], rel=1e-5), (ours, theirs)
