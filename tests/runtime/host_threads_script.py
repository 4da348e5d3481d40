"""fit() with a plan whose optimizer steps on the host, as a user's script: ``python host_threads_script.py DIR
STRATEGY``. Each of the two workers fit() starts writes ``DIR/rank<N>.json``: the ``OMP_NUM_THREADS`` it was
started with and torch's intra-op threads, read in its first training step."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from autoshard.runtime import fit


def _plan(model: torch.nn.Module, strategy: str):  # type: ignore[no-untyped-def]
    """A plan for two CPU processes built by hand: the planner refuses fsdp_cpu_offload without a GPU."""
    import autoshard
    from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint
    from autoshard.runtime.planning import model_fingerprint
    from autoshard.strategies import get

    s = get(strategy)
    knobs = s.knobs(autoshard.detect_hardware(gpus=2))
    return ExportedPlan(
        strategy=strategy, family=s.family, micro_batch_size=4, gradient_accumulation=1,
        activation_checkpointing=False, settings={k.name: k.default for k in knobs},
        precision="32-true", optimizer="adamw", seq_len=None, model=model_fingerprint(model, "mlp"),
        hardware=HardwareFingerprint(gpu=None, gpu_memory_bytes=None, gpus_per_node=2, nodes=1, device_type="cpu",
                                     backend="gloo", nvme_path=None))


def main() -> None:
    out, strategy = Path(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    data = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(2)]

    def step(m: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        rank = os.environ.get("RANK", "0")
        record = {"omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "torch_threads": torch.get_num_threads()}
        (out / f"rank{rank}.json").write_text(json.dumps(record), encoding="utf-8")
        x, y = batch
        return F.mse_loss(m(x), y)

    fit(model, data, training_step=step, max_steps=1, batch_size=4, progress=False, plan=_plan(model, strategy),
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3))


if __name__ == "__main__":
    main()
