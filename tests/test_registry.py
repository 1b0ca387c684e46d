"""Every registered op is complete: a shape rule, a CPU kernel, a CUDA kernel or a stated reason
for lacking one (other than "not written yet"), a backward rule or a stated reason for having
none, and a test or reference in tests/ops."""
import pathlib
import re

import flowgrad as fg

OPS_TESTS = "\n".join(p.read_text() for p in (pathlib.Path(__file__).parent / "ops").glob("*.py"))


def test_registry_is_complete():
    ops = fg._core._op_registry()
    assert len(ops) > 50
    problems = []
    for op in ops:
        name = op["name"]
        if not op["has_shape_rule"]:
            problems.append(f"{name}: no shape rule")
        if not op["has_cpu_kernel"]:
            problems.append(f"{name}: no CPU kernel")
        reason = (op["cuda_missing"] or "").strip()
        if not op["is_view"] and not op["cuda"] and fg.cuda.built_with_cuda() and not reason:
            problems.append(f"{name}: no CUDA kernel and no reason")
        if op["cuda"] and reason:
            problems.append(f"{name}: a CUDA kernel and a reason for lacking one")
        if op["cuda_missing"] is not None and (not reason or "not written yet" in reason):
            problems.append(f"{name}: no CUDA kernel, and 'not written yet' is not a reason")
        if not op["has_backward"] and not op["not_differentiable"]:
            problems.append(f"{name}: neither a backward rule nor a not-differentiable mark")
        if op["has_backward"] and op["not_differentiable"]:
            problems.append(f"{name}: both a backward rule and a not-differentiable mark")
        if not re.search(rf"\b{re.escape(name)}\b", OPS_TESTS):
            problems.append(f"{name}: no test in tests/ops mentions it")
    assert not problems, "\n".join(problems)


def test_registry_names_are_unique_and_flags_consistent():
    ops = fg._core._op_registry()
    names = [op["name"] for op in ops]
    assert len(names) == len(set(names))
    for op in ops:
        if op["view"]:
            assert op["family"] == "movement", op["name"]
        if op["fusable"]:
            assert op["family"] in ("unary", "binary", "ternary"), op["name"]
        # PyTorch's naming: exactly the in-place ops end in "_" (and only they may keep input 0's old values)
        assert op["in_place"] == op["name"].endswith("_"), op["name"]
        assert not op["saves_original"] or op["in_place"], op["name"]
        assert not (op["in_place"] and (op["view"] or op["fusable"])), op["name"]
        # ops that write an input are exactly the in-place ops and the optimizer updates; an in-place op
        # writes input 0
        writes = bool(op["written_inputs"]) or op["written_groups"] is not None
        assert writes == (op["in_place"] or op["family"] == "optim"), op["name"]
        assert not op["in_place"] or op["written_inputs"] & 1, op["name"]
        # an op whose output size depends on values reads them on the host
        assert not op["data_dependent"] or op["host_sync"], op["name"]


def test_host_sync_flags_mark_exactly_the_host_reads():
    """Index-validating ops (checked_index) check on the device on CUDA, so they carry no kHostSync; the
    ops that read values for an output size (nonzero) do, so a compiled CUDA step refuses them by flag."""
    ops = {op["name"]: op for op in fg._core._op_registry()}
    kernel_sources = (pathlib.Path(__file__).parent.parent / "cpp" / "flowgrad" / "ops")
    validating = set()
    for src in kernel_sources.glob("*.cpp"):
        validating |= set(re.findall(r'checked_index\((?:env,\s*)?[^,]+,[^,]+,\s*"(\w+)"', src.read_text()))
    assert validating >= {"gather", "index_select", "index_add"}
    assert [n for n in validating if ops[n]["host_sync"]] == []
    assert sorted(n for n, op in ops.items() if op["host_sync"]) == sorted(
        n for n, op in ops.items() if op["data_dependent"])
    assert ops["nonzero"]["host_sync"]


def test_cuda_builds_have_elementwise_kernels():
    """Which ops have CUDA kernels follows the build."""
    ops = {op["name"]: op for op in fg._core._op_registry()}
    expected = ["add", "mul", "div", "exp", "tanh", "gelu", "eq", "where", "cast", "full", "rand", "randn", "sum",
                "mean", "argmax", "logsumexp", "contiguous", "cat", "pad", "matmul", "softmax", "gather",
                "scatter_add", "index_select", "layer_norm", "rms_norm", "norm_backward", "add_", "fill_", "copy_",
                "masked_fill_", "index_put_", "index_add", "cross_entropy", "cross_entropy_backward", "one_hot",
                "sort", "nonzero", "arange", "linspace", "eye", "im2col", "col2im"]
    for name in expected:
        assert ops[name]["cuda"] == fg.cuda.built_with_cuda(), name
        assert ops[name]["cuda_missing"] is None, name
