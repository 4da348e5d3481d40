"""``python fit_eval_script.py STRATEGY...``: fit() with eval_data on 2 processes per strategy; the launching
process prints ``RESULT {...}``: the scorings and the held-out loss of the model fit() returned, scored here."""

from __future__ import annotations

import json
import sys

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import autoshard


def main(strategies: list[str]) -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 1, generator=g)
    x, xv = torch.randn(128, 8, generator=g), torch.randn(40, 8, generator=g)
    for strategy in strategies:
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
        result = autoshard.fit(model, DataLoader(TensorDataset(x, x @ w), batch_size=8, shuffle=True),
                               eval_data=TensorDataset(xv, xv @ w), eval_every=4, loss_fn=F.mse_loss, epochs=1,
                               processes=2, strategy=strategy, optimizer=lambda p: torch.optim.SGD(p, lr=0.05),
                               progress=False)
        if not autoshard.is_worker():
            model.eval()
            with torch.no_grad():
                direct = F.mse_loss(model(xv), xv @ w).item()
            print("RESULT " + json.dumps({"strategy": strategy, "direct": direct,
                                          "evals": [e.to_dict() for e in result.evals]}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
