"""fg.io.remap_keys: loading a GPT-style checkpoint written with other names (GPT-2's, as PyTorch's
transformers library names them, Conv1D weights stored (in, out)) into the example's TinyGPT. The
checkpoint is made in the test from a TinyGPT's own weights, written with safetensors' PyTorch writer
when torch and safetensors are installed, else with fg.save; nothing is downloaded."""
import pathlib
import sys

import numpy as np
import pytest

import flowgrad as fg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from generate import TinyGPT  # noqa: E402

LAYERS, VOCAB, DIM, CONTEXT = 2, 40, 16, 24

# GPT-2's names -> TinyGPT's, and the Conv1D weights transposed back to Linear's (out, in).
RULES = [(r"^transformer\.", ""), (r"^wte\.", "tokens."), (r"^wpe\.", "positions."), (r"^h\.(\d+)\.", r"blocks.\1."),
         (r"\.ln_1\.", ".norm1."), (r"\.ln_2\.", ".norm2."), (r"\.attn\.c_attn\.", ".attn.qkv."),
         (r"\.attn\.c_proj\.", ".attn.proj."), (r"\.mlp\.c_fc\.", ".mlp.0."), (r"\.mlp\.c_proj\.", ".mlp.2."),
         (r"^ln_f\.", "norm."), (r"^lm_head\.", "head.")]
CONV1D = {r"blocks\.\d+\.(attn\.(qkv|proj)|mlp\.[02])\.weight": lambda w: w.t().contiguous()}
DROP = [r"transformer\.h\.\d+\.attn\.(bias|masked_bias)"]


def gpt2_state(model):
    """The model's weights as NumPy arrays under GPT-2's names and layouts, with its causal-mask buffers."""
    ours = {k: v.numpy() for k, v in model.state_dict().items()}
    names = {"tokens.weight": "transformer.wte.weight", "positions.weight": "transformer.wpe.weight",
             "norm.weight": "transformer.ln_f.weight", "norm.bias": "transformer.ln_f.bias",
             "head.weight": "lm_head.weight", "head.bias": "lm_head.bias"}
    parts = {"norm1": "ln_1", "norm2": "ln_2", "attn.qkv": "attn.c_attn", "attn.proj": "attn.c_proj",
             "mlp.0": "mlp.c_fc", "mlp.2": "mlp.c_proj"}
    out = {}
    for key, value in ours.items():
        if key in names:
            out[names[key]] = value
            continue
        _, layer, rest = key.split(".", 2)
        part, kind = rest.rsplit(".", 1)
        conv1d = kind == "weight" and part not in ("norm1", "norm2")
        out[f"transformer.h.{layer}.{parts[part]}.{kind}"] = np.ascontiguousarray(value.T) if conv1d else value
    for layer in range(LAYERS):
        out[f"transformer.h.{layer}.attn.bias"] = np.tril(np.ones((1, 1, CONTEXT, CONTEXT), dtype=np.float32))
    return out


def write(state, path):
    try:
        import torch
        from safetensors.torch import save_file
    except ImportError:
        fg.save({k: fg.tensor(v) for k, v in state.items()}, path)
        return "flowgrad"
    save_file({k: torch.from_numpy(v) for k, v in state.items()}, str(path))
    return "torch"


def test_a_gpt2_named_checkpoint_loads_into_tinygpt(tmp_path):
    fg.manual_seed(1)
    trained = TinyGPT(VOCAB, DIM, 2, LAYERS, context=CONTEXT).eval()
    path = tmp_path / "gpt2-style.safetensors"
    write(gpt2_state(trained), path)
    fg.manual_seed(2)
    model = TinyGPT(VOCAB, DIM, 2, LAYERS, context=CONTEXT).eval()
    state = fg.io.remap_keys(fg.load(path), RULES, transforms=CONV1D, drop=DROP)
    assert sorted(state) == sorted(model.state_dict())
    model.load_state_dict(state)  # strict: every name and shape matches
    tokens = fg.tensor(np.random.default_rng(0).integers(0, VOCAB, size=(2, 9)))
    with fg.no_grad():
        np.testing.assert_array_equal(model(tokens).numpy(), trained(tokens).numpy())


def test_without_the_transform_the_shapes_do_not_load(tmp_path):
    """The Conv1D layout is what the transform is for: square weights would load silently transposed, the
    others do not load at all."""
    trained = TinyGPT(VOCAB, DIM, 2, LAYERS, context=CONTEXT)
    state = fg.io.remap_keys({k: fg.tensor(v) for k, v in gpt2_state(trained).items()}, RULES, drop=DROP)
    with pytest.raises(fg.InvalidArgumentError, match="blocks.0.attn.qkv.weight"):
        TinyGPT(VOCAB, DIM, 2, LAYERS, context=CONTEXT).load_state_dict(state)


def test_a_function_renames_and_none_leaves_a_tensor_out():
    state = {"a.weight": fg.zeros(2), "a.bias": fg.ones(2), "skip": fg.zeros(1)}
    got = fg.io.remap_keys(state, lambda k: None if k == "skip" else "b." + k.split(".")[1])
    assert sorted(got) == ["b.bias", "b.weight"]
    assert got["b.bias"] is state["a.bias"]


def test_rules_apply_in_order_and_compose():
    got = fg.io.remap_keys({"x.y": fg.zeros(1)}, [(r"x", "y"), (r"^y\.y$", "z")])
    assert list(got) == ["z"]


def test_errors():
    with pytest.raises(fg.InvalidArgumentError, match="remap_keys: 'a.w' and 'b.w' both map to 'w'"):
        fg.io.remap_keys({"a.w": fg.zeros(1), "b.w": fg.zeros(1)}, [(r"^[ab]\.", "")])
    with pytest.raises(fg.InvalidArgumentError, match="remap_keys: rules holds an invalid pattern"):
        fg.io.remap_keys({"a": fg.zeros(1)}, [("(", "")])
    with pytest.raises(fg.InvalidArgumentError, match="remap_keys: drop holds an invalid pattern"):
        fg.io.remap_keys({"a": fg.zeros(1)}, [], drop=["["])
