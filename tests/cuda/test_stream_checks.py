"""Streams by construction (review finding F1): scripts/check_cuda_streams.py fails on any launch,
CUB call, memset, copy, cuBLAS or NCCL call in cpp/ or kernels/ that takes an implicit stream.
The sources must pass it, and it must catch each kind of violation planted in a small source.
Needs no GPU."""
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_cuda_streams.py"


def scanner():
    spec = importlib.util.spec_from_file_location("check_cuda_streams", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_cuda_call_in_the_sources_takes_its_stream_explicitly():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "takes an explicit stream" in done.stdout


PLANTED = [
    ("k<<<grid, block>>>(x);", "kernel launch <<<grid, block>>> without a stream argument"),
    ("k<<<grid, block, 0>>>(x);", "without a stream argument"),
    ("k<<<grid, block, 0, 0>>>(x);", "kernel launch on stream '0': launches take kernel_stream(env)"),
    ("k<<<grid, block, 0, s>>>(x);", "kernel launch on stream 's'"),
    # the thread-local spelling from before kernels took a KernelEnv
    ("k<<<grid, block, 0, kernel_stream()>>>(x);", "kernel launch on stream 'kernel_stream()'"),
    ("cudaStream_t s = kernel_stream(env);", "kernel_stream(env) outside a <<<...>>> launch"),
    ("cudaMemset(p, 0, 4);", "synchronous cudaMemset runs on the legacy default stream"),
    ("cudaMemcpy(d, s, 4, cudaMemcpyDefault);", "synchronous cudaMemcpy"),
    ("cudaMemsetAsync(p, 0, 4);", "cudaMemsetAsync without an explicit stream"),
    ("cudaMemcpyAsync(d, s, 4, cudaMemcpyDefault, nullptr);", "cudaMemcpyAsync without an explicit stream"),
    ("cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n);", "CUB call without library_stream(env)"),
    ("cub::DeviceScan::ExclusiveSum(t, bytes, in, out, n, s);", "CUB call without library_stream(env)"),
    ("cub::DeviceScan::ExclusiveSum(t, bytes, in, out, n, library_stream(env));",
     "CUB call that queues kernels outside a cuda::LibraryKernels scope"),
    ("cublasHandle_t h = make(); cuda::LibraryKernels l; cublas().sgemm(h, a, b);",
     "cuBLAS call on handle 'h' not taken from handle_for_current_device(env)"),
    ("cublasHandle_t h = handle_for_current_device(env); cublas().gemm_ex(h, a, b);",
     "cuBLAS call outside a cuda::LibraryKernels scope"),
    ("cuda::LibraryKernels l; check(AllReduce_(d, d, n, t, op, comm_, nullptr), \"x\");",
     "NCCL call without stream()"),
    ("check(Broadcast_(d, d, n, t, 0, comm_, stream()), \"x\");", "NCCL call outside a cuda::LibraryKernels scope"),
    ("d.launch(f, 1, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr); cuda::count_launch();",
     "cuLaunchKernel on stream 'nullptr'"),
    ("d.launch(f, 1, 1, 1, 256, 1, 1, 0, reinterpret_cast<void*>(cuda::launch_stream()), params, nullptr); "
     "cuda::count_launch();", "cuLaunchKernel on stream 'reinterpret_cast<void*>(cuda::launch_stream())'"),
    ("d.launch(f, 1, 1, 1, 256, 1, 1, 0, reinterpret_cast<void*>(env.stream), params, nullptr);",
     "cuLaunchKernel not followed by cuda::count_launch()"),
    ("cudaGraphLaunch(exec, 0);", "cudaGraphLaunch without an explicit stream"),
]


@pytest.mark.parametrize("line,message", PLANTED, ids=[m for _, m in PLANTED])
def test_the_scanner_names_file_and_line_of_a_planted_violation(line, message):
    source = "// a file\nvoid f() {\n  " + line + "\n}\n"
    problems = scanner().check_source(source, "kernels/planted_cuda.cu")
    assert any(p.startswith("kernels/planted_cuda.cu:3: ") and message in p for p in problems), problems


def test_the_scanner_accepts_explicit_streams_and_ignores_comments_and_strings():
    source = '''
// k<<<1, 2>>>(x);  cudaMemset(p, 0, 4);
/* cub::DeviceScan::ExclusiveSum(nullptr, b, i, o, n); */
const char* text = "k<<<1, 2>>>(x); cudaMemcpy(d, s, 4, k);";
const char* raw = R"(cudaMemset(p, 0, 4); k<<<1, 2>>>(x);)";
void f() {
  k<<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(x, n);
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n, library_stream(env));
  {
    cuda::LibraryKernels library(env.stream);
    cub::DeviceScan::ExclusiveSum(temp, bytes, in, out, n, library_stream(env));
  }
  check(cudaMemsetAsync(p, 0, 4, library_stream(env)), "cudaMemsetAsync");
  cublasHandle_t h = handle_for_current_device(env);
  cuda::LibraryKernels library(env.stream);
  cublas().sgemm(h, a, b);
  d.launch(f, 1, 1, 1, 256, 1, 1, 0, reinterpret_cast<void*>(env.stream), params, nullptr);
  cuda::count_launch();
}
'''
    assert scanner().check_source(source, "x.cu") == []


def test_the_scanner_fails_a_tree_with_a_planted_launch(tmp_path):
    (tmp_path / "kernels" / "demo").mkdir(parents=True)
    (tmp_path / "cpp").mkdir()
    (tmp_path / "kernels" / "demo" / "demo_cuda.cu").write_text(
        "#include <cuda_runtime.h>\n__global__ void k(float* x) {}\nvoid run(float* x) {\n  k<<<1, 32>>>(x);\n}\n")
    (tmp_path / "cpp" / "fine.cpp").write_text("int main() { return 0; }\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "kernels/demo/demo_cuda.cu:4: kernel launch <<<1, 32>>> without a stream argument (pass kernel_stream(env))"]
    assert "1 call(s) with an implicit stream" in done.stderr
