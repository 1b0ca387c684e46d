"""The CUDA runtime as far as it reaches without kernels: availability, the caching allocator's
statistics, copies between devices (with gradients) and Module.to. On a machine without a GPU
the cuda cases skip with the reason and the errors are checked instead."""
import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn

needs_no_gpu = pytest.mark.skipif(fg.cuda.is_available(), reason="checks the errors raised without a GPU")
needs_gpu = pytest.mark.skipif(not fg.cuda.is_available(), reason="no usable GPU")


def test_memory_api_shapes():
    stats = fg.cuda.memory_stats()
    assert set(stats) == {"allocated_bytes", "peak_allocated_bytes", "reserved_bytes", "peak_reserved_bytes",
                          "segments", "allocations", "backend_allocations", "retries", "deferred_frees"}
    assert fg.cuda.memory_allocated() == stats["allocated_bytes"] >= 0
    assert fg.cuda.max_memory_allocated() >= fg.cuda.memory_allocated()
    assert fg.cuda.memory_reserved() >= fg.cuda.memory_allocated()
    fg.cuda.reset_peak_memory_stats()
    fg.cuda.empty_cache()
    with pytest.raises(fg.DeviceError, match="expected a CUDA device, got cpu"):
        fg.cuda.memory_allocated("cpu")


@needs_no_gpu
def test_is_available_false_with_reason():
    assert not fg.cuda.is_available()
    assert fg.cuda.unavailable_reason()
    assert fg.cuda.memory_allocated() == 0 and fg.cuda.memory_reserved() == 0


@needs_no_gpu
def test_copy_to_cuda_without_gpu_raises_device_error():
    x = fg.ones(2, 3)
    with pytest.raises(fg.DeviceError, match=r"cuda:0 is not available|built without CUDA|no CUDA runtime"):
        x.cuda()
    with pytest.raises(fg.DeviceError, match=r"cuda:0 is not available|built without CUDA|no CUDA runtime"):
        x.to("cuda")


@needs_no_gpu
def test_module_to_cuda_without_gpu_leaves_it_on_cpu():
    m = nn.Linear(3, 2)
    before = m.weight.numpy().copy()
    with pytest.raises(fg.DeviceError):
        m.to("cuda")
    assert m.weight.device == "cpu"
    np.testing.assert_array_equal(m.weight.numpy(), before)


def test_round_trip_copy_and_gradient(device):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fg.tensor(a, requires_grad=True)
    on = x.to(device)
    assert on.device == device
    back = on.to("cpu")
    np.testing.assert_array_equal(back.numpy(), a)
    (back * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 4), 2.0))
    t = fg.tensor(a).t().to(device).cpu()  # a non-contiguous source is made contiguous first
    np.testing.assert_array_equal(t.numpy(), a.T)
    assert fg.tensor(a).to(device, dtype=fg.float64).cpu().dtype == fg.float64


def test_module_to_keeps_parameter_identity(device):
    m = nn.Linear(3, 2)
    opt = fg.optim.SGD(m.parameters(), lr=0.1)
    w = next(m.parameters())
    values = w.numpy().copy()
    m.to(device)
    assert m.weight.device == device and w.device == device  # the optimizer's tensor moved too
    np.testing.assert_array_equal(m.weight.cpu().numpy(), values)
    assert opt.param_groups[0]["params"][0].device == device


@needs_gpu
def test_allocator_statistics_follow_tensors():
    fg.cuda.empty_cache()
    base = fg.cuda.memory_allocated()
    x = fg.ones(1000).cuda()
    assert fg.cuda.memory_allocated() >= base + 4000
    assert fg.cuda.memory_reserved() >= fg.cuda.memory_allocated()
    del x
    assert fg.cuda.memory_allocated() == base
