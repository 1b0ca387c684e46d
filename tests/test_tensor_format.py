"""f-strings on tensors: one-element tensors format like their Python number."""
import pytest

import flowgrad as fg


def test_one_element_tensors_format_like_python_numbers():
    loss = fg.tensor(0.123456789)
    assert f"{loss:.4f}" == "0.1235" and f"{loss:.2e}" == f"{loss.item():.2e}"
    assert f"{fg.tensor([[2.5]]):>8.3f}" == "   2.500"  # one element, any shape
    assert f"{fg.tensor(7):05d}" == "00007" and f"{fg.tensor(7):.1f}" == "7.0"
    assert f"{fg.tensor(True)}" == "True"
    assert f"{fg.ones(2, requires_grad=True).sum():.1f}" == "2.0"


def test_other_tensors_format_as_str_and_reject_a_spec():
    t = fg.tensor([1.0, 2.5])
    assert f"{t}" == str(t) == "tensor([1. , 2.5])"
    with pytest.raises(TypeError, match=r"unsupported format string '\.4f' for a tensor of shape \(2,\)"):
        f"{t:.4f}"
