"""A checkpointed block's BatchNorm updates its running statistics once a step, as without checkpointing (the
recomputation in backward ran it in training mode again: num_batches_tracked was 4 after 2 steps, the momentum
applied twice, under fit()'s checkpointing of a ResNet)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autoshard.runtime.activation_checkpointing import checkpoint_blocks, restore_blocks


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.norm(self.conv(x)))


def _trained(checkpointing: str | None) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    net = nn.Sequential(_Block(), _Block())
    if checkpointing is not None:
        assert checkpoint_blocks(net, ("0", "1"), checkpointing) == 2
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        net(torch.randn(2, 4, 6, 6, generator=g)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    restore_blocks(net)
    return {name: t.detach().clone() for name, t in net.state_dict().items()}


@pytest.mark.parametrize("checkpointing", ["full", "op"])
def test_running_statistics_are_those_of_a_run_without_checkpointing(checkpointing: str) -> None:
    plain, checkpointed = _trained(None), _trained(checkpointing)
    assert checkpointed["0.norm.num_batches_tracked"].item() == plain["0.norm.num_batches_tracked"].item() == 3
    for name, value in plain.items():
        torch.testing.assert_close(checkpointed[name], value, msg=name)
