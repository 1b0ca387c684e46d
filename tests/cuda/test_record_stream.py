"""Tensor.record_stream (PyTorch's semantics, review finding F8): a block freed after use on
another stream is not reused until the work queued on that stream at free time has finished.
The allocator's deferral logic is tested on any machine with fake events in
tests/cpp/test_caching_allocator.cpp; these cases need a GPU."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flowgrad as fg


def cuda_only(device):
    if device == "cpu":
        pytest.skip("record_stream concerns CUDA streams; the allocator logic is tested in tests/cpp")


def test_block_read_on_another_stream_is_not_reused_until_that_work_is_done(device):
    """The reviewer's F8 scenario: s1 fills x; s2 waits for s1 and reads x in a long matmul loop;
    x is freed; s1 allocates y of the same size and fills it with zeros; s2's result must be
    that of x's values."""
    cuda_only(device)
    s1, s2 = fg.cuda.Stream(), fg.cuda.Stream()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512)).astype(np.float32) / 16
    with fg.cuda.stream(s1):
        x = fg.tensor(a, device=device)
        ptr = x.data_ptr()
    s2.wait_stream(s1)
    with fg.cuda.stream(s2):
        acc = x
        for _ in range(50):  # keeps s2 busy reading x well after the free below
            acc = acc @ x
            acc = acc / acc.abs().max()
        x.record_stream(s2)
    del x
    assert fg.cuda.memory_stats()["deferred_frees"] >= 1  # held back at release, whatever s2's progress
    with fg.cuda.stream(s1):
        y = fg.zeros(512, 512, device=device)  # same size, same stream: would take x's block
    s2.synchronize()
    expected = a.astype(np.float64)
    for _ in range(50):
        expected = expected @ a
        expected = expected / np.abs(expected).max()
    np.testing.assert_allclose(acc.cpu().numpy(), expected, rtol=1e-3, atol=1e-4)
    assert float(y.sum().item()) == 0.0
    with fg.cuda.stream(s1):
        z = fg.empty(512, 512, device=device)  # s2's work is done: the block is reused
    assert fg.cuda.memory_stats()["deferred_frees"] == 0
    # y may legitimately take x's block when s2 had already finished (review G13): the values above
    # are the claim; the block is reused once s2 is done, by y or by z
    assert ptr in (y.data_ptr(), z.data_ptr())


def test_stream_destroyed_before_a_tensor_recorded_on_it(device):
    """Review G2: the stream dies first, then the tensor; its release must not record an event on
    the dead handle nor throw out of a destructor (the process used to abort). In a subprocess, so
    an abort is a failure here, not a lost worker."""
    cuda_only(device)
    code = textwrap.dedent("""
        import gc, flowgrad as fg
        x = fg.ones(1 << 20, device="cuda"); s = fg.cuda.Stream()
        with fg.cuda.stream(s):
            y = x * 2
        x.record_stream(s); del s; gc.collect(); del x
        z = fg.ones(1 << 20, device="cuda")  # the next allocation raises what a release kept, if anything
        fg.cuda.synchronize()
        print(float(y.sum().item()), fg.cuda.memory_stats()["deferred_frees"])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(2.0 * (1 << 20)), "0"]


def test_record_stream_on_the_tensors_own_stream_defers_nothing(device):
    cuda_only(device)
    x = fg.ones(1000, device=device)
    before = fg.cuda.memory_stats()["deferred_frees"]
    x.record_stream(fg.cuda.current_stream())
    del x
    assert fg.cuda.memory_stats()["deferred_frees"] == before


def test_record_stream_errors(device):
    cuda_only(device)
    s = fg.cuda.Stream()
    with pytest.raises(fg.DeviceError, match="record_stream: the tensor is on cpu, expected a CUDA tensor"):
        fg.ones(3).record_stream(s)
    if fg.cuda.device_count() > 1:
        other = fg.cuda.Stream("cuda:1")
        with pytest.raises(fg.DeviceError, match="record_stream: the tensor is on cuda:0 but the stream is on cuda:1"):
            fg.ones(3, device="cuda:0").record_stream(other)
