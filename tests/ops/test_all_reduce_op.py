"""The all_reduce_ op's checks, which run before any transport is needed. Its values are checked
over MPI with 2 and 3 processes in tests/distributed (job_compile.py: eager on a strided view,
and recorded in compiled DistributedDataParallel steps)."""
import pytest

import flowgrad as fg

all_reduce_ = fg._core.distributed.all_reduce_


def test_all_reduce_rejects_bool_and_integer_average():
    with pytest.raises(fg.DTypeError, match=r"all_reduce_: cannot reduce .*bool"):
        all_reduce_(fg.ones(3, dtype=fg.bool))
    with pytest.raises(fg.DTypeError, match=r"all_reduce_: cannot reduce .*int64.* with 'avg'"):
        all_reduce_(fg.ones(3, dtype=fg.int64), "avg")
    with pytest.raises(fg.InvalidArgumentError, match="unknown reduce op 'mean'"):
        all_reduce_(fg.ones(3), "mean")


def test_all_reduce_needs_an_initialised_group():
    assert not fg.distributed.is_initialized()
    t = fg.ones(3)
    with pytest.raises(fg.InvalidArgumentError, match=r"not initialised; call fg.distributed.init"):
        all_reduce_(t)
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_all_reduce_is_an_in_place_op_without_gradient():
    op = {o["name"]: o for o in fg._core._op_registry()}["all_reduce_"]
    assert op["in_place"] and not op["has_backward"] and "collective" in op["not_differentiable"]


start_, wait_ = fg._core.distributed.all_reduce_start_, fg._core.distributed.all_reduce_wait_


def test_all_reduce_start_checks_like_all_reduce_and_takes_contiguous_tensors_only():
    with pytest.raises(fg.DTypeError, match=r"all_reduce_start_: cannot reduce .*int64.* with 'avg'"):
        start_(fg.ones(3, dtype=fg.int64), "avg")
    with pytest.raises(fg.InvalidArgumentError, match=r"all_reduce_start_: the tensor must be contiguous, got .*"
                                                      r"use all_reduce_, which waits at once"):
        start_(fg.ones(4, 6)[:, 1:5:2])
    t = fg.ones(3)
    with pytest.raises(fg.InvalidArgumentError, match=r"not initialised; call fg.distributed.init"):
        start_(t)
    with pytest.raises(fg.InvalidArgumentError, match=r"all_reduce_wait_: no all-reduce of this tensor .* was "
                                                      r"started; call all_reduce_start_ on it first"):
        wait_(t)  # the failed start left nothing in flight


def test_all_reduce_start_and_wait_are_in_place_ops_without_gradient():
    ops = {o["name"]: o for o in fg._core._op_registry()}
    for name in ("all_reduce_start_", "all_reduce_wait_"):
        assert ops[name]["in_place"] and not ops[name]["has_backward"] and "collective" in ops[name]["not_differentiable"]
