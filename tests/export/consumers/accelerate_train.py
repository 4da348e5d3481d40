"""Two optimizer steps under ``accelerate launch`` (run in the export directory); rank 0 prints ``RESULT {...}``.

``sys.argv[1]`` is what to check: ``deepspeed`` (the engine from ds_config.json), ``hybrid`` (the parallelism
config accelerate's launcher hands the ranks) or ``ddp`` (a plain ``Accelerator()`` started by launch.sh's
torchrun line: its ranks train together).
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator


def result(**values):
    if int(os.environ.get("RANK", "0")) == 0:
        print("RESULT " + json.dumps(values), flush=True)


def train(accelerator, model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
    model, opt, loader = accelerator.prepare(model, opt, torch.utils.data.DataLoader(data, batch_size=2))
    for step, (x, y) in enumerate(loader):
        accelerator.backward(F.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
        if step == 1:
            return model


model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
if sys.argv[1] == "ddp":  # a plain Accelerator under launch.sh's torchrun line on CPU processes
    accelerator = Accelerator()
    trained = train(accelerator, model)
    total = torch.tensor([sum(p.detach().sum().item() for p in trained.parameters())])
    sums = [torch.zeros(1) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(sums, total)
    result(world=torch.distributed.get_world_size(), distributed_type=accelerator.distributed_type.value,
           synced=len({round(t.item(), 6) for t in sums}) == 1)
elif sys.argv[1] == "deepspeed":
    engine = train(Accelerator(), model)
    result(world=torch.distributed.get_world_size(), train_batch_size=engine.train_batch_size(),
           gradient_clipping=engine.gradient_clipping())
else:
    # accelerate 1.15.0 runs FSDP only on accelerators (on CPU its state has one process), so the check stops at
    # the parallelism config the launcher gave the ranks and the 2-D mesh accelerate builds from it.
    from accelerate.parallelism_config import ParallelismConfig

    torch.distributed.init_process_group("gloo")
    config = ParallelismConfig()  # reads the launcher's PARALLELISM_CONFIG_* variables
    mesh = config.build_device_mesh("cpu")
    result(enabled=os.environ.get("ACCELERATE_USE_PARALLELISM_CONFIG"), dp_replicate=config.dp_replicate_size,
           dp_shard=config.dp_shard_size, mesh=list(mesh.mesh_dim_names or ()), shape=list(mesh.shape))

# Leave without interpreter teardown once every rank is done: a gloo group left to it can abort the process after
# the work ("terminate called without an active exception", pytorch#65231), as autoshard's own workers avoid.
torch.distributed.barrier()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
