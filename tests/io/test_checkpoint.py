"""safetensors files and checkpoints: round trips, interop with the safetensors package, one
corrupt-file test per reader rule (each load in a subprocess, so a crash is a failure), atomic
writes, exact resume, and a bounded fuzz run."""
import json
import os
import pathlib
import re
import socket
import struct
import subprocess
import sys

import numpy as np
import pytest

import flowgrad as fg
from tests.conftest import run_threads

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
    "duplicate key": (lambda p: write_raw(p, b'{"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, '
                                            b'"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}'), 'duplicate key "a"'),
    "duplicate metadata": (lambda p: write_raw(p, b'{"__metadata__": {}, "__metadata__": {}}'), 'duplicate key "__metadata__"'),
    "duplicate metadata key": (lambda p: write_raw(p, b'{"__metadata__": {"k": "1", "k": "2"}}'), 'duplicate key "k"'),
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
    "non-UTF-8 name": (lambda p: write_raw(p, b'{"a\xff": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}'),
                       "invalid UTF-8 in string"),
    "overlong UTF-8": (lambda p: write_raw(p, b'{"\xc0\xaf": {}}'), "invalid UTF-8 in string"),
    "UTF-8 surrogate": (lambda p: write_raw(p, b'{"\xed\xa0\x80": {}}'), "invalid UTF-8 in string"),
    "raw byte in JSON": (lambda p: write_raw(p, b'{"a": \xed}'), "unexpected character '\\xed'"),
    "non-UTF-8 metadata": (lambda p: write_raw(p, b'{"__metadata__": {"k": "v\xe2\x82"}}'), "invalid UTF-8 in string"),
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


def test_utf8_names_round_trip_and_400k_names_parse(tmp_path):
    names = {"é": fg.ones(1), "日本": fg.zeros(2), "🙂.w": fg.arange(3)}
    fg.save(names, tmp_path / "u.safetensors", metadata={"ключ": "値🙂"})
    assert list(fg.load(tmp_path / "u.safetensors")) == list(names)
    assert fg._core._load(str(tmp_path / "u.safetensors"))[1] == {"ключ": "値🙂"}
    # 400k names (a header tree and a hashed copy of every name made this 3.2 s; the timing is in
    # benchmarks/bench_safetensors_header.py); the last name repeats the first.
    entries = ",".join(f'"t{i}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}' for i in range(400_000))
    many = struct.pack("<Q", len(entries) + 2) + b"{" + entries.encode() + b"}"
    assert list(fg._core._parse_safetensors(many)[0]) == [f"t{i}" for i in range(400_000)]
    duplicate = entries + ',"t0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}'
    with pytest.raises(fg.CheckpointError, match='duplicate key "t0"'):
        fg._core._parse_safetensors(struct.pack("<Q", len(duplicate) + 2) + b"{" + duplicate.encode() + b"}")


def test_nul_byte_in_a_path_raises_instead_of_truncating(tmp_path):
    with pytest.raises(fg.CheckpointError, match=r"save: the path '.*a\\0\.\.\.' contains a NUL byte"):
        fg.save({"a": fg.ones(1)}, str(tmp_path / "a\0b.safetensors"))
    with pytest.raises(fg.CheckpointError, match="load: the path .* contains a NUL byte"):
        fg.load(str(tmp_path / "a\0b.safetensors"))
    with pytest.raises(fg.CheckpointError, match="contains a NUL byte"):
        fg.save_checkpoint(str(tmp_path / "c\0"), Net())
    assert list(tmp_path.iterdir()) == []  # nothing written under the truncated name "a"
    with pytest.raises(fg.CheckpointError, match=r"cannot open '.*/\\xff\.safetensors'"):  # a str message, not UnicodeDecodeError
        fg.load(os.fsencode(tmp_path) + b"/\xff.safetensors")


def test_threads_saving_to_one_path_never_collide(tmp_path):
    path = tmp_path / "shared.safetensors"

    def saver(k):
        for i in range(15):
            fg.save({"w": fg.full((256,), float(k * 100 + i))}, path, metadata={"who": f"{k}.{i}"})

    assert run_threads(saver, 6) == []
    tensors, meta = fg._core._load(str(path))  # one complete save, never a mix
    k, i = map(int, meta["who"].split("."))
    np.testing.assert_array_equal(tensors["w"].numpy(), np.full(256, k * 100 + i, np.float32))
    assert [p.name for p in tmp_path.iterdir()] == ["shared.safetensors"]


def dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_next_save_removes_temp_files_of_dead_processes_only(tmp_path):
    path = tmp_path / "m.safetensors"
    dead = dead_pid()
    host = socket.gethostname()
    stale = [f"m.safetensors.tmp.{dead}", f"m.safetensors.tmp.{dead}.7.{host}"]
    kept = [f"m.safetensors.tmp.{os.getpid()}.999.{host}",  # a save of a live process may be in flight
            f"m.safetensors.tmp.{dead}.7.{host}x",  # another host's: its pids mean nothing here
            f"other.safetensors.tmp.{dead}.0.{host}",  # another path's
            f"m.safetensors.tmp.{dead}x", f"m.safetensors.tmp.{dead}.{host}", "m.safetensors.tmp.notapid"]  # not ours
    for name in stale + kept:
        (tmp_path / name).write_bytes(b"partial")
    fg.save({"a": fg.ones(1)}, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept + ["m.safetensors"])


def test_load_removes_the_temp_file_of_a_save_killed_mid_write(tmp_path):
    """kill -9 of a real save once its temporary file appears; no later save comes, a load cleans up."""
    path = tmp_path / "k.safetensors"
    fg.save({"w": fg.ones(3)}, path)
    saver = ("import sys, flowgrad as fg\n"
             "big = fg.ones(32 << 20)  # 128 MB: writing it outlasts the parent's poll by far\n"
             "while True:\n"
             "    fg.save({'w': big}, sys.argv[1])\n")
    left = []
    for _ in range(5):  # a save may finish between the poll and the kill: then try again
        child = subprocess.Popen([sys.executable, "-c", saver, str(path)])
        try:
            while not left and child.poll() is None:
                left = [p for p in tmp_path.iterdir() if p.name.startswith("k.safetensors.tmp.")]
            child.kill()  # SIGKILL: nothing in the child runs after this
        finally:
            child.kill()
            child.wait()
        assert child.returncode == -9, "the saver ended before it was killed"
        left = [p for p in left if p.exists()]
        if left:
            break
    assert left, "no save was caught mid-write in 5 tries"
    fg.load(path)  # whatever the file holds now (a complete save: rename is atomic)
    assert [p.name for p in tmp_path.iterdir()] == ["k.safetensors"]


class BadlyNamed(fg.nn.Linear):
    """A model whose state names a tensor with a lone surrogate (C++ modules take no such attribute)."""
    def __init__(self):
        super().__init__(1, 1)

    def state_dict(self):
        return {"w\udc80": self.weight}


@pytest.mark.parametrize("where", ["name", "metadata key", "metadata value"])
def test_names_that_are_not_utf8_raise_checkpoint_error(tmp_path, where):
    bad = "w\udc80"  # a lone surrogate, as os.fsdecode makes of an undecodable byte
    tensors, meta = ({bad: fg.ones(1)}, None) if where == "name" else \
        ({"w": fg.ones(1)}, {bad: "v"} if where == "metadata key" else {"k": bad})
    what = "tensor name" if where == "name" else where
    with pytest.raises(fg.CheckpointError, match=re.escape(f"save: {what} 'w\\udc80' is not valid UTF-8")):
        fg.save(tensors, tmp_path / "u.safetensors", metadata=meta)
    with pytest.raises(fg.CheckpointError, match="is not valid UTF-8"):
        fg._core._serialize_safetensors(tensors, meta)
    if where == "name":
        with pytest.raises(fg.CheckpointError, match=re.escape("save: tensor name 'model.w\\udc80' is not valid UTF-8")):
            fg.save_checkpoint(tmp_path / "c.safetensors", BadlyNamed())
    assert list(tmp_path.iterdir()) == []


class Bigger(fg.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = fg.nn.Linear(5, 12)
        self.drop = fg.nn.Dropout(0.25)
        self.fc2 = fg.nn.Linear(12, 3)

    def forward(self, x):
        return self.fc2(self.drop(self.fc1(x).tanh()))


def training_objects(device, lr=0.05, seed=None):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((30, 5)).astype(np.float32)
    y = rng.integers(0, 3, 30)
    model = Bigger().to(device)
    opt = fg.optim.AdamW(model.parameters(), lr=lr)
    sched = fg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=16, eta_min=0.001, warmup=3)
    loader = fg.data.DataLoader(x, y, batch_size=8, shuffle=True, seed=seed)  # 4 batches an epoch
    return model, opt, sched, loader


