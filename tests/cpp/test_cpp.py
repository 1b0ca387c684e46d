"""Runs the GoogleTest binary of C++ internals that a FLOWGRAD_BUILD_TESTS=ON build (./dev.sh test)
installs beside the module; user wheels do not ship it."""
import pathlib
import subprocess

import pytest

import flowgrad

BINARY = pathlib.Path(flowgrad.__file__).parent / "_cpp_tests" / "flowgrad_cpp_tests"


@pytest.mark.skipif(not BINARY.exists(), reason="built without FLOWGRAD_BUILD_TESTS=ON (./dev.sh test turns it on)")
def test_cpp_internals():
    result = subprocess.run([str(BINARY)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "[  PASSED  ]" in result.stdout
