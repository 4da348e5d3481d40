"""A training script that calls ``fit()`` several times, as people write them: a loop over learning rates, a call
that fails and is caught, one run only outside the workers, then another phase on the same module. Each
multi-process call starts workers that run this script again from the top.

``python fit_calls_script.py OUT_DIR`` writes ``OUT_DIR/calls.json`` (from the launching process): each call's
steps, micro-batch and the weights it started from and ended with.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import autoshard


def loader(batch_size: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=batch_size)


def weights(model: nn.Module) -> list[float]:
    return [round(float(v), 6) for v in torch.cat([p.detach().flatten() for p in model.parameters()])]


def main(out: Path) -> None:
    model = nn.Linear(4, 1)  # not seeded: every process initialises it differently
    record: list[dict] = []

    def call(tag: str, lr: float, batch_size: int, processes: int) -> None:
        before = weights(model)
        result = autoshard.fit(model, loader(batch_size), loss_fn=F.mse_loss, processes=processes, max_steps=2,
                               optimizer=lambda p: torch.optim.SGD(p, lr=lr), strategy="ddp")
        record.append({"tag": tag, "steps": len(result.steps), "micro_batch": result.plan.micro_batch_size,
                       "world_size": result.world_size, "before": before, "after": weights(model)})

    for lr, batch_size in ((0.0, 4), (0.05, 8)):  # one line, two calls
        call(f"loop-lr{lr}", lr, batch_size, processes=2)
    try:
        autoshard.fit(model, loader(4), loss_fn=F.mse_loss, batch_size=3, processes=2)
    except autoshard.UsageError as e:
        record.append({"tag": "refused", "message": e.message})
    if not autoshard.is_worker():
        call("launcher-only", 0.05, 4, processes=1)
    call("after", 0.0, 2, processes=2)
    if not autoshard.is_worker():
        (out / "calls.json").write_text(json.dumps(record), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