def forever(loader):
    while True:
        yield from loader


def run_steps(objects, batches, steps, device, seen):
    model, opt, sched, _ = objects
    for _ in range(steps):
        bx, by = next(batches)
        seen.append(bx.numpy().copy())
        opt.zero_grad()
        fg.nn.functional.cross_entropy(model(bx.to(device)), by.to(device)).backward()
        opt.step()
        sched.step()


@pytest.mark.parametrize("seed", [None, 11], ids=["global-generator", "seeded"])
def test_resume_mid_epoch_with_scheduler_and_loader_is_bitwise(tmp_path, device, seed):
    fg.manual_seed(5)
    straight = training_objects(device, seed=seed)
    straight_seen = []
    run_steps(straight, forever(straight[3]), 14, device, straight_seen)

    fg.manual_seed(5)
    first = training_objects(device, seed=seed)
    seen = []
    run_steps(first, forever(first[3]), 7, device, seen)  # stops inside the second epoch
    path = tmp_path / "mid.safetensors"
    fg.save_checkpoint(path, first[0], first[1], step=7, scheduler=first[2], loader=first[3])
    fg.manual_seed(99)  # a fresh process would start elsewhere: the checkpoint restores it
    resumed = training_objects(device, lr=0.7, seed=seed)
    meta = fg.load_checkpoint(path, resumed[0], resumed[1], scheduler=resumed[2], loader=resumed[3])
    assert meta["step"] == 7 and next(resumed[0].parameters()).device == fg.device(device)
    run_steps(resumed, forever(resumed[3]), 7, device, seen)

    assert resumed[1].param_groups[0]["lr"] == straight[1].param_groups[0]["lr"]
    assert resumed[2].last_epoch == 14 and resumed[3].epoch == 4
    for a, b in zip(straight_seen, seen):
        np.testing.assert_array_equal(a, b)
    for (name, a), (_, b) in zip(straight[0].named_parameters(), resumed[0].named_parameters()):
        np.testing.assert_array_equal(a.cpu().numpy(), b.cpu().numpy(), err_msg=name)


def test_device_checkpoint_needs_no_manual_cpu(tmp_path, device):
    fg.manual_seed(0)
    model = Net().to(device)
    opt = fg.optim.Adam(model.parameters(), lr=0.01)
    x, y = fg.randn(4, 6, device=device), fg.tensor([0, 1, 2, 0]).to(device)
    fg.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    fg.save({"w": model.fc1.weight}, tmp_path / "w.safetensors")
    np.testing.assert_array_equal(fg.load(tmp_path / "w.safetensors")["w"].numpy(), model.fc1.weight.cpu().numpy())
    fg.save_checkpoint(tmp_path / "c.safetensors", model, opt)
    fresh = Net().to(device)
    fresh_opt = fg.optim.Adam(fresh.parameters(), lr=0.5)
    fg.load_checkpoint(tmp_path / "c.safetensors", fresh, fresh_opt)
    for (name, a), (_, b) in zip(model.named_parameters(), fresh.named_parameters()):
        assert b.device == fg.device(device), name
        np.testing.assert_array_equal(a.cpu().numpy(), b.cpu().numpy(), err_msg=name)
    for state in fresh_opt.state.values():  # moments on the parameter's device, the step counter on the host
        assert state["exp_avg"].device == fg.device(device) and state["step"].device == fg.device("cpu")
    for m, o in ((model, opt), (fresh, fresh_opt)):  # one more step each: the state carries on alike
        m.eval()
        o.zero_grad()
        fg.nn.functional.cross_entropy(m(x), y).backward()
        o.step()
    np.testing.assert_array_equal(model.fc2.bias.cpu().numpy(), fresh.fc2.bias.cpu().numpy())


def rewrite(path, out, tensors=None, **meta_changes):
    """A copy of the checkpoint at `path` with tensors replaced and metadata keys changed (None drops)."""
    old_tensors, meta = fg._core._load(str(path))
    for k, v in meta_changes.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    fg.save(tensors if tensors is not None else old_tensors, out, meta)


