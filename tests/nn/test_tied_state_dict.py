"""state_dict keeps every name of a tied weight (PyTorch's behaviour) and load_state_dict / load_checkpoint
accept a state holding any one of them."""
import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(10, 4)
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.wte.weight  # GPT-2's tie


def test_state_dict_lists_a_tied_weight_under_each_name():
    model = TiedLM()
    sd = model.state_dict()
    assert set(sd) == {"wte.weight", "lm_head.weight"}
    assert [n for n, _ in model.named_parameters()] == ["wte.weight"]  # parameters stay unique
    np.testing.assert_array_equal(sd["wte.weight"].numpy(), sd["lm_head.weight"].numpy())


@pytest.mark.parametrize("names", [["wte.weight"], ["lm_head.weight"], ["wte.weight", "lm_head.weight"]])
def test_load_state_dict_takes_any_name_of_a_tied_weight(names):
    model = TiedLM()
    value = fg.tensor(np.arange(40, dtype=np.float32).reshape(10, 4))
    model.load_state_dict({name: value for name in names})
    np.testing.assert_array_equal(model.wte.weight.numpy(), value.numpy())
    assert model.lm_head.weight is model.wte.weight or np.array_equal(model.lm_head.weight.numpy(), value.numpy())


def test_missing_and_unexpected_keys_still_raise():
    with pytest.raises(fg.InvalidArgumentError, match="missing keys: wte.weight"):
        TiedLM().load_state_dict({})
    with pytest.raises(fg.InvalidArgumentError, match="unexpected keys: head.bias"):
        TiedLM().load_state_dict({"wte.weight": fg.zeros(10, 4), "head.bias": fg.zeros(10)})


def test_checkpoints_round_trip_and_old_ones_load(tmp_path, monkeypatch):
    model = TiedLM()
    fg.save_checkpoint(tmp_path / "new.safetensors", model)
    assert set(fg.load(tmp_path / "new.safetensors")) == {"model.wte.weight", "model.lm_head.weight"}
    other = TiedLM()
    fg.load_checkpoint(tmp_path / "new.safetensors", other)
    np.testing.assert_array_equal(other.wte.weight.numpy(), model.wte.weight.numpy())
    with monkeypatch.context() as m:  # what flowgrad wrote before: the tie listed once
        m.setattr(TiedLM, "state_dict", fg.nn._tied._unique_state_dict)
        with fg.no_grad():
            model.wte.weight.fill_(1.0)
        fg.save_checkpoint(tmp_path / "old.safetensors", model)
    assert set(fg.load(tmp_path / "old.safetensors")) == {"model.wte.weight"}
    fg.load_checkpoint(tmp_path / "old.safetensors", other)
    assert np.all(other.lm_head.weight.numpy() == 1)


def test_a_pytorch_state_dict_of_a_tied_model_loads_strictly():
    torch = pytest.importorskip("torch")
    ref = torch.nn.Module()
    ref.wte = torch.nn.Embedding(10, 4)
    ref.lm_head = torch.nn.Linear(4, 10, bias=False)
    ref.lm_head.weight = ref.wte.weight
    state = {k: fg.tensor(v.detach().numpy().copy()) for k, v in ref.state_dict().items()}
    assert set(state) == set(TiedLM().state_dict())  # the same keys both ways
    model = TiedLM()
    model.load_state_dict(state)
    np.testing.assert_array_equal(model.lm_head.weight.numpy(), ref.lm_head.weight.detach().numpy())
