"""The build itself: CUDA compiled whenever the toolkit exists, a real BLAS linked."""
import shutil

import pytest

import flowgrad as fg


def test_cuda_is_built_when_nvcc_exists():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: this machine has no CUDA toolkit to build with")
    assert fg.cuda.built_with_cuda(), "nvcc is on PATH but the build skipped the CUDA sources"


def test_import_works_without_a_gpu_and_reports_why():
    # On machines with a GPU this is trivially true; without one, import and queries still work.
    count = fg.cuda.device_count()
    assert count >= 0
    if count == 0:
        assert fg.cuda.unavailable_reason()


def test_blas_is_linked():
    assert fg.blas_name() != "none", "no BLAS found at build time: matmul uses the slow fallback"
