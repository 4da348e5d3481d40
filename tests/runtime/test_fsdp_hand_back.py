"""A one-process FSDP2 run gives the user's module back plain: ``fully_shard`` had sharded it in place (DTensor
parameters, ``FSDP<Class>`` classes, FSDP hooks), and ``save_pretrained`` then failed inside safetensors."""

from __future__ import annotations

import torch
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from autoshard.runtime import fit


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32))


def _batches() -> list[dict[str, torch.Tensor]]:
    ids = torch.randint(0, 64, (8, 16), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": ids[i:i + 4], "labels": ids[i:i + 4]} for i in (0, 4)]


def test_the_module_comes_back_plain_tied_trained_and_trainable_again(tmp_path) -> None:
    model = _gpt2()
    result = fit(model, _batches(), max_steps=2, strategy="fsdp", progress=False)
    assert result.model is model and result.state_dict is not None
    assert not any(isinstance(m, FSDPModule) for m in model.modules())
    assert not any(isinstance(p, DTensor) for p in model.parameters())
    assert type(model.transformer.h[0]).__name__ == "GPT2Block"
    assert model.lm_head.weight is model.transformer.wte.weight  # the tie kept
    for name, value in model.state_dict().items():
        assert torch.equal(value, result.state_dict[name]), name
    with torch.no_grad():
        assert model(_batches()[0]["input_ids"]).logits.shape == (4, 16, 64)
    model.save_pretrained(tmp_path / "saved")  # failed: "access the data pointer on an invalid python storage"
    again = fit(model, _batches(), max_steps=1, strategy="fsdp", progress=False)
    assert len(again.losses) == 1