def edit_json(field, change):
    def make(path, out):
        _, meta = fg._core._load(str(path))
        value = json.loads(meta[field])
        change(value)
        rewrite(path, out, **{field: json.dumps(value)})
    return make


def swap_tensor(name, value):
    def make(path, out):
        tensors, _ = fg._core._load(str(path))
        tensors[name] = value
        rewrite(path, out, tensors)
    return make


def all_state_checkpoint(tmp_path):
    """A checkpoint with every part (model, optimizer, graph, scheduler, loader) and the objects it came from."""
    fg.manual_seed(3)
    g = fg.flow(fg.nn.Linear(2, 2)).through(fg.flow.StateAdd()).using("s").tag("s").build()
    opt = fg.optim.Adam(g.parameters(), lr=0.1)
    sched = fg.optim.lr_scheduler.StepLR(opt, 2, 0.5)
    loader = fg.data.DataLoader(np.zeros((10, 2), np.float32), batch_size=3, shuffle=True)
    for _, (bx,) in zip(range(2), loader):
        g(bx[:1]).sum().backward()
        g.detach_state()
        opt.step()
        sched.step()
        g.record("loss", 1.0)
        g.flush()
    path = tmp_path / "all.safetensors"
    fg.save_checkpoint(path, g, opt, graph=g, step=2, scheduler=sched, loader=loader)
    return path


def fresh_objects():
    g = fg.flow(fg.nn.Linear(2, 2)).through(fg.flow.StateAdd()).using("s").tag("s").build()
    g(fg.ones(1, 2))
    g.record("loss", 7.0)
    g.flush()
    opt = fg.optim.Adam(g.parameters(), lr=0.3)
    g.detach_state()
    g(fg.ones(1, 2)).sum().backward()
    g.detach_state()
    opt.step()
    sched = fg.optim.lr_scheduler.StepLR(opt, 2, 0.5)
    loader = fg.data.DataLoader(np.zeros((10, 2), np.float32), batch_size=3, shuffle=True)
    return g, opt, sched, loader


def snapshot(g, opt, sched, loader):
    return ({k: v.numpy().copy() for k, v in g.state_dict().items()},
            {k: v.numpy().copy() for k, v in g._recurrent_state().items()},
            repr(opt.state_dict()["param_groups"]),
            {i: {k: v.numpy().copy() for k, v in s.items()} for i, s in opt.state_dict()["state"].items()},
            g.trend("loss").values(), sched.state_dict(), loader.state_dict(), fg.get_rng_state())


def assert_same(a, b):
    for x, y in zip(a, b):
        if isinstance(x, dict) and x and isinstance(next(iter(x.values())), (np.ndarray, dict)):
            assert x.keys() == y.keys()
            for k in x:
                assert_same([x[k]], [y[k]]) if isinstance(x[k], dict) else np.testing.assert_array_equal(x[k], y[k])
        else:
            assert x == y


def bump_state(opt_json):
    opt_json["param_groups"][0]["params"] = [0, 7]


