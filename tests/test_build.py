"""The build itself: CUDA compiled whenever the toolkit exists, a real BLAS linked."""
import importlib.metadata
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import flowgrad as fg

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_cuda_is_built_when_nvcc_exists():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: this machine has no CUDA toolkit to build with")
    if fg.build_config()["cuda_setting"] == "OFF":
        pytest.skip("this is the CPU-only build (FLOWGRAD_CUDA=OFF was asked for)")
    assert fg.cuda.built_with_cuda(), "nvcc is on PATH but the build skipped the CUDA sources"


def test_import_works_without_a_gpu_and_reports_why():
    # On machines with a GPU this is trivially true; without one, import and queries still work.
    count = fg.cuda.device_count()
    assert count >= 0
    if count == 0:
        assert fg.cuda.unavailable_reason()


def test_blas_is_linked():
    assert fg.blas_name() != "none", "no BLAS found at build time: matmul uses the slow fallback"


def test_every_openblas_call_reaches_the_bundled_library():
    """The bundled scipy-openblas32 names its symbols scipy_*: a file calling OpenBLAS without the
    renaming definitions (CMakeLists.txt) links to an absent weak symbol and silently does nothing
    (the thread pool's SingleThreadedBlas did, after it moved to base/parallel.cpp)."""
    if "scipy-openblas32" not in fg.blas_name():
        pytest.skip(f"BLAS is {fg.blas_name()!r}, not the bundled scipy-openblas32")
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    core = next(pathlib.Path(fg.__file__).parent.glob("_core*.so"))
    symbols = subprocess.run(["nm", "-D", "--undefined-only", str(core)], capture_output=True, text=True,
                             check=True).stdout.split()
    unrenamed = sorted({s for s in symbols if re.fullmatch(r"(openblas_\w+|[sd]gemm_)", s)})
    assert not unrenamed, f"OpenBLAS calls that reach no library: {unrenamed}"


def test_build_config_reports_the_setting():
    config = fg.build_config()
    assert config["cuda_setting"] in ("AUTO", "ON", "OFF")
    assert config["cuda"] == fg.cuda.built_with_cuda()
    if config["cuda_setting"] == "OFF":
        assert not config["cuda"]
    assert config["blas"] == fg.blas_name()
    assert config["blas_setting"] in ("AUTO", "scipy-openblas32", "system", "OFF")
    if config["blas"] == "none":
        assert config["blas_library"] == config["blas_core"] == ""
    else:
        assert config["blas_library"]  # the file linked, e.g. libscipy_openblas.so


# OpenBLAS kernel sets older than AVX2 ("Katmai" is the generic one). "Prescott" is what an OpenBLAS
# too old to know a CPU model falls back to (Debian 12's 0.3.21 on recent Xeons), at a fraction of
# the speed (benchmarks/results/blas-choice-*.json).
PRE_AVX2_CORES = {"Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Core2", "Penryn", "Dunnington", "Nehalem",
                  "Atom", "Sandybridge"}


def test_openblas_kernels_match_the_cpu():
    config = fg.build_config()
    if not config["blas_core"]:
        pytest.skip(f"the BLAS linked ({config['blas']}) does not report the CPU core its kernels are for")
    if config["blas_library"] != "libscipy_openblas.so":
        pytest.skip(f"a system BLAS is linked ({config['blas_library']}: FLOWGRAD_BLAS=system, or scipy-openblas32 "
                    "was not importable at build time); its CPU detection is the distribution's")
    if "avx2" not in config["isa_levels"]:  # flowgrad's own reading of cpuid (on an emulated CPU too)
        pytest.skip("this CPU has no AVX2: an older OpenBLAS kernel set is the right one")
    if os.environ.get("OPENBLAS_CORETYPE") or config["isa"] != config["isa_levels"][-1]:
        pytest.skip("OPENBLAS_CORETYPE, or a forced FLOWGRAD_ISA (tests/test_isa.py), picks the kernel set")
    assert config["blas_core"] not in PRE_AVX2_CORES, config["blas_config"]


