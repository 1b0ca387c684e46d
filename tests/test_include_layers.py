"""No folder cycle: scripts/check_layers.py fails, naming file:line, on any #include in cpp/ or
kernels/ that points up or sideways in the declared layer order (base < core < cuda < kernels <
ops < ...). The sources must pass it, and it must catch violations planted in a small tree."""
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_layers.py"


def checker():
    spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(root=None):
    return subprocess.run([sys.executable, str(SCRIPT)] + ([str(root)] if root else []), capture_output=True, text=True)


def test_every_include_in_the_sources_follows_the_layer_order():
    done = run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every include follows the layer order base < core < cuda < kernels < ops" in done.stdout


def test_every_folder_of_the_sources_has_a_layer():
    folders = {p.name for p in (ROOT / "cpp" / "flowgrad").iterdir() if p.is_dir()} | {"kernels", "bindings"}
    assert sorted(folders - set(checker().RANK)) == []


def test_the_ground_floor_includes_nothing_above_it():
    for path in (ROOT / "cpp" / "flowgrad" / "base").iterdir():
        for line in path.read_text().splitlines():
            if line.startswith('#include "'):
                assert line.startswith('#include "flowgrad/base/'), f"{path.name}: {line}"


PLANTED = [
    ("kernels/demo/demo.h", '#include "flowgrad/ops/ops.h"', 'kernels includes "flowgrad/ops/ops.h": ops is a layer above kernels'),
    ("cpp/flowgrad/base/x.h", '#include "flowgrad/core/tensor.h"', "core is a layer above base"),
    ("cpp/flowgrad/core/x.cpp", '#include "kernels/common/launch.cuh"', "kernels is a layer above core"),
    ("cpp/flowgrad/cuda/x.cu", '#include "kernels/linalg/gemm.h"', "kernels is a layer above cuda"),
    ("cpp/flowgrad/ops/x.cpp", '#  include "flowgrad/autograd/autograd.h"', "autograd is a layer above ops"),
    ("cpp/flowgrad/nn/x.cpp", '#include "flowgrad/optim/optim.h"', "optim is the same layer as nn"),
    ("cpp/flowgrad/core/x.h", '#include "flowgrad/bindings/common.h"', "bindings is a layer above core"),
    ("cpp/flowgrad/plan/x.cpp", '#include "../../bindings/common.h"', "bindings is a layer above plan"),
    ("cpp/flowgrad/ops/x.cpp", '#include "flowgrad/attic/old.h"', "from folder 'attic', which is not in the layer order"),
    ("cpp/flowgrad/attic/x.cpp", '#include "flowgrad/base/dtype.h"', "folder 'attic' is not in the layer order"),
]


@pytest.mark.parametrize("path,line,message", PLANTED, ids=[m for _, _, m in PLANTED])
def test_the_checker_names_file_and_line_of_a_planted_include(path, line, message):
    source = "// a file\n#include <vector>\n" + line + "\n"
    problems = checker().check_source(source, path)
    assert len(problems) == 1, problems
    line_number = 1 if path.startswith("cpp/flowgrad/attic/") else 3  # an unknown folder is named at line 1
    assert problems[0].startswith(f"{path}:{line_number}: ") and message in problems[0], problems


def test_the_checker_accepts_includes_down_and_within_a_folder_and_ignores_comments():
    source = '''// #include "flowgrad/plan/plan.h"
#include <cuda_runtime.h>
#include "flowgrad/base/errors.h"
#include "flowgrad/core/tensor.h"
#include "flowgrad/cuda/stream.h"
#include "kernels/common/launch.cuh"
#include "exact_math.h"
'''
    assert checker().check_source(source, "kernels/common/x.cu") == []
    assert checker().check_source('#include "flowgrad/plan/plan.h"\n#include "common.h"\n', "cpp/bindings/x.cpp") == []


def test_the_checker_fails_a_tree_with_a_planted_cycle(tmp_path):
    (tmp_path / "cpp" / "flowgrad" / "core").mkdir(parents=True)
    (tmp_path / "kernels" / "demo").mkdir(parents=True)
    (tmp_path / "cpp" / "flowgrad" / "core" / "tensor.h").write_text(
        '#pragma once\n#include "flowgrad/base/dtype.h"\n#include "kernels/demo/demo.h"\n')
    (tmp_path / "kernels" / "demo" / "demo.h").write_text('#pragma once\n#include "flowgrad/core/tensor.h"\n')
    done = run(tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        'cpp/flowgrad/core/tensor.h:3: core includes "kernels/demo/demo.h": kernels is a layer above core']
    assert "1 include(s) against the layer order" in done.stderr