FAULTS = {
    "model shape": (swap_tensor("model.1.weight", fg.zeros(3, 2)), "model: the model state does not match"),
    "model missing key": (lambda p, o: rewrite(p, o, {k: v for k, v in fg._core._load(str(p))[0].items() if k != "model.1.bias"}),
                          "missing keys ['1.bias']"),
    "optimizer JSON": (lambda p, o: rewrite(p, o, optimizer="{not json"), "optimizer: corrupt data (JSONDecodeError"),
    "optimizer missing": (lambda p, o: rewrite(p, o, optimizer=None), "optimizer: the file holds no optimizer state"),
    "optimizer key": (edit_json("optimizer", lambda v: v.pop("param_groups")), "optimizer: corrupt data (KeyError"),
    "optimizer type": (edit_json("optimizer", lambda v: v.update(param_groups=3)), "optimizer: corrupt data (TypeError"),
    "optimizer option": (edit_json("optimizer", lambda v: v["param_groups"][0].update(lr=-1)), "lr must be >= 0"),
    "optimizer index": (edit_json("optimizer", bump_state), "optimizer: corrupt data (KeyError: 1)"),
    "optimizer state shape": (swap_tensor("optimizer.0.exp_avg", fg.zeros(5)), "(5,), expected flowgrad.float32 (2, 2)"),
    "optimizer state name": (swap_tensor("optimizer.0.velocity", fg.zeros(2, 2)), "'optimizer.0.velocity' is no Adam state"),
    "graph JSON": (edit_json("graph", lambda v: v["trends"]["series"]["loss"].update(epochs=[1.5])), "graph history is malformed"),
    "graph state tag": (swap_tensor("graph.state.nope", fg.zeros(2)), "graph: corrupt data (GraphError"),
    "scheduler key": (edit_json("scheduler", lambda v: v["state"].pop("gamma")), "StepLR.load_state_dict: expected the keys"),
    "scheduler value": (edit_json("scheduler", lambda v: v["state"].update(step_size=0)), "step_size must be positive"),
    "scheduler type": (edit_json("scheduler", lambda v: v.update(type="LambdaLR")), "saved scheduler is LambdaLR, not StepLR"),
    "loader layout": (edit_json("loader", lambda v: v.update(n=11)), "the state is for a loader with"),
    "loader position": (edit_json("loader", lambda v: v.update(position=9)), "out of range"),
    "rng": (lambda p, o: rewrite(p, o, rng="[1, 2, 3]"), "RNG: the RNG state [1, 2, 3] is not two 64-bit counters"),
    "step": (lambda p, o: rewrite(p, o, step="seven"), "step: corrupt data (ValueError"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_failed_load_raises_checkpoint_error_and_changes_nothing(tmp_path, fault):
    make, message = FAULTS[fault]
    bad = tmp_path / "bad.safetensors"
    make(all_state_checkpoint(tmp_path), bad)
    objects = fresh_objects()
    fg.manual_seed(42)
    before = snapshot(*objects)
    g, opt, sched, loader = objects
    with pytest.raises(fg.CheckpointError, match=re.escape(message)):
        fg.load_checkpoint(bad, g, opt, graph=g, scheduler=sched, loader=loader)
    assert_same(before, snapshot(*objects))


def test_all_state_checkpoint_loads_every_part(tmp_path):
    path = all_state_checkpoint(tmp_path)
    g, opt, sched, loader = fresh_objects()
    meta = fg.load_checkpoint(path, g, opt, graph=g, scheduler=sched, loader=loader)
    assert meta["step"] == 2 and g.trend("loss").values() == [1.0, 1.0]
    assert sched.last_epoch == 2 and opt.param_groups[0]["lr"] == 0.05
    assert (loader.epoch, loader.position) == (1, 2)
    with pytest.raises(fg.CheckpointError, match="save_checkpoint: the scheduler state is not JSON data"):
        sched.gamma = object()
        fg.save_checkpoint(tmp_path / "x.safetensors", g, scheduler=sched)


@pytest.mark.parametrize("make", [
    lambda opt: fg.optim.lr_scheduler.StepLR(opt, 2, 0.5),
    lambda opt: fg.optim.lr_scheduler.LambdaLR(opt, lambda e: 1 / (e + 1)),
    lambda opt: fg.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5),
], ids=["StepLR", "LambdaLR", "ReduceLROnPlateau"])
def test_every_scheduler_goes_through_a_checkpoint(tmp_path, make):
    model = Net()
    opt = fg.optim.SGD(model.parameters(), lr=1.0)
    sched = make(opt)
    for value in (3.0, 4.0, 5.0):
        sched.step(value) if isinstance(sched, fg.optim.lr_scheduler.ReduceLROnPlateau) else sched.step()
    fg.save_checkpoint(tmp_path / "s.safetensors", model, opt, scheduler=sched)
    fresh_opt = fg.optim.SGD(model.parameters(), lr=1.0)
    fresh = make(fresh_opt)
    fg.load_checkpoint(tmp_path / "s.safetensors", model, fresh_opt, scheduler=fresh)
    assert fresh.state_dict() == sched.state_dict() and fresh.get_last_lr() == sched.get_last_lr() != [1.0]


def test_a_plateau_scheduler_before_its_first_value_round_trips(tmp_path):
    model = Net()
    opt = fg.optim.SGD(model.parameters(), lr=1.0)
    fg.save_checkpoint(tmp_path / "p.safetensors", model, scheduler=fg.optim.lr_scheduler.ReduceLROnPlateau(opt))
    loaded = fg.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max")
    fg.load_checkpoint(tmp_path / "p.safetensors", model, scheduler=loaded)
    assert loaded.mode == "min" and loaded.best == float("inf")  # JSON's Infinity
