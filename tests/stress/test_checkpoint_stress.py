"""Checkpoint stress checks in a bounded quick mode: every corrupt-file family made from a valid
checkpoint raises fg.CheckpointError without a crash and leaves the model untouched, and kill -9
during saves leaves the old or the new complete checkpoint, with no orphan after the next save.
The loads and the saves run in child processes (checkpoint_stress_child.py), so a crash fails
the test instead of ending the run."""
import json
import os
import pathlib
import random
import signal
import struct
import subprocess
import sys

import numpy as np

import flowgrad as fg

CHILD = pathlib.Path(__file__).with_name("checkpoint_stress_child.py")


def valid_checkpoint(path):
    """Bytes of a checkpoint with model, optimizer, scheduler and loader state (the child's objects)."""
    fg.manual_seed(0)
    model = fg.nn.Linear(8, 4)
    opt = fg.optim.Adam(model.parameters(), lr=0.01)
    sched = fg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, warmup=2)
    loader = fg.data.DataLoader(np.zeros((12, 3), np.float32), batch_size=5, shuffle=True)
    next(iter(loader))
    model(fg.randn(2, 8)).sum().backward()
    opt.step()
    sched.step()
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    for index, entries in opt.state_dict()["state"].items():
        tensors.update({f"optimizer.{index}.{k}": v for k, v in entries.items()})
    fg.save_checkpoint(path, model, opt, step=1, scheduler=sched, loader=loader)
    return path.read_bytes()


def split(raw):
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def join(header, data, encode=None):
    text = (encode or (lambda h: json.dumps(h).encode()))(header)
    return struct.pack("<Q", len(text)) + text + data


def changed(raw, change):
    header, data = split(raw)
    change(header)
    return join(header, data)


def tensor_names(raw):
    return [k for k in split(raw)[0] if k != "__metadata__"]


def entry_families(raw):
    """Per-tensor faults: dtype, shape/byte count, offsets."""
    names = tensor_names(raw)
    first, last = names[0], names[-1]

    def set_field(name, field, value):
        return lambda h: h[name].__setitem__(field, value)

    def shift(name, delta_begin, delta_end):
        def change(h):
            b, e = h[name]["data_offsets"]
            h[name]["data_offsets"] = [b + delta_begin, e + delta_end]
        return change

    cases = {}
    for dtype in ("F33", "", "U8", 5, None):
        cases[f"dtype {dtype!r}"] = set_field(first, "dtype", dtype)
    cases["dtype F64 (byte count)"] = set_field(first, "dtype", "F64")
    cases["shape one longer"] = lambda h: h[first]["shape"].__setitem__(0, h[first]["shape"][0] + 1)
    cases["shape dropped dim"] = lambda h: h[first]["shape"].pop()
    cases["shape negative"] = set_field(first, "shape", [-4, 8])
    cases["shape string"] = set_field(first, "shape", "4x8")
    cases["shape overflow"] = set_field(first, "shape", [2**62, 2**62])
    cases["offsets gap"] = shift(first, 4, 4)
    cases["offsets overlap"] = shift(names[1], -4, -4)
    cases["offsets past the end"] = shift(last, 4, 4)
    cases["offsets reversed"] = lambda h: h[first]["data_offsets"].reverse()
    cases["offsets negative"] = set_field(first, "data_offsets", [-8, 0])
    cases["offsets float"] = set_field(first, "data_offsets", [0.0, 128.0])
    cases["offsets 2**64"] = set_field(first, "data_offsets", [0, 2**64])
    cases["offsets one"] = set_field(first, "data_offsets", [0])
    cases["entry not an object"] = lambda h: h.__setitem__(first, [1, 2])
    cases["entry extra field"] = set_field(first, "offsets", 3)
    cases["entry missing field"] = lambda h: h[first].pop("shape")
    return {k: changed(raw, f) for k, f in cases.items()}


