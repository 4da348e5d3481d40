"""One rank of ``test_zero_init_build.py``: build every tiny catalog model inside ``deepspeed.zero.Init`` and
compare it, parameter by parameter, with the same seed's ordinary whole build.

``python zero_init_build_script.py RANK WORLD PORT``; prints one ``RESULT {...}`` line per model on rank 0.
"""

from __future__ import annotations

import json
import os
import sys

import torch


def main() -> None:
    rank, world, port = (int(a) for a in sys.argv[1:4])
    os.environ.update(DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import torch.distributed as dist

    dist.init_process_group("gloo")
    import deepspeed

    from autoshard.models import catalog, load_source

    deepspeed.init_distributed(dist_backend="gloo")
    config = {"train_batch_size": world, "zero_optimization": {"stage": 3}}
    for name in sorted(n for n in catalog.names() if n.startswith("tiny-")):
        source = load_source(name)
        torch.manual_seed(0)
        with deepspeed.zero.Init(config_dict_or_path=config):
            sharded = source.build()
        torch.manual_seed(0)
        whole = source.build()
        partition_elements = sum(p.ds_tensor.numel() for p in sharded.parameters())
        mismatched = []
        for (key, param), (_, reference) in zip(sharded.named_parameters(), whole.named_parameters(), strict=True):
            with deepspeed.zero.GatheredParameters([param]):
                if param.shape != reference.shape or not torch.equal(param.data, reference.data):
                    mismatched.append(key)
        if rank == 0:
            record = {"model": name, "mismatched": mismatched, "partition_elements": partition_elements,
                      "whole_elements": sum(p.numel() for p in whole.parameters()),
                      "largest_parameter": max(p.numel() for p in whole.parameters())}
            print("RESULT " + json.dumps(record), flush=True)
    dist.destroy_process_group()
    # What this script checks is printed above. Leave without interpreter teardown: a gloo worker thread can
    # still abort it ("terminate called without an active exception", pytorch#65231), seen once in CI here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
