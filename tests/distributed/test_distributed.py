"""fg.distributed over MPI with 2 and 3 local processes, checked against NumPy and against one
process training on the concatenated batches; failures end the job instead of hanging."""
import re

import numpy as np
import pytest

import flowgrad as fg
from flowgrad.data import DataLoader, DistributedSampler

from mpi_jobs import check, launch, needs_mpi


@needs_mpi
@pytest.mark.parametrize("nproc", [2, 3])
def test_collectives_match_numpy(nproc):
    out = check(launch("job_collectives.py", nproc))
    # mpirun forwards each rank's stdout as it comes: two ranks' lines can meet on one line.
    assert sorted(re.findall(r"rank \d+/\d+ collectives ok", out)) == \
        [f"rank {r}/{nproc} collectives ok" for r in range(nproc)]


@needs_mpi
@pytest.mark.parametrize("nproc", [2, 3])
def test_ddp_matches_one_process(nproc, tmp_path):
    out = check(launch("job_ddp.py", nproc, tmp_path))
    assert out.count("ddp ok") == nproc


@needs_mpi
@pytest.mark.parametrize("nproc", [2, 3])
def test_compiled_ddp_matches_eager_ddp_and_one_process(nproc):
    out = check(launch("job_compile.py", nproc))
    assert out.count("compiled ddp ok") == nproc


@needs_mpi
@pytest.mark.parametrize("compiled", [[], ["--compile"]], ids=["eager", "compiled"])
def test_digits_example_trains_with_the_launcher(tmp_path, compiled):
    pytest.importorskip("sklearn")
    out = check(launch("../../examples/train_digits_ddp.py", 2, "--epochs", 4, "--out-dir", tmp_path, *compiled))
    losses = [float(v) for v in re.findall(r"^epoch \d+/4  loss ([0-9.]+)$", out, re.M)]
    assert len(losses) == 4 and losses[-1] < losses[0], out  # printed once, by rank 0
    assert float(re.search(r"test accuracy: ([0-9.]+)", out).group(1)) > 0.9, out
    assert (tmp_path / "digits_ddp.safetensors").exists()


