"""LoRA (methods/lora.py, 000 Fig. 8): real AdamW steps on a tiny Qwen2 train the adapters only,
leave every base weight bit-identical, and the adapter folder saves and loads to the same model."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import PeftModel
from transformers import Qwen2Config, Qwen2ForCausalLM

from cliffsweep.trainables.methods import build_method

VOCAB = 100


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def tiny_qwen2() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2)
    return Qwen2ForCausalLM(cfg)


def batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (4, 10), generator=g)
    labels = ids.clone()
    labels[:, :3] = -100
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
            "example_idx": torch.arange(4), "is_retain": torch.zeros(4, dtype=torch.bool)}


def logits(model, b) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits


def test_lora_trains_adapters_only_and_round_trips(tmp_path):
    base = tiny_qwen2()
    pristine = copy.deepcopy(base)
    probe = batch(99)
    base_logits = logits(pristine, probe)

    method = build_method("lora", {"rank": 4})
    model = method.prepare(base, {})
    assert method.checkpoint_kind == "lora"
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    # all-linear: every projection of both blocks carries an adapter, the LM head does not
    assert sum(n.endswith("lora_A.default.weight") for n in trainable) == 2 * 7
    assert not any("lm_head" in n for n in trainable)

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.01)
    model.train()
    losses = []
    for step in range(4):
        loss, logs = method.loss(model, batch(step % 2))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(logs["ce"])
    assert losses[2] < losses[0]  # it learns (same batch seen twice)

    for n, p in model.named_parameters():
        if "lora_" in n:
            assert not torch.equal(p, before[n]), f"adapter {n} did not move"
        else:
            assert torch.equal(p, before[n]), f"base weight {n} changed"
    trained_logits = logits(model, probe)
    assert (trained_logits - base_logits).abs().max() > 1e-3

    method.export(model).save_pretrained(tmp_path)
    assert (tmp_path / "adapter_config.json").is_file()
    assert (tmp_path / "adapter_model.safetensors").is_file()
    assert not list(tmp_path.glob("model*.safetensors"))  # adapters only, not the base

    loaded = PeftModel.from_pretrained(pristine, tmp_path)
    assert torch.allclose(logits(loaded, probe), trained_logits, atol=1e-6)
