"""Fine-tuning under DeepSpeed: parameters that do not train (a frozen backbone) have no fp32 master in the ZeRO
optimizer, so the consolidated weights took the engine's copy of them: rounded to bf16 under bf16-mixed (ZeRO-1/2/3)
and, at stage 3, an empty partition (shape [0]) for any above the persistence threshold. Found by trying
fine-tuning scripts (2026-11-29); DDP and FSDP2 returned them exact."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

from autoshard.runtime import fit

pytest.importorskip("deepspeed")


class _Classifier(nn.Module):
    """An embedding of 128,000 elements (above ZeRO-3's 1e5 persistence threshold: partitioned), a block, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(1000, 128)
        self.block = nn.Sequential(nn.LayerNorm(128), nn.Linear(128, 128), nn.GELU())
        self.head = nn.Linear(128, 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.emb(tokens)).mean(dim=1))


def _frozen_backbone() -> _Classifier:
    torch.manual_seed(0)
    model = _Classifier()
    for name, p in model.named_parameters():
        p.requires_grad = name.startswith("head.")
    return model


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, 1000, (4, 8), generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(3)]


@pytest.mark.parametrize("strategy", ["deepspeed_stage_1", "deepspeed_stage_3"])
def test_frozen_parameters_come_back_exact_and_the_module_runs_after_training(strategy: str) -> None:
    model = _frozen_backbone()
    before = copy.deepcopy(model.state_dict())
    result = fit(model, _batches(), loss_fn=nn.functional.cross_entropy, max_steps=2, strategy=strategy,
                 precision="bf16-mixed", batch_size=4, progress=False)
    assert result.state_dict is not None
    for name, value in before.items():
        kept = result.state_dict[name]
        if name.startswith("head."):
            assert kept.dtype == torch.float32 and not torch.equal(kept, value), name  # it trained
        else:
            assert kept.dtype == value.dtype and torch.equal(kept, value), name  # frozen: as it came
            assert torch.equal(model.state_dict()[name], value), name
    tokens, labels = _batches()[0]
    with torch.no_grad():  # ZeRO-3's engine forward hooks were left on: "DeepSpeed backend not set"
        assert model(tokens).shape == (4, 4)


MODEL_PY = '''
import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, 128)
        self.head = nn.Linear(128, 4)

    def forward(self, tokens):
        return self.head(self.emb(tokens).mean(dim=1))


def model():
    net = Classifier()
    net.emb.weight.requires_grad = False
    return net


def batch(batch_size):
    return torch.randint(0, 1000, (batch_size, 8)), torch.randint(0, 4, (batch_size,))


def loss(output, batch):
    return nn.functional.cross_entropy(output, batch[1])
'''


def test_a_source_built_partitioned_hands_back_its_frozen_parameters_whole(tmp_path: Path) -> None:
    """A model.py under ZeRO-3 is built inside zero.Init, partitioned: its frozen embedding is gathered."""
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY)
    result = fit(str(path), None, max_steps=1, strategy="deepspeed_stage_3", batch_size=4, precision="32-true",
                 progress=False, cache=False)
    assert result.state_dict is not None and result.state_dict["emb.weight"].shape == (1000, 128)
    assert result.state_dict["emb.weight"].abs().sum() > 0
