"""fg.distributed over MPI with 2 and 3 local processes, checked against NumPy and against one
process training on the concatenated batches; failures end the job instead of hanging."""
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import flowgrad as fg
from flowgrad.data import DataLoader, DistributedSampler

from mpi_jobs import HERE, JOB_TIMEOUT_S, check, job_env, launch, needs_mpi


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
@pytest.mark.parametrize("nproc", [2, 3])
def test_ddp_starts_buckets_during_backward_and_waits_after(nproc):
    out = check(launch("job_overlap.py", nproc, "order"))
    assert out.count("overlap ok") == nproc, out


@needs_mpi
def test_failed_collective_raises_from_the_wait_and_from_backward():
    out = check(launch("job_overlap.py", 2, "left", timeout=60))
    assert "rank 1 left" in out and "rank 0 wait raised" in out, out


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
@pytest.mark.parametrize("mode", ["exit1", "systemexit"])
def test_rank_leaving_with_a_nonzero_status_ends_the_job_naming_it(mode):
    result = launch("job_exit.py", 3, mode, timeout=60)
    assert result.returncode == 1, result.returncode  # the rank's own status, not the timeout's 124
    text = result.stdout + result.stderr
    assert "flowgrad.distributed: rank 2 exited with status 1; aborting the job" in text, text
    assert ("deliberate exit" in text) == (mode == "systemexit")
    assert "unreachable" not in text


@needs_mpi
@pytest.mark.parametrize("mode", ["exit0", "return"])
def test_rank_leaving_cleanly_while_others_wait_for_it_ends_the_job_naming_it(mode):
    result = launch("job_exit.py", 3, mode, timeout=60)
    assert result.returncode not in (0, 124), result.returncode
    text = result.stdout + result.stderr
    assert re.search(r"rank 2 left the job \(its script ended or it called destroy\(\)\) after 1 collectives, "
                     r"while rank [01] waits for it in collective 2 \(all_reduce\)", text), text
    assert "unreachable" not in text


@needs_mpi
def test_rank_leaving_early_when_nobody_waits_for_it_is_fine():
    out = check(launch("job_exit.py", 3, "done_early", timeout=60))
    assert sorted(re.findall(r"rank \d done", out)) == ["rank 0 done", "rank 1 done"], out


@needs_mpi
def test_rank_killed_by_a_signal_ends_the_job_naming_it_and_the_signal():
    result = launch("job_exit.py", 3, "signal", timeout=60)
    assert result.returncode not in (0, 124), result.returncode
    text = result.stdout + result.stderr
    assert re.search(r"process rank 2 with PID \d+ on node \S+ exited on signal 9 \(Killed\)", text), text
    assert "unreachable" not in text


