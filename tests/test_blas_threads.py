"""OpenBLAS's threaded GEMMs on flowgrad's thread pool (base/parallel.cpp, FLOWGRAD_BLAS_THREADS):
right values at every thread count, no deadlock from several threads or after a fork, and
OpenBLAS's own threads left idle. The nested case (a GEMM inside a parallel_for body) is in
tests/cpp/test_parallel_blas.cpp."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import flowgrad as fg
from conftest import run_isolated, run_threads

ON_POOL = fg.build_config()["blas_threads"] == "pool"
needs_pool = pytest.mark.skipif(not ON_POOL, reason=f"the BLAS linked ({fg.blas_name()}) runs its own threads: "
                                "no OpenBLAS >= 0.3.28 threads callback, or FLOWGRAD_BLAS_THREADS=openblas")

# (M, K, N): odd and tiny shapes, and ones OpenBLAS splits over its threads (>= 256 cubed).
SHAPES = [(1, 1, 1), (45, 65, 33), (0, 5, 7), (256, 256, 256), (257, 300, 129), (1024, 128, 512), (512, 512, 512),
          (37, 1000, 333), (1000, 90, 20), (96, 1024, 128)]


def reference(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemms_match_numpy_after_thread_count_changes(dtype, rng, restore_threads):
    for threads in (2, 1, 3, 2):
        fg.set_num_threads(threads)
        check_gemms(dtype, rng)


def check_gemms(dtype, rng):
    for m, k, n in SHAPES:
        a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
        got = fg.matmul(fg.tensor(a), fg.tensor(b)).numpy()
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(got, reference(a, b), rtol=tol, atol=tol * np.sqrt(k), err_msg=f"{m}x{k}x{n}")
        # A transposed operand reaches BLAS as a transposed layout.
        bt = np.ascontiguousarray(b.T)
        got_t = fg.matmul(fg.tensor(a), fg.tensor(bt).t()).numpy()
        np.testing.assert_allclose(got_t, reference(a, b), rtol=tol, atol=tol * np.sqrt(k))


def test_batched_and_linear_products_match_numpy(rng, restore_threads):
    fg.set_num_threads(2)
    a, b = rng.standard_normal((3, 300, 260)).astype(np.float32), rng.standard_normal((3, 260, 270)).astype(np.float32)
    np.testing.assert_allclose(fg.matmul(fg.tensor(a), fg.tensor(b)).numpy(), reference(a, b), rtol=1e-4, atol=1e-3)
    x, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((1024, 384), (512, 384), (512,)))
    got = fg.nn.functional.linear(fg.tensor(x), fg.tensor(w), fg.tensor(bias)).numpy()
    np.testing.assert_allclose(got, reference(x, w.T) + bias, rtol=1e-4, atol=1e-3)


def test_build_config_says_who_runs_blas_jobs():
    config = fg.build_config()
    assert config["blas_threads"] in ("pool", "openblas")
    if config["blas_library"] == "libscipy_openblas.so":  # 0.3.28 or newer: the callback exists
        assert config["blas_threads"] == ("openblas" if os.environ.get("FLOWGRAD_BLAS_THREADS") == "openblas" else "pool")
    if config["blas"] == "none":
        assert config["blas_threads"] == "openblas"


def test_blas_threads_flag_switches_back_to_openblas_threads():
    out = run_isolated("print(fg.build_config()['blas_threads'])", env={"FLOWGRAD_BLAS_THREADS": "openblas"})
    assert out.strip() == "openblas"


def test_blas_threads_flag_rejects_other_values():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), FLOWGRAD_BLAS_THREADS="omp")
    done = subprocess.run([sys.executable, "-c", "import flowgrad"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    assert "ImportError" in done.stderr  # raised while the module initialises, like every flag's check
    assert "FLOWGRAD_BLAS_THREADS='omp' is not 'pool' or 'openblas'" in done.stderr


GEMMS_FROM_THREADS = """
    import threading
    fg.set_num_threads(2)
    rng = np.random.default_rng(0)
    pairs = [(rng.standard_normal((300, 280)).astype(np.float32), rng.standard_normal((280, 290)).astype(np.float32))
             for _ in range(4)]
    wrong = []

    def work(k):
        a, b = pairs[k]
        expected = a.astype(np.float64) @ b
        for _ in range(15):
            got = fg.matmul(fg.tensor(a), fg.tensor(b)).numpy()
            if not np.allclose(got, expected, rtol=1e-4, atol=1e-3):
                wrong.append(k)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("wrong", wrong)
"""


@pytest.mark.parametrize("where", ["pool", "openblas"])
def test_gemms_from_several_python_threads_at_once(where):
    """Each threaded call uses OpenBLAS's global per-job buffers: calls must not overlap, nor deadlock."""
    assert run_isolated(GEMMS_FROM_THREADS, timeout=180, env={"FLOWGRAD_BLAS_THREADS": where}).split() == ["wrong", "[]"]


