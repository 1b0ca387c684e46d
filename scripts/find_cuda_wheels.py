"""Prints the root of PyPI's CUDA 13 toolkit wheels (site-packages/nvidia/cu13) when the running
Python has nvidia-cuda-nvcc installed with the headers and libraries a flowgrad build needs, else
nothing. CMakeLists.txt runs it with the build's Python when the system has no nvcc."""
import os
import sys

# What a build needs from the wheels: nvcc (nvidia-cuda-nvcc, with nvidia-nvvm's cicc), the runtime
# (nvidia-cuda-runtime), CUB (nvidia-cuda-cccl) and cuBLAS's header (nvidia-cublas).
NEEDED = ["bin/nvcc", "nvvm/bin/cicc", "include/cuda_runtime.h", "lib/libcudart_static.a",
          "include/cccl/cub/cub.cuh", "include/cublas_v2.h"]


def cuda_wheel_root(paths):
    for entry in paths:
        root = os.path.join(entry or ".", "nvidia", "cu13")
        if os.path.isfile(os.path.join(root, "bin", "nvcc")):
            missing = [f for f in NEEDED if not os.path.exists(os.path.join(root, f))]
            if missing:
                print(f"find_cuda_wheels: {root} lacks {', '.join(missing)} (pip install '.[cuda]' "
                      "with FLOWGRAD_CUDA=pypi installs every wheel needed)", file=sys.stderr)
                return None
            return os.path.realpath(root)
    return None


if __name__ == "__main__":
    root = cuda_wheel_root(sys.path)
    if root:
        print(root)
