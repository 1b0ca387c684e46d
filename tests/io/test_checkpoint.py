"""safetensors files and checkpoints: round trips, interop with the safetensors package, one
corrupt-file test per reader rule (each load in a subprocess, so a crash is a failure), atomic
writes, exact resume, and a bounded fuzz run."""
import json
import pathlib
import struct
import subprocess
import sys

import numpy as np
import pytest

import flowgrad as fg

HERE = pathlib.Path(__file__).parent


def test_round_trip_all_dtypes(tmp_path):
    tensors = {
        "f32": fg.randn(3, 4), "f64": fg.randn(2, dtype=fg.float64), "i32": fg.arange(5, dtype=fg.int32),
        "i64": fg.arange(3).reshape(3, 1), "bool": fg.tensor([True, False, True]), "f16": fg.randn(4).half(),
        "bf16": fg.randn(2, 2).bfloat16(), "empty": fg.zeros(0, 3), "scalar": fg.tensor(2.5),
        "view": fg.arange(12, dtype=fg.float32).reshape(3, 4).t(),
    }
    path = tmp_path / "t.safetensors"
    fg.save(tensors, path, metadata={"note": "é\n\"quoted\""})
    loaded = fg.load(path)
    assert list(loaded) == list(tensors)
    for k, t in tensors.items():
        assert loaded[k].dtype == t.dtype and loaded[k].shape == t.shape
        np.testing.assert_array_equal(loaded[k].float().numpy(), t.float().numpy())
    assert fg._core._load(str(path))[1] == {"note": "é\n\"quoted\""}


