"""fit() on a model source with no ``loss``: it trains on the loss the model returns, and refuses an output with
none (profiling's stand-in, the mean of the logits, trained the logits down and the labels were never read)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoshard.errors import UsageError
from autoshard.runtime import fit

_CNN = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4 * 8 * 8, 10)

    def forward(self, images):
        return self.head(torch.relu(self.conv(images)).flatten(1))


def model():
    return Net()


def batch(batch_size):
    return (torch.randn(batch_size, 3, 8, 8),)

'''


def _write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "model.py"
    path.write_text(body, encoding="utf-8")
    return str(path)


def test_a_model_file_whose_output_has_no_loss_is_refused_with_the_files_loss_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="with no loss: fit\\(\\) needs one") as caught:
        fit(_write(tmp_path, _CNN), max_steps=1, batch_size=2, progress=False, cache=False)
    assert "def loss(output, batch)" in (caught.value.hint or "")


def test_a_model_file_whose_forward_returns_the_loss_trains_on_it(tmp_path: Path) -> None:
    body = _CNN.replace("    def forward(self, images):\n        return self.head(",
                        "    def forward(self, images, labels):\n"
                        "        return torch.nn.functional.cross_entropy(self.head(")
    body = body.replace(".flatten(1))\n", ".flatten(1)), labels)\n").replace(
        "return (torch.randn(batch_size, 3, 8, 8),)",
        "return torch.randn(batch_size, 3, 8, 8), torch.randint(0, 10, (batch_size,))")
    result = fit(_write(tmp_path, body), max_steps=2, batch_size=2, progress=False, cache=False)
    assert len(result.losses) == 2 and all(loss > 1.0 for loss in result.losses)  # cross-entropy of 10 classes


def test_a_loss_fn_given_to_fit_serves_a_file_without_one(tmp_path: Path) -> None:
    import torch

    result = fit(_write(tmp_path, _CNN), max_steps=1, batch_size=2, progress=False, cache=False,
                 loss_fn=lambda output, batch: output.square().mean())
    assert len(result.losses) == 1 and torch.isfinite(torch.tensor(result.losses[0]))