def test_gemms_from_threads_in_this_process(rng, restore_threads):
    fg.set_num_threads(2)
    a, b = rng.standard_normal((2, 260, 300)).astype(np.float32), rng.standard_normal((2, 300, 270)).astype(np.float32)

    def work(k):
        for _ in range(5):
            got = fg.matmul(fg.tensor(a[k % 2]), fg.tensor(b[k % 2])).numpy()
            np.testing.assert_allclose(got, reference(a[k % 2], b[k % 2]), rtol=1e-4, atol=1e-3)
    assert run_threads(work, 3) == []


@pytest.mark.parametrize("where", ["pool", "openblas"])
def test_gemms_in_a_forked_child_run_on_a_new_pool(where):
    """The child has none of the parent's pool workers: its first threaded GEMM starts a pool of its own."""
    out = run_isolated("""
        import os
        fg.set_num_threads(2)
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((300, 300)).astype(np.float32), rng.standard_normal((300, 300)).astype(np.float32)
        fg.matmul(fg.tensor(a), fg.tensor(b))  # the parent's pool and OpenBLAS's jobs in use before the fork
        pid = os.fork()
        if pid == 0:
            got = fg.matmul(fg.tensor(a), fg.tensor(b)).numpy()
            total = (fg.tensor(np.tile(a.ravel(), 4)) * 2).sum().item()  # a parallel elementwise op and sum
            ok = np.allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3) and np.isclose(total, 8 * a.sum(), rtol=1e-3)
            os._exit(0 if ok and fg.get_num_threads() == 2 else 1)
        print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """, timeout=120, env={"FLOWGRAD_BLAS_THREADS": where})
    assert out.split() == ["child", "0"]


# CPU time gained by each kind of thread during 150 threaded GEMMs. NumPy's OpenBLAS loads (and its
# threads spin, then sleep) before flowgrad; flowgrad's OpenBLAS threads spin from its import on,
# unless told to sleep at once (python/flowgrad/__init__.py), and {settle} s pass before the GEMMs.
THREAD_CPU = """
import json, os, time
import numpy as np
time.sleep(0.5)
import flowgrad as fg


def cpu_by_thread():
    found = {{}}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{{tid}}/stat") as f:
            stat = f.read()
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        found[tid] = (name, int(fields[11]) + int(fields[12]))  # utime + stime, clock ticks
    return found


fg.set_num_threads(2)
a, b = fg.randn(512, 512), fg.randn(512, 512)
time.sleep({settle})
before = cpu_by_thread()
for _ in range(150):
    fg.matmul(a, b)
after = cpu_by_thread()
main = str(os.getpid())
ours = foreign = 0
for tid, (name, ticks) in after.items():
    gained = ticks - before.get(tid, (name, 0))[1]
    if tid == main or name == "flowgrad-pool":
        ours += gained
    else:
        foreign += gained
print(json.dumps({{"ours": ours, "foreign": foreign, "timeout_env": os.environ.get("OPENBLAS_THREAD_TIMEOUT")}}))
"""


def thread_cpu(where, settle):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), FLOWGRAD_BLAS_THREADS=where,
               FLOWGRAD_SGEMM="blas")  # float32 products on OpenBLAS, not flowgrad's own AVX-512 kernel
    env.pop("OPENBLAS_THREAD_TIMEOUT", None)
    done = subprocess.run([sys.executable, "-c", THREAD_CPU.format(settle=settle)], capture_output=True, text=True,
                          env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@needs_pool
@pytest.mark.parametrize("where", ["pool", "openblas"])
def test_openblas_threads_stay_idle_when_the_pool_runs_its_jobs(where):
    """CPU time gained during threaded GEMMs, well after import, by threads that are neither the caller
    nor the pool's: none on the pool; OpenBLAS's own threads do about half the work otherwise (which
    shows the count works)."""
    cpu = thread_cpu(where, settle=1.5)
    assert cpu["ours"] > 0
    if where == "pool":
        assert cpu["foreign"] <= 0.05 * cpu["ours"], cpu
    else:
        assert cpu["foreign"] >= 0.2 * cpu["ours"], cpu


@needs_pool
def test_openblas_threads_sleep_from_import_on_the_pool():
    """GEMMs right after import: OpenBLAS's server threads, which spin for a while after they start,
    would spin on while the pool's jobs mark their status words (the GEMMs at half speed); the import
    makes them sleep at once and leaves the environment as it was."""
    cpu = thread_cpu("pool", settle=0)
    assert cpu["ours"] > 0
    assert cpu["foreign"] <= 0.05 * cpu["ours"], cpu
    assert cpu["timeout_env"] is None
