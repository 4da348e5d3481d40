"""Parameters the step writes in place in forward (a multi-model probe: an EMA kept by ``lerp_`` at the top of
forward moved under DDP, only in its blocks under FSDP2 and not at all under ZeRO-3, with no word from the plan):
the trace records them and a sharded plan says what becomes of the writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import autoshard
from autoshard.planner.caveats import RENORMED, WRITTEN

EMA_PY = '''
import copy

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return x + torch.relu(self.fc(x))


class WithEMA(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(Block(), Block(), nn.Linear(16, 1))
        self.ema = copy.deepcopy(self.net).requires_grad_(False)

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                {update}
        return self.net(x)


def model():
    return WithEMA()


def batch(batch_size):
    return torch.randn(batch_size, 16)
'''
LERP = "for e, p in zip(self.ema.parameters(), self.net.parameters()):\n                    e.lerp_(p, 0.1)"
FOREACH = "torch._foreach_lerp_(list(self.ema.parameters()), list(self.net.parameters()), 0.1)"


@pytest.mark.parametrize("update", [LERP, FOREACH], ids=["lerp", "foreach"])
def test_the_trace_names_the_modules_whose_parameters_forward_writes(tmp_path: Path, update: str) -> None:
    (tmp_path / "ema.py").write_text(EMA_PY.format(update=update), encoding="utf-8")
    assert autoshard.profile(str(tmp_path / "ema.py"), batch_size=2).written_modules == ("ema",)


def test_an_optimizer_step_and_a_models_own_buffers_are_not_writes_in_forward() -> None:
    # The optimizer writes every parameter in place, BatchNorm its running statistics (buffers) in forward.
    for model in ("tiny-gpt2", "tiny-resnet"):
        assert autoshard.profile(model, batch_size=2).written_modules == ()


@pytest.mark.parametrize(("strategy", "said"), [("fsdp", True), ("deepspeed_stage_3", True), ("ddp", False),
                                                ("deepspeed_stage_2", False)])
def test_a_sharded_plan_says_what_becomes_of_the_writes(tmp_path: Path, strategy: str, said: bool) -> None:
    (tmp_path / "ema.py").write_text(EMA_PY.format(update=LERP), encoding="utf-8")
    plan = autoshard.recommend(str(tmp_path / "ema.py"), hardware=autoshard.detect_hardware(gpus=2), batch_size=2,
                               strategies=[strategy])
    lines = [line for line in plan.explanation if line.startswith(WRITTEN)]
    if not said:
        assert lines == []
    else:
        (line,) = lines
        assert f"under {strategy}: the step writes the parameters of ema in place" in line
        assert "after the optimizer step" in line


def test_fit_repeats_the_line_and_max_norm_tables_keep_their_own() -> None:
    net = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    ema = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1)).requires_grad_(False)

    class WithEMA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net, self.ema = net, ema

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                torch._foreach_lerp_(list(self.ema.parameters()), list(self.net.parameters()), 0.1)
            return self.net(x)

    data = [torch.randn(4, 8) for _ in range(2)]
    result = autoshard.fit(WithEMA(), data, loss_fn=lambda out, batch: out.square().mean(), max_steps=1,
                           progress=False, strategy="fsdp")
    assert any(note.startswith(f"{WRITTEN} under fsdp: the step writes the parameters of ema") for note in result.notes)
    tables = nn.Sequential(nn.Embedding(100, 8, max_norm=1.0), nn.Linear(8, 1))
    ids = [torch.randint(0, 100, (4,)) for _ in range(2)]
    result = autoshard.fit(tables, ids, loss_fn=lambda out, batch: out.mean(), max_steps=1, progress=False,
                           strategy="fsdp")
    assert any(note.startswith(RENORMED) for note in result.notes)
    assert not any(note.startswith(WRITTEN) for note in result.notes)  # one line for the table, not two


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class _BufferEMA(nn.Module):
    """An EMA kept as buffers, updated from the blocks' parameters at the top of forward (FSDP2 units: sharded
    there)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(2))
        self.head = nn.Linear(8, 1)
        for i, block in enumerate(self.blocks):
            self.register_buffer(f"ema{i}", block.fc.weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for i, block in enumerate(self.blocks):
                getattr(self, f"ema{i}").lerp_(block.fc.weight, 0.1)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_a_forward_reading_sharded_parameters_is_told_so_not_to_check_its_data() -> None:
    from autoshard.errors import UserCodeError

    with pytest.raises(UserCodeError, match="the model failed on the first batch") as info:
        autoshard.fit(_BufferEMA(), [torch.randn(4, 8) for _ in range(2)], loss_fn=lambda out, b: out.mean(),
                      max_steps=1, progress=False, strategy="fsdp")
    hint = info.value.hint or ""
    assert "another module's parameters in forward" in hint and "Check what your data" not in hint
