"""Tensor.record_stream (PyTorch's semantics, review finding F8): a block freed after use on
another stream is not reused until the work queued on that stream at free time has finished.
The allocator's deferral logic is tested on any machine with fake events in
tests/cpp/test_caching_allocator.cpp; these cases need a GPU."""
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
    assert y.data_ptr() != ptr and z.data_ptr() == ptr


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
