"""CUDA streams and events (fg.cuda.Stream, fg.cuda.stream, current_stream, Event): work queued
on a side stream, ordering between streams with events, timing, and the errors raised where
there is no GPU. Streams exist only on CUDA: the device-parametrised cases skip on the CPU."""
import numpy as np
import pytest

import flowgrad as fg

needs_no_gpu = pytest.mark.skipif(fg.cuda.is_available(), reason="checks the errors raised without a GPU")
WHY = r"cuda:0 is not available|built without CUDA"


def cuda_only(device):
    if device == "cpu":
        pytest.skip("streams and events are CUDA objects; the CPU runs ops synchronously")


@needs_no_gpu
@pytest.mark.parametrize("make", [
    lambda: fg.cuda.Stream(), lambda: fg.cuda.Event(), lambda: fg.cuda.current_stream(),
    lambda: fg.cuda.default_stream(), lambda: fg.cuda.Event(enable_timing=True, device="cuda:0"),
], ids=["Stream", "Event", "current_stream", "default_stream", "Event-timing"])
def test_stream_api_without_gpu_names_the_missing_cuda(make):
    with pytest.raises(fg.DeviceError, match=WHY):
        make()


def test_stream_context_none_is_a_no_op():
    with fg.cuda.stream(None) as s:
        assert s is None
        assert float(fg.ones(2).sum().item()) == 2.0


def test_stream_rejects_a_cpu_device():
    with pytest.raises(fg.DeviceError, match="fg.cuda.Stream: expected a CUDA device, got cpu"):
        fg.cuda.Stream("cpu")


def test_current_stream_default_and_context(device):
    cuda_only(device)
    assert fg.cuda.current_stream() == fg.cuda.default_stream()
    assert fg.cuda.default_stream().cuda_stream == 0
    s = fg.cuda.Stream()
    assert s.cuda_stream != 0 and str(s.device) == "cuda:0"
    with fg.cuda.stream(s) as entered:
        assert entered is s
        assert fg.cuda.current_stream() == s
        inner = fg.cuda.Stream()
        with fg.cuda.stream(inner):
            assert fg.cuda.current_stream() == inner
        assert fg.cuda.current_stream() == s
    assert fg.cuda.current_stream() == fg.cuda.default_stream()


def test_work_on_a_side_stream_matches_numpy(device):
    cuda_only(device)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((45, 65)), rng.standard_normal((65, 33))
    s = fg.cuda.Stream()
    x = fg.tensor(a, dtype=fg.float32, device="cuda")
    w = fg.tensor(b, dtype=fg.float32, device="cuda")
    s.wait_stream(fg.cuda.current_stream())  # x and w were written on the default stream
    with fg.cuda.stream(s):
        y = (x @ w).relu().sum(dim=0)  # cuBLAS and our kernels on s
        host = y.numpy()  # the copy to the host waits for s
    np.testing.assert_allclose(host, np.maximum(a @ b, 0).sum(0), rtol=1e-4, atol=1e-4)


def test_events_order_streams_and_time_work(device):
    cuda_only(device)
    s1, s2 = fg.cuda.Stream(), fg.cuda.Stream()
    start, done = fg.cuda.Event(enable_timing=True), fg.cuda.Event(enable_timing=True)
    x = fg.ones(1 << 20, device="cuda")
    s1.wait_stream(fg.cuda.current_stream())
    with fg.cuda.stream(s1):
        start.record()
        y = x * 3.0
        for _ in range(20):
            y = y + 1.0
        done.record()
    s2.wait_event(done)
    with fg.cuda.stream(s2):
        z = y * 2.0
        total = float(z.sum().item())
    assert total == (3 + 20) * 2 * (1 << 20)
    done.synchronize()
    assert done.query() and s1.query()
    assert start.elapsed_time(done) >= 0.0


def test_record_event_returns_an_event_and_stream_synchronizes(device):
    cuda_only(device)
    s = fg.cuda.Stream(priority=-1)
    e = s.record_event()
    assert isinstance(e, fg.cuda.Event)
    e.wait()  # the current stream waits for it
    s.synchronize()
    assert e.query()


def test_elapsed_time_needs_timing_events(device):
    cuda_only(device)
    a, b = fg.cuda.Event(), fg.cuda.Event()
    a.record()
    b.record()
    with pytest.raises(fg.InvalidArgumentError, match="enable_timing=True"):
        a.elapsed_time(b)
    c, d = fg.cuda.Event(enable_timing=True), fg.cuda.Event(enable_timing=True)
    with pytest.raises(fg.InvalidArgumentError, match="must be recorded first"):
        c.elapsed_time(d)


def test_allocator_keeps_blocks_per_stream(device):
    cuda_only(device)
    s = fg.cuda.Stream()
    with fg.cuda.stream(s):
        t = fg.empty(1 << 18, device="cuda")
        ptr = t.data_ptr()
        del t
    u = fg.empty(1 << 18, device="cuda")  # the default stream's pool: not the block freed on s
    assert u.data_ptr() != ptr
    with fg.cuda.stream(s):
        v = fg.empty(1 << 18, device="cuda")
        assert v.data_ptr() == ptr  # reused on its own stream