def metadata_families(raw):
    """flowgrad's own metadata: each JSON field broken, mistyped, truncated or dropped."""
    header, _ = split(raw)
    meta = header["__metadata__"]
    cases = {}
    for field in ("optimizer", "scheduler", "loader", "rng", "step", "format"):
        text = meta[field]
        for label, value in {"bad JSON": "{not json", "number": "3", "list": "[]", "null": "null", "object": "{}",
                             "string": '"x"', "half": text[:len(text) // 2], "dropped": None}.items():
            if (field, label) in (("format", "half"), ("step", "number"), ("step", "dropped")):
                continue  # "step": "3" is a valid step, and the step is optional
            def change(h, field=field, value=value):
                if value is None:
                    h["__metadata__"].pop(field)
                else:
                    h["__metadata__"][field] = value
            cases[f"metadata {field} {label}"] = changed(raw, change)
    optimizer = json.loads(meta["optimizer"])
    for label, edit in {"no type": lambda o: o.pop("type"), "no groups": lambda o: o.pop("param_groups"),
                        "params not a list": lambda o: o["param_groups"][0].update(params=5),
                        "param index out of range": lambda o: o["param_groups"][0].update(params=[0, 99]),
                        "param index string": lambda o: o["param_groups"][0].update(params=["a", "b"]),
                        "betas scalar": lambda o: o["param_groups"][0].update(betas=0.9),
                        "negative lr": lambda o: o["param_groups"][0].update(lr=-1),
                        "string weight decay": lambda o: o["param_groups"][0].update(weight_decay="0"),
                        "unknown option": lambda o: o["param_groups"][0].update(magic=1),
                        "extra group": lambda o: o["param_groups"].append(o["param_groups"][0])}.items():
        edit(optimizer := json.loads(meta["optimizer"]))
        cases[f"optimizer {label}"] = changed(raw, lambda h, o=optimizer: h["__metadata__"].update(optimizer=json.dumps(o)))
    for label, edit in {"T_max zero": lambda s: s["state"].update(T_max=0), "no last_epoch": lambda s: s["state"].pop("last_epoch"),
                        "base_lrs short": lambda s: s["state"].update(base_lrs=[]), "state list": lambda s: s.update(state=[]),
                        "other type": lambda s: s.update(type="StepLR")}.items():
        edit(sched := json.loads(meta["scheduler"]))
        cases[f"scheduler {label}"] = changed(raw, lambda h, s=sched: h["__metadata__"].update(scheduler=json.dumps(s)))
    for label, edit in {"other n": lambda s: s.update(n=13), "position past the end": lambda s: s.update(position=4),
                        "negative epoch": lambda s: s.update(epoch=-1), "float position": lambda s: s.update(position=1.5),
                        "epoch_rng short": lambda s: s.update(epoch_rng=[1])}.items():
        edit(state := json.loads(meta["loader"]))
        cases[f"loader {label}"] = changed(raw, lambda h, s=state: h["__metadata__"].update(loader=json.dumps(s)))
    return cases


def tensor_set_families(raw):
    """Valid safetensors files whose tensors do not fit the objects."""
    tensors, meta = fg._core._parse_safetensors(raw)
    cases = {}
    for label, edit in {"model key dropped": lambda t: t.pop("model.bias"),
                        "model key added": lambda t: t.update({"model.extra": fg.zeros(1)}),
                        "model shape": lambda t: t.update({"model.weight": fg.zeros(4, 9)}),
                        "optimizer state shape": lambda t: t.update({"optimizer.0.exp_avg": fg.zeros(3)}),
                        "optimizer state dtype": lambda t: t.update({"optimizer.0.step": fg.zeros((), dtype=fg.float32)}),
                        "optimizer state name": lambda t: t.update({"optimizer.0.velocity": fg.zeros(4, 8)}),
                        "optimizer index": lambda t: t.update({"optimizer.9.exp_avg": fg.zeros(4, 8)}),
                        "optimizer no index": lambda t: t.update({"optimizer.exp_avg": fg.zeros(4, 8)})}.items():
        changed_tensors = dict(tensors)
        edit(changed_tensors)
        cases[f"tensors {label}"] = fg._core._serialize_safetensors(changed_tensors, meta)
    return cases


def byte_families(raw):
    """Truncations, header lengths, JSON syntax and UTF-8."""
    n = struct.unpack("<Q", raw[:8])[0]
    header = raw[8:8 + n]
    cases = {f"truncated to {k}": raw[:k] for k in (0, 4, 7, 8, 20, 8 + n // 2, 8 + n - 1, 8 + n, 8 + n + 3, len(raw) - 1)}
    for label, length in {"+1": n + 1, "-1": n - 1, "zero": 0, "2**63": 2**63, "file size": len(raw),
                          "past the end": len(raw) - 7}.items():
        cases[f"header length {label}"] = struct.pack("<Q", length) + raw[8:]
    cases["data one byte longer"] = raw + b"\0"
    for label, text in {"array": b"[" + header[1:-1] + b"]", "no closing brace": header.rstrip()[:-1],
                        "trailing comma": header.rstrip()[:-1] + b",}", "null": b"null", "unterminated string": b'{"a',
                        "control character": header.replace(b'"model.', b'"mo\x01del.', 1),
                        "bad escape": header.replace(b'"model.', b'"mo\\qdel.', 1),
                        "lone surrogate escape": header.replace(b'"model.', b'"\\ud800model.', 1),
                        "deep nesting": b'{"a":' + b"[" * 64 + b"]" * 64 + b"}"}.items():
        cases[f"JSON {label}"] = struct.pack("<Q", len(text)) + text + raw[8 + n:]
    for label, bad in {"xff": b"\xff", "overlong": b"\xc0\xaf", "continuation": b"\x80", "truncated": b"\xe2\x82",
                       "surrogate": b"\xed\xa0\x80", "past U+10FFFF": b"\xf4\x90\x80\x80"}.items():
        text = header.replace(b'"model.', b'"' + bad + b"model.", 1)
        cases[f"non-UTF-8 name {label}"] = struct.pack("<Q", len(text)) + text + raw[8 + n:]
        text = header.replace(b'"format":"', b'"format":"' + bad, 1)
        cases[f"non-UTF-8 metadata {label}"] = struct.pack("<Q", len(text)) + text + raw[8 + n:]
        text = header.replace(b'"format":"', b'"' + bad + b'":"x","format":"', 1)
        cases[f"non-UTF-8 metadata key {label}"] = struct.pack("<Q", len(text)) + text + raw[8 + n:]
    return cases


def random_header_mutations(raw, count=150, seed=9):
    """Random bytes in the header: these may still form a valid checkpoint (a changed lr digit)."""
    n = struct.unpack("<Q", raw[:8])[0]
    rnd = random.Random(seed)
    cases = {}
    for i in range(count):
        b = bytearray(raw)
        for _ in range(rnd.randint(1, 3)):
            b[rnd.randrange(0, 8 + n)] = rnd.randrange(256)
        cases[f"random {i:03d}"] = bytes(b)
    return cases


def run_loads(folder):
    result = subprocess.run([sys.executable, str(CHILD), "load", str(folder)], capture_output=True, text=True, timeout=120)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, f"the loader died (exit {result.returncode}) at {lines[-1:]}: {result.stderr[-2000:]}"
    return dict(line.split("\t", 1) for line in lines)


def test_every_corrupt_family_raises_checkpoint_error(tmp_path):
    raw = valid_checkpoint(tmp_path / "source.safetensors")
    files = tmp_path / "files"
    files.mkdir()
    must_fail = {**byte_families(raw), **entry_families(raw), **metadata_families(raw), **tensor_set_families(raw)}
    may_load = random_header_mutations(raw)
    for name, data in {**must_fail, **may_load, "valid": raw}.items():
        (files / name.replace("/", "_")).write_bytes(data)
    outcome = run_loads(files)
    assert outcome.pop("valid") == "loaded"
    wrong = {k: outcome[k] for k in must_fail if outcome[k] != "CheckpointError"}
    assert not wrong, wrong
    wrong = {k: outcome[k] for k in may_load if outcome[k] not in ("CheckpointError", "loaded")}
    assert not wrong, wrong
    assert len(must_fail) > 100 and sum(v == "CheckpointError" for v in outcome.values()) > len(must_fail)


def kill_during_saves(child, folder, delay):
    """Kills a saving child `delay` seconds after its first save, checks the file and that the
    next save removes what the child left; returns the number of orphaned temporary files."""
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "1"  # the first save is complete
    try:
        child.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        pass
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    done = [1] + [int(line) for line in child.stdout.read().split()]
    path = folder / "ckpt.safetensors"
    model = fg.nn.Linear(1024, 512)
    step = fg.load_checkpoint(path, model)["step"]
    assert step in (done[-1], done[-1] + 1)  # the old file, or the new one renamed just before the kill
    assert np.all(model.weight.numpy() == step) and np.all(model.bias.numpy() == step)
    orphans = sum(".tmp." in p.name for p in folder.iterdir())
    fg.save_checkpoint(path, model, step=step)  # the next save removes the dead child's temporary file
    assert [p.name for p in folder.iterdir()] == ["ckpt.safetensors"]
    return orphans


def test_kill_9_during_saves_leaves_a_complete_checkpoint_and_no_orphan(tmp_path):
    rnd = random.Random(2026)
    trials = 10
    folders = [tmp_path / f"trial{i}" for i in range(trials)]
    children = []
    try:
        for folder in folders:  # started together so that their imports overlap
            folder.mkdir()
            children.append(subprocess.Popen([sys.executable, str(CHILD), "save", str(folder)], stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, text=True))
        orphans = [kill_during_saves(child, folder, rnd.uniform(0.0, 0.4)) for child, folder in zip(children, folders)]
    finally:
        for child in children:  # children not started yet see their stdin close and exit
            child.kill()
            child.wait()
            child.stdin.close()
            child.stdout.close()
    print(f"{sum(orphans)} orphaned temporary files in {trials} kills, all removed by the next save")