@needs_mpi
@pytest.mark.parametrize("nproc", [2, 3])
def test_ranks_split_the_cores_and_yield_while_waiting(nproc):
    import os
    out = check(launch("job_env.py", nproc, unset=("FLOWGRAD_NUM_THREADS", "OMPI_MCA_mpi_yield_when_idle")))
    found = re.findall(r"rank (\d+) threads (\d+) yield (\d+|None)", out)  # mpirun may join lines
    assert sorted(int(r) for r, _, _ in found) == list(range(nproc)), out
    for _, threads, wait in found:
        assert 1 <= int(threads) <= max(1, os.cpu_count() // nproc) and wait == "1", out


@needs_mpi
def test_failing_rank_ends_the_job_naming_it():
    result = launch("job_fail.py", 3, "raise", timeout=60)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "rank 2 failed with ValueError: deliberate failure" in text
    assert "unreachable" not in text


@needs_mpi
def test_crashing_rank_ends_the_job_naming_it():
    result = launch("job_fail.py", 3, "crash", timeout=60)
    assert result.returncode not in (0, 124), result.returncode  # mpirun stopped it, not the timeout
    text = result.stdout + result.stderr
    # mpirun names the process as [[job, 1], rank]
    assert re.search(r"Process name: \[\[\d+,\d+\],2\]\s+Exit code:\s+3", text), text
    assert "unreachable" not in text


@needs_mpi
def test_parameter_without_gradient_names_it_and_ends_the_job():
    result = launch("job_fail.py", 2, "unused", timeout=60)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "find_unused_parameters=True" in text and "no gradient reached" in text, text


def test_nccl_init_names_what_is_missing():
    if fg.cuda.is_available():
        pytest.skip("a GPU is visible: the NCCL error paths for machines without one do not apply")
    with pytest.raises(fg.DeviceError, match="NCCL|nccl") as info:
        fg.distributed.init("nccl")
    assert "CUDA" in str(info.value) or "cuda" in str(info.value)
    assert not fg.distributed.is_initialized()


def test_mpi_init_without_the_library_says_how_to_install(monkeypatch):
    monkeypatch.setenv("FLOWGRAD_MPI_LIBRARY", "/nonexistent/libmpi.so.40")
    with pytest.raises(fg.DeviceError, match="apt-get install openmpi-bin libopenmpi-dev"):
        fg.distributed.init("mpi")
    assert not fg.distributed.is_initialized()


def test_errors_before_init():
    with pytest.raises(fg.InvalidArgumentError, match="unknown backend 'gloo'"):
        fg.distributed.init("gloo")
    with pytest.raises(fg.InvalidArgumentError, match="not initialised"):
        fg.distributed.rank()
    with pytest.raises(fg.InvalidArgumentError, match="call fg.distributed.init"):
        fg.nn.parallel.DistributedDataParallel(fg.nn.Linear(2, 2))


@pytest.mark.parametrize("n,replicas,drop_last", [(12, 3, False), (10, 3, False), (10, 3, True), (7, 1, False), (2, 3, False)])
def test_sampler_shards_cover_the_data_once_per_epoch(n, replicas, drop_last):
    seen = {}
    for epoch in range(2):
        shards = []
        for r in range(replicas):
            s = DistributedSampler(n, num_replicas=replicas, rank=r, seed=3, drop_last=drop_last)
            s.set_epoch(epoch)
            shards.append(list(s))
            assert len(shards[-1]) == len(s)
        every = np.concatenate(shards)
        values, counts = np.unique(every, return_counts=True)
        if drop_last:
            assert len(every) == (n // replicas) * replicas and counts.max() == 1
        else:
            assert set(values) == set(range(n))  # all covered; padding repeats only the overflow
            assert len(every) == -(-n // replicas) * replicas
            assert counts.max() <= -(-len(every) // n)
        seen[epoch] = every.tolist()
    assert seen[0] != seen[1] or n <= 2  # a fresh permutation each epoch


def test_sampler_drives_a_dataloader():
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    rows = []
    for r in range(2):
        s = DistributedSampler(10, num_replicas=2, rank=r, shuffle=False)
        loader = DataLoader(x, batch_size=2, sampler=s)
        assert len(loader) == 3
        rows += [b[0].numpy() for b in loader]
    got = np.concatenate(rows)
    np.testing.assert_array_equal(np.sort(got[:, 0]), x[:, 0])
    np.testing.assert_array_equal(np.concatenate([rows[0], rows[1], rows[2]])[:, 0], x[0::2, 0])


def test_sampler_bad_arguments():
    with pytest.raises(fg.InvalidArgumentError, match="0 <= rank < num_replicas"):
        DistributedSampler(10, num_replicas=2, rank=2)
    with pytest.raises(fg.InvalidArgumentError, match="shuffle=True and a sampler"):
        DataLoader(np.zeros((4, 1)), batch_size=2, shuffle=True, sampler=DistributedSampler(4, 1, 0))


def test_flush_reduce_checks_its_argument():
    g = fg.FlowBuilder(fg.nn.Linear(2, 2)).build()
    g.record("loss", 1.0, 2.0)
    with pytest.raises(fg.InvalidArgumentError, match="reduce must be 'none' or 'mean'"):
        g.flush(reduce="median")
    assert g.flush(reduce="mean") == {"loss": 1.5}  # without fg.distributed: this process alone


def test_bindings_have_stubs_and_docstrings():
    import pathlib
    stub = (pathlib.Path(fg.__file__).parent / "_core" / "distributed.pyi").read_text()
    names = [n for n in dir(fg._core.distributed) if not n.startswith("_")]
    assert [n for n in names if f"def {n}(" not in stub and f"class {n}:" not in stub] == []
    assert [n for n in names if not (getattr(fg._core.distributed, n).__doc__ or "").strip()] == []
    for name in fg.distributed.__all__:
        assert (getattr(fg.distributed, name).__doc__ or "").strip(), name


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nccl_rendezvous_hands_rank0s_id_to_every_rank():
    """The TCP exchange NCCL's init uses (it runs without NCCL): ranks started in any order."""
    import threading
    port, secret, got = _free_port(), bytes(range(128)), {}

    def rank(r):
        got[r] = fg._core.distributed._rendezvous(secret if r == 0 else bytes(128), r, 3, "127.0.0.1", port, 20.0)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (2, 1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {0: secret, 1: secret, 2: secret}


def test_nccl_rendezvous_times_out_naming_the_address():
    port = _free_port()
    with pytest.raises(TimeoutError, match=f"rank 1 could not reach rank 0 at 127.0.0.1:{port}"):
        fg._core.distributed._rendezvous(bytes(128), 1, 2, "127.0.0.1", port, 0.3)
    with pytest.raises(TimeoutError, match="rank 0 heard from 0 of 1 ranks"):
        fg._core.distributed._rendezvous(bytes(128), 0, 2, "127.0.0.1", port, 0.3)
