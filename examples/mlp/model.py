"""A tiny MLP classifier: the smallest file that follows autoshard's model-file convention.

A model file defines ``model()`` (returns the ``nn.Module``) and ``batch(batch_size)`` (returns one training
step's inputs). Here ``batch`` returns a tuple ``(images, labels)``, so autoshard calls ``model(images, labels)``;
the forward returns the cross-entropy loss, so no ``loss`` function is needed (the default reduces the output),
and no ``optimizer`` either (autoshard picks AdamW).

Try it::

    autoshard profile examples/mlp/model.py
    python examples/mlp/model.py            # a few plain training steps on CPU
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IN_FEATURES = 784
HIDDEN = 256
CLASSES = 10


class MLP(nn.Module):
    """Two hidden layers; ``forward(x, y)`` returns the mean cross-entropy of ``x``'s logits against ``y``."""

    def __init__(self, in_features: int = IN_FEATURES, hidden: int = HIDDEN, classes: int = CLASSES) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(x), y)


def model() -> nn.Module:
    """Build the module (autoshard decides the device: real, meta or fake tensors)."""
    return MLP()


def batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's inputs: random "images" and labels, created on the current default device."""
    return torch.randn(batch_size, IN_FEATURES), torch.randint(0, CLASSES, (batch_size,))


if __name__ == "__main__":
    net = model()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    for step in range(5):
        loss = net(*batch(32))
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}: loss {loss.item():.4f}")
