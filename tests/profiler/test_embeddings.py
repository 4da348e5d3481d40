"""Embedding tables no plan reproduces as written (a recommender-systems probe): ``sparse=True`` is refused in words
before the trace (the tracer failed in its own bookkeeping, blamed on the model), and ``max_norm`` tables say
what each strategy does with their in-place renormalisation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import autoshard
from autoshard.errors import ProfileError
from autoshard.planner.caveats import RENORMED

_MODEL = '''
import torch
from torch import nn


class Ranker(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList([nn.Embedding(1000, 16, {options}), nn.EmbeddingBag(500, 16, mode="sum")])
        self.mlp = nn.Sequential(nn.Linear(32 + 4, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, ids, bag, offsets, dense):
        x = torch.cat([self.tables[0](ids), self.tables[1](bag, offsets), dense], dim=-1)
        return self.mlp(x).squeeze(-1)


def model():
    return Ranker()


def batch(batch_size):
    return {{"ids": torch.randint(0, 1000, (batch_size,)), "bag": torch.randint(0, 500, (3 * batch_size,)),
             "offsets": torch.arange(batch_size) * 3, "dense": torch.randn(batch_size, 4)}}


def loss(output, batch):
    return output.square().mean()
'''


def _model_file(tmp_path: Path, options: str) -> Path:
    path = tmp_path / "ranker.py"
    path.write_text(_MODEL.format(options=options), encoding="utf-8")
    return path


def test_sparse_tables_are_refused_in_words_once_built_before_any_step(tmp_path: Path) -> None:
    path = _model_file(tmp_path, "sparse=True")
    with pytest.raises(ProfileError, match=r"sparse=True \(tables\.0\) give sparse gradients") as raised:
        autoshard.recommend(str(path), hardware=autoshard.detect_hardware(gpus=2), batch_size=4)
    assert "sparse=False" in (raised.value.hint or "")


def test_the_cli_refuses_sparse_tables_in_two_lines(tmp_path: Path) -> None:
    path = _model_file(tmp_path, "sparse=True")
    done = subprocess.run([sys.executable, "-m", "autoshard", "profile", str(path), "--batch-size", "4"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 0 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and "sparse=True (tables.0)" in lines[0] and "Traceback" not in done.stderr


def test_fit_refuses_a_module_with_sparse_tables_before_training() -> None:
    tables = nn.Embedding(100, 8, sparse=True)
    model = nn.Sequential(tables, nn.Linear(8, 1))
    data = [torch.randint(0, 100, (4,)) for _ in range(2)]
    with pytest.raises(ProfileError, match=r"sparse=True \(0\)"):
        autoshard.fit(model, data, loss_fn=lambda out, batch: out.mean(), max_steps=1, progress=False)


@pytest.mark.parametrize(("strategy", "gpus", "said"), [
    ("ddp", 2, "each rank renormalises the rows its own batch looks up in its own replica"),
    ("ddp", 1, None),
    ("fsdp", 1, "FSDP2 renormalises the table it gathered"),
    ("deepspeed_stage_2", 2, "the optimizer's own copy overwrites"),
])
def test_max_norm_tables_say_what_each_strategy_does_with_their_renormalisation(
        tmp_path: Path, strategy: str, gpus: int, said: str | None) -> None:
    path = _model_file(tmp_path, "max_norm=1.0")
    plan = autoshard.recommend(str(path), hardware=autoshard.detect_hardware(gpus=gpus), batch_size=4,
                               strategies=[strategy])
    assert plan.workload.renormed_embeddings == ("tables.0",)
    lines = [line for line in plan.explanation if line.startswith(RENORMED)]
    if said is None:
        assert lines == []  # one process holding the whole model trains it as written
    else:
        (line,) = lines
        assert f"under {strategy}: tables.0 renormalise" in line and said in line and "clamp(max=1)" in line


def test_fit_repeats_the_max_norm_line_among_its_notes(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Embedding(100, 8, max_norm=1.0), nn.Linear(8, 1))
    data = [torch.randint(0, 100, (4,)) for _ in range(2)]
    result = autoshard.fit(model, data, loss_fn=lambda out, batch: out.mean(), max_steps=1, progress=False,
                           strategy="fsdp")
    assert any(note.startswith(f"{RENORMED} under fsdp: 0 renormalise") for note in result.notes)
