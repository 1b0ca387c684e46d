"""The build itself: CUDA compiled whenever the toolkit exists, a real BLAS linked."""
import importlib.metadata
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


def test_metadata_names_the_license():
    assert importlib.metadata.metadata("flowgrad")["License-Expression"] == "Apache-2.0"