def test_interop_with_the_safetensors_package(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    ours = tmp_path / "ours.safetensors"
    fg.save({"w": fg.arange(6, dtype=fg.float64).reshape(2, 3), "m": fg.tensor([True])}, ours, {"k": "v"})
    theirs = st.load_file(str(ours))
    np.testing.assert_array_equal(theirs["w"], np.arange(6.0).reshape(2, 3))
    assert theirs["m"].dtype == np.bool_
    path = tmp_path / "theirs.safetensors"
    st.save_file({"a": np.arange(4, dtype=np.int32), "b": np.ones((2, 2), np.float16)}, str(path), metadata={"x": "1"})
    loaded = fg.load(path)
    np.testing.assert_array_equal(loaded["a"].numpy(), np.arange(4))
    assert loaded["b"].dtype == fg.float16


def write_raw(path, header, data=b"", header_len=None):
    raw = json.dumps(header).encode() if isinstance(header, dict) else header
    n = len(raw) if header_len is None else header_len
    path.write_bytes(struct.pack("<Q", n) + raw + data)


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


CORRUPT = {
    "too small": (lambda p: p.write_bytes(b"\x01\x02"), "too small for a safetensors header"),
    "header past end": (lambda p: write_raw(p, {}, header_len=1000), "runs past the end"),
    "header too large": (lambda p: write_raw(p, b"{}", header_len=200 << 20), "exceeds the 100 MiB limit"),
    "not json": (lambda p: write_raw(p, b"{nope"), "invalid JSON header"),
    "not an object": (lambda p: write_raw(p, b"[1, 2]"), "header must start with '{'"),
    "duplicate key": (lambda p: write_raw(p, b'{"a": {}, "a": {}}'), "duplicate key"),
    "unknown dtype": (lambda p: write_raw(p, {"a": entry("U16", [1], 0, 2)}, b"\x00\x00"), "dtype 'U16'"),
    "negative dim": (lambda p: write_raw(p, {"a": entry("F32", [-1], 0, 4)}, b"\0" * 4), "non-negative integers"),
    "float dim": (lambda p: write_raw(p, {"a": entry("F32", [1.5], 0, 4)}, b"\0" * 4), "non-negative integers"),
    "bad offsets": (lambda p: write_raw(p, {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}, b"\0" * 4), "data_offsets must be"),
    "reversed offsets": (lambda p: write_raw(p, {"a": entry("F32", [0], 4, 0)}, b"\0" * 4), "begin after they end"),
    "byte count": (lambda p: write_raw(p, {"a": entry("F32", [2], 0, 4)}, b"\0" * 4), "needs 8 bytes but data_offsets span 4"),
    "overflow": (lambda p: write_raw(p, {"a": entry("F64", [2**62, 8], 0, 8)}, b"\0" * 8), "overflows 64 bits"),
    "past the data": (lambda p: write_raw(p, {"a": entry("F32", [2], 0, 8)}, b"\0" * 4), "past the 4-byte data section"),
    "overlap": (lambda p: write_raw(p, {"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 4, 8)}, b"\0" * 8), "overlaps"),
    "gap": (lambda p: write_raw(p, {"a": entry("F32", [1], 4, 8)}, b"\0" * 8), "leaving a gap"),
    "uncovered bytes": (lambda p: write_raw(p, {"a": entry("F32", [1], 0, 4)}, b"\0" * 8), "4 bytes that no tensor covers"),
    "bad metadata": (lambda p: write_raw(p, {"__metadata__": {"k": 1}}), "is not a string"),
    "bad bool": (lambda p: write_raw(p, {"a": entry("BOOL", [1], 0, 1)}, b"\x07"), "neither 0 nor 1"),
    "extra field": (lambda p: write_raw(p, {"a": {**entry("F32", [1], 0, 4), "x": 1}}, b"\0" * 4), "unknown field 'x'"),
    "deep nesting": (lambda p: write_raw(p, b'{"a":' + b"[" * 40 + b"]" * 40 + b"}"), "nesting deeper"),
}


@pytest.mark.parametrize("rule", sorted(CORRUPT))
def test_corrupt_file_raises_checkpoint_error(tmp_path, rule):
    make, message = CORRUPT[rule]
    path = tmp_path / "bad.safetensors"
    make(path)
    code = ("import sys, flowgrad as fg\n"
            "try:\n    fg.load(sys.argv[1])\n"
            "except fg.CheckpointError as e:\n    print('CheckpointError:', e); sys.exit(3)\n")
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, f"expected CheckpointError, got exit {result.returncode}: {result.stderr[-2000:]}"
    assert message in result.stdout, result.stdout


def test_missing_file_and_failed_write_leave_nothing_behind(tmp_path):
    with pytest.raises(fg.CheckpointError, match="cannot open"):
        fg.load(tmp_path / "absent.safetensors")
    with pytest.raises(fg.CheckpointError, match="cannot create"):
        fg.save({"a": fg.ones(1)}, tmp_path / "no_such_dir" / "x.safetensors")
    path = tmp_path / "keep.safetensors"
    fg.save({"a": fg.ones(2)}, path)
    with pytest.raises(fg.CheckpointError, match="metadata must map strings to strings"):
        fg.save({"a": fg.zeros(2)}, path, metadata={"k": 3})
    np.testing.assert_array_equal(fg.load(path)["a"].numpy(), [1, 1])  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.safetensors"]  # no temporary files


class Net(fg.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = fg.nn.Linear(6, 16)
        self.drop = fg.nn.Dropout(0.3)
        self.fc2 = fg.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.drop(self.fc1(x).relu()))


def make_run():
    fg.manual_seed(0)
    model = Net()
    return model, fg.optim.AdamW(model.parameters(), lr=0.01)


def train(model, opt, x, y, steps):
    for _ in range(steps):
        opt.zero_grad()
        fg.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def test_resume_reproduces_the_uninterrupted_run_exactly(tmp_path):
    rng = np.random.default_rng(0)
    x = fg.tensor(rng.standard_normal((32, 6)).astype(np.float32))
    y = fg.tensor(rng.integers(0, 3, 32))
    ref_model, ref_opt = make_run()
    train(ref_model, ref_opt, x, y, 10)

    model, opt = make_run()
    train(model, opt, x, y, 4)
    path = tmp_path / "ckpt.safetensors"
    fg.save_checkpoint(path, model, opt, step=4, metadata={"run": "test"})
    fg.manual_seed(123)  # disturb the global generator: the checkpoint restores it
    resumed_model = Net()
    resumed_opt = fg.optim.AdamW(resumed_model.parameters(), lr=0.5)
    meta = fg.load_checkpoint(path, resumed_model, resumed_opt)
    assert meta["step"] == 4 and meta["run"] == "test"
    assert resumed_opt.param_groups[0]["lr"] == 0.01
    train(resumed_model, resumed_opt, x, y, 6)
    for (name, a), (_, b) in zip(ref_model.named_parameters(), resumed_model.named_parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    with pytest.raises(fg.CheckpointError, match="saved optimizer is AdamW, not SGD"):
        fg.load_checkpoint(path, Net(), fg.optim.SGD(Net().parameters(), lr=0.1))
    fg.save({"a": fg.ones(1)}, tmp_path / "plain.safetensors")
    with pytest.raises(fg.CheckpointError, match="is not a flowgrad checkpoint"):
        fg.load_checkpoint(tmp_path / "plain.safetensors", Net())


def test_fuzz_the_reader_for_a_bounded_time(tmp_path):
    pytest.importorskip("atheris")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "valid").write_bytes(fg._core._serialize_safetensors(
        {"a": fg.ones(2, 3), "b": fg.arange(4), "c": fg.tensor([True])}, {"k": "v"}))
    (corpus / "empty").write_bytes(fg._core._serialize_safetensors({}))
    result = subprocess.run([sys.executable, str(HERE / "fuzz_safetensors.py"), str(corpus), "-max_total_time=15",
                             "-rss_limit_mb=2048", "-max_len=4096"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done" in result.stderr
