"""The build itself: CUDA compiled whenever the toolkit exists, a real BLAS linked."""
import importlib.metadata
import pathlib
import shutil

import pytest

import flowgrad as fg


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
    cpuinfo = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    if "avx2" not in flags:
        pytest.skip("this CPU has no AVX2: an older OpenBLAS kernel set is the right one")
    assert config["blas_core"] not in PRE_AVX2_CORES, config["blas_config"]


def test_metadata_names_the_license():
    assert importlib.metadata.metadata("flowgrad")["License-Expression"] == "Apache-2.0"
