"""fit() of the catalog tiny-t5 under FSDP2, for tests/runtime/test_fsdp_units.py.

Run under ``torchrun --nproc-per-node 2 fsdp_units_script.py N`` (each rank keeps its sharded module after
fit(): the script makes the process group), it trains two steps on CPU with ``blocks_per_unit=N`` and activation
checkpointing and prints one line ``RESULT {...}`` per rank: the rank, the losses and the ``fully_shard`` units, each the module names sharing one
FSDP state, in module order.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import torch

import autoshard
from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint
from autoshard.models import load_source
from autoshard.runtime import fit
from autoshard.runtime.planning import model_fingerprint
from autoshard.strategies import get


def main() -> None:
    import torch.distributed as dist

    # A group of the script's own: fit() joins it and leaves it up, so every rank keeps its sharded module (where
    # fit() makes the group, rank 0's comes back plain).
    dist.init_process_group("gloo")
    blocks_per_unit = int(sys.argv[1])
    torch.manual_seed(0)
    source = load_source("tiny-t5")
    model = source.build()
    hw = replace(autoshard.detect_hardware(gpus=2), nodes=1, processes_per_node=2)
    fsdp = get("fsdp")
    settings = {k.name: k.default for k in fsdp.knobs(hw)} | {"blocks_per_unit": blocks_per_unit}
    plan = ExportedPlan(
        strategy="fsdp", family=fsdp.family, micro_batch_size=2, gradient_accumulation=1,
        activation_checkpointing=True, settings=settings, precision="32-true", optimizer="adamw", seq_len=16,
        model=model_fingerprint(model, "tiny-t5"),
        hardware=HardwareFingerprint(gpu=None, gpu_memory_bytes=None, gpus_per_node=2, nodes=1, device_type="cpu",
                                     backend="gloo", nvme_path=None))
    data = [source.batch(2, seq_len=16) for _ in range(2)]
    result = fit(model, data, loss_fn=source.loss_fn, max_steps=2, batch_size=2, plan=plan,
                 optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3))
    if result.model is None:
        raise SystemExit("run this script under torchrun: fit()'s own workers do not return the sharded module")
    from torch.distributed.fsdp import FSDPModule, fully_shard

    from autoshard.runtime.activation_checkpointing import checkpointed_mode

    units: dict[int, list[str]] = {}
    for name, module in result.model.named_modules():
        if isinstance(module, FSDPModule):
            units.setdefault(id(fully_shard.state(module)), []).append(name)
    record = {"rank": result.rank, "losses": result.losses, "units": list(units.values()),
              "classes": sorted({type(m).__name__ + (f" ({checkpointed_mode(m)})" if checkpointed_mode(m) else "")
                                 for m in result.model.modules() if isinstance(m, FSDPModule)})}
    sys.stdout.write("RESULT " + json.dumps(record) + "\n")
    sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