def test_metadata_names_the_license():
    assert importlib.metadata.metadata("flowgrad")["License-Expression"] == "Apache-2.0"


def test_build_config_says_where_cuda_came_from():
    config = fg.build_config()
    assert config["cuda_toolkit_setting"] in ("AUTO", "system", "pypi")
    if config["cuda"]:
        assert config["cuda_compiler"] in ("system", "pypi")
        assert re.fullmatch(r"\d+\.\d+\.\d+", config["cuda_compiler_version"]), config["cuda_compiler_version"]
        assert config["cuda_left_out"] == ""
    else:
        assert config["cuda_compiler"] == "none"
        assert config["cuda_compiler_version"] == ""
    if config["cuda_toolkit_setting"] == "pypi" and config["cuda"]:
        assert config["cuda_compiler"] == "pypi"


def test_cpu_only_build_names_the_reason_and_the_fix():
    if fg.cuda.built_with_cuda():
        pytest.skip("this build compiled CUDA: the CPU-only reason does not apply")
    reason = fg.cuda.unavailable_reason()
    assert reason.startswith("flowgrad was built without CUDA")
    assert "FLOWGRAD_CUDA=pypi pip install '.[cuda]'" in reason
    left_out = fg.build_config()["cuda_left_out"]
    if left_out:  # the build machine had a driver or GPU but no compiler: both name what was found
        assert left_out.startswith("CUDA left out: an NVIDIA driver or GPU was found (")
        assert "FLOWGRAD_CUDA=pypi pip install" in left_out
        assert left_out in reason


def run_driver_probe(path):
    result = subprocess.run(["cmake", "-P", str(ROOT / "cmake" / "nvidia_driver.cmake")], capture_output=True, text=True,
                            env={**os.environ, "PATH": path}, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("nvidia driver signs:", 1)[1].strip()


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not on PATH")
def test_driver_probe_finds_nvidia_smi(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    assert str(smi) in run_driver_probe(f"{tmp_path}:{os.environ['PATH']}").split(";")
    assert str(smi) not in run_driver_probe(os.environ["PATH"])


def make_wheel_tree(root, files):
    for name in files:
        path = root / "nvidia" / "cu13" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return root / "nvidia" / "cu13"


def test_cuda_wheel_finder_needs_every_part(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import find_cuda_wheels
    finally:
        sys.path.pop(0)
    complete = make_wheel_tree(tmp_path / "complete", find_cuda_wheels.NEEDED)
    assert find_cuda_wheels.cuda_wheel_root([str(tmp_path / "empty"), str(tmp_path / "complete")]) == \
        os.path.realpath(complete)
    make_wheel_tree(tmp_path / "partial", [f for f in find_cuda_wheels.NEEDED if "cicc" not in f])
    assert find_cuda_wheels.cuda_wheel_root([str(tmp_path / "partial")]) is None
    assert "lacks nvvm/bin/cicc" in capsys.readouterr().err
    assert find_cuda_wheels.cuda_wheel_root([str(tmp_path / "empty")]) is None


def test_demo_and_pip_install_build_no_cpp_tests():
    """The GoogleTest binary is test-only: `pip install .` leaves it out (the CMake default) and so does
    `./dev.sh demo`; only `./dev.sh test` and `./dev.sh build` (a developer's build) turn it on."""
    root = pathlib.Path(__file__).resolve().parent.parent
    assert re.search(r'option\(FLOWGRAD_BUILD_TESTS "[^"]*" OFF\)', (root / "CMakeLists.txt").read_text())
    dev = (root / "dev.sh").read_text()
    demo = dev[dev.index("\n  demo)"):dev.index("\n    ;;", dev.index("\n  demo)"))]
    assert re.search(r"BUILD_TESTS=\$\{BUILD_TESTS:-OFF\} LTO=\$\{LTO:-OFF\} build install", demo), demo
