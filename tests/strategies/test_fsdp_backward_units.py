"""Which FSDP2 units backward gathers again, against FSDP2 itself (two gloo processes): a frozen teacher run under
``no_grad`` is not (a multi-model probe: the step-time model re-gathered all 24 teacher blocks of a distillation
model in backward, 6.5 GB a step, where FSDP2 gathered the student's and the one teacher block it prefetches)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.strategies.gloo_harness import run_gloo

DISTILL_PY = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        return x + torch.tanh(self.fc(x))


class Distill(nn.Module):
    def __init__(self):
        super().__init__()
        self.teacher = nn.Sequential(*(Block() for _ in range(4))).requires_grad_(False)
        self.student = nn.Sequential(*(Block() for _ in range(2)))
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        with torch.no_grad():
            target = self.teacher(x)
        return (self.head(self.student(x)) - target.mean(-1, keepdim=True)).square().mean()


def model():
    return Distill()


def batch(batch_size):
    return torch.randn(batch_size, 32)
'''


def unshard_rank(*, rank: int, world_size: int, path: str) -> dict[str, Any]:
    """Shard the model as fit()'s FSDP backend does (each block, then the root) and count the units each pass
    all-gathers."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_param import ShardedState
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    from autoshard.models import load_source

    net = load_source(path).build()
    for block in (*net.teacher, *net.student):
        fully_shard(block)
    fully_shard(net)
    counts = {"forward": 0, "backward": 0}
    phase = ["forward"]
    unshard = FSDPParamGroup.unshard

    def counting(self: FSDPParamGroup, *args: Any, **kwargs: Any) -> Any:
        if self._sharded_state != ShardedState.UNSHARDED and self._all_gather_result is None:
            counts[phase[0]] += 1
        return unshard(self, *args, **kwargs)

    FSDPParamGroup.unshard = counting  # type: ignore[method-assign]
    loss = net(torch.randn(4, 32))
    phase[0] = "backward"
    loss.backward()
    return counts


def test_backward_gathers_the_units_it_reaches_as_fsdp2_does(tmp_path: Path) -> None:
    from autoshard.hardware import detect_hardware
    from autoshard.models import load_source
    from autoshard.strategies import Candidate, build_workload, get

    path = tmp_path / "distill.py"
    path.write_text(DISTILL_PY, encoding="utf-8")
    measured = run_gloo("tests.strategies.test_fsdp_backward_units:unshard_rank", world_size=2,
                        kwargs={"path": str(path)}, timeout_s=180)[0]
    workload = build_workload(load_source(str(path)), precision="32-true", target="cpu")
    candidate = Candidate(strategy="fsdp", micro_batch_size=4, activation_checkpointing=False, settings={})
    cost = get("fsdp").cost(workload, detect_hardware(gpus=2), candidate)
    forward, backward = [c for c in cost.collectives if c.kind == "all_gather"]
    assert measured["forward"] == forward.calls == 7  # the root and the six blocks
    # The student's two blocks, and the teacher's last, which the first student block prefetches: of 4 + 2.
    assert measured["backward"] == backward.calls == 3
    assert backward.bytes == 3 * (32 * 32 + 32) * 4