def _cpu_seconds(pid):
    """utime + stime of a process from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@needs_mpi
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["kill", "term", "int"])
def test_killing_the_launcher_ends_every_rank_and_waiting_ranks_do_not_spin(how):
    cmd = [sys.executable, "-m", "flowgrad.distributed.run", "--nproc", "3", "--timeout", str(JOB_TIMEOUT_S),
           str(HERE / "job_exit.py"), "wait"]
    launcher = subprocess.Popen(cmd, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, pids, mpirun = [], {}, None
    reader = threading.Thread(target=lambda: lines.extend(launcher.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while len(pids) < 3 and time.monotonic() < deadline and launcher.poll() is None:
            pids = {int(r): int(p) for r, p in re.findall(r"rank (\d+) pid (\d+) waiting", "".join(lines))}
            time.sleep(0.1)
        assert len(pids) == 3, "".join(lines)
        mpirun = _parent(pids[0])
        time.sleep(1)  # ranks 0 and 1 are in the barrier that rank 2 never joins
        before, start = _cpu_seconds(pids[0]), time.monotonic()
        time.sleep(2)
        waited_cpu, wall = _cpu_seconds(pids[0]) - before, time.monotonic() - start
        assert waited_cpu < 0.1 * wall, f"a rank waiting in a barrier used {waited_cpu:.2f} s of CPU in {wall:.2f} s"
        launcher.send_signal(how)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(map(_alive, [mpirun, *pids.values()])):
            time.sleep(0.1)
        assert not any(map(_alive, [mpirun, *pids.values()])), f"still running after the launcher got {how!r}"
    finally:
        for pid in [*pids.values()] + ([mpirun] if mpirun else []):  # whatever outlived a failure
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        launcher.kill()
        launcher.wait()
        reader.join(timeout=10)  # EOF once every process holding the pipe has ended
        launcher.stdout.close()


def _parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


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


TOKEN = "0123456789abcdef0123"


def _rendezvous(secret, rank, size, port, timeout_s=20.0, token=TOKEN):
    return fg._core.distributed._rendezvous(secret, rank, size, "127.0.0.1", port, timeout_s, token)


def test_nccl_rendezvous_hands_rank0s_id_to_every_rank():
    """The TCP exchange NCCL's init uses (it runs without NCCL): ranks started in any order."""
    port, secret, got = _free_port(), bytes(range(128)), {}

    def rank(r):
        got[r] = _rendezvous(secret if r == 0 else bytes(128), r, 3, port)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (2, 1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {0: secret, 1: secret, 2: secret}


def _connect(port, timeout_s=20.0):
    import socket
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _read_all(sock):
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(4096):
            data += chunk
    return data


def test_nccl_rendezvous_gives_rogue_clients_nothing_and_still_forms():
    """Clients that connect first, silent or with a wrong token, neither take a rank's place nor
    learn the id."""
    port, secret, got = _free_port(), bytes(range(128)), {}
    server = threading.Thread(target=lambda: got.update({0: _rendezvous(secret, 0, 3, port)}))
    server.start()
    silent, wrong = _connect(port), _connect(port)
    wrong.sendall(b"not the token, but long enough")
    ranks = [threading.Thread(target=lambda r=r: got.update({r: _rendezvous(bytes(128), r, 3, port)})) for r in (1, 2)]
    for t in ranks:
        t.start()
    for t in [server, *ranks]:
        t.join()
    assert got == {0: secret, 1: secret, 2: secret}
    assert _read_all(silent) == b"" and _read_all(wrong) == b""  # dropped without a byte
    silent.close()
    wrong.close()


def test_nccl_rendezvous_listens_on_master_addr_only():
    import socket
    port, errors = _free_port(), []

    def serve():
        try:
            _rendezvous(bytes(128), 0, 2, port, 3.0)
        except TimeoutError as e:
            errors.append(e)

    server = threading.Thread(target=serve)
    server.start()
    _connect(port).close()  # listening on 127.0.0.1 ...
    with pytest.raises(OSError):  # ... and not on the rest of 127/8, as INADDR_ANY would
        socket.create_connection(("127.0.0.2", port), timeout=2).close()
    server.join()
    assert len(errors) == 1 and "heard from 0 of 1 ranks" in str(errors[0])  # no rank came


def test_nccl_rendezvous_requires_a_token():
    for token in ("", "short"):
        with pytest.raises(fg.InvalidArgumentError, match="FLOWGRAD_RENDEZVOUS_TOKEN must be a secret of at least "
                           f"16 characters shared by the job's ranks \\(got {len(token)}\\)"):
            _rendezvous(bytes(128), 1, 2, _free_port(), 0.3, token)
    assert _rendezvous(b"id", 0, 1, _free_port(), 0.3, "") == b"id"  # one rank needs no exchange


def test_nccl_rendezvous_times_out_naming_the_address():
    port = _free_port()
    with pytest.raises(TimeoutError, match=f"rank 1 could not reach rank 0 at 127.0.0.1:{port}"):
        _rendezvous(bytes(128), 1, 2, port, 0.3)
    with pytest.raises(TimeoutError, match="rank 0 heard from 0 of 1 ranks"):
        _rendezvous(bytes(128), 0, 2, port, 0.3)


def test_launcher_passes_a_fresh_token_to_the_ranks():
    import argparse
    from flowgrad.distributed import run
    args = argparse.Namespace(hostfile=None, nproc=2, mpirun_args=[], script="train.py", script_args=[])
    (cmd, env), (_, env2) = run.command(args, "mpirun"), run.command(args, "mpirun")
    assert len(env["FLOWGRAD_RENDEZVOUS_TOKEN"]) >= 16 and env["FLOWGRAD_RENDEZVOUS_TOKEN"] != env2["FLOWGRAD_RENDEZVOUS_TOKEN"]
    assert cmd[cmd.index("FLOWGRAD_RENDEZVOUS_TOKEN") - 1] == "-x"  # passed by name: the value stays off the command line
    assert env["FLOWGRAD_RENDEZVOUS_TOKEN"] not in " ".join(cmd)
    assert cmd[-3:] == ["-m", "flowgrad.distributed._rank", "train.py"]
