"""Fit a tiny model with the exported lightning_trainer.py (run in the export directory)."""
import json
import sys
from pathlib import Path

import lightning.pytorch as L
import torch
import torch.nn.functional as F


class GPT2Block(torch.nn.Module):  # named as the plan's block class
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.linear(x))


sys.modules["my_model"] = sys.modules[__name__]  # the snippet's `from my_model import ...`, where it has one
ns = {}
exec(Path("lightning_trainer.py").read_text(), ns)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Sequential(GPT2Block(), GPT2Block(), torch.nn.Linear(8, 1))

    def configure_model(self):
        if "shard" in ns:
            ns["shard"](self.model, self.device_mesh)

    def training_step(self, batch, i):
        x, y = batch
        return F.mse_loss(self.model(x).float(), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


trainer = ns["trainer"]
trainer.fit_loop.max_epochs = 1
data = torch.utils.data.TensorDataset(torch.randn(8, 8), torch.randn(8, 1))
net = Net()
trainer.fit(net, torch.utils.data.DataLoader(data, batch_size=int(sys.argv[1])))
policy = getattr(net.model, "_get_fsdp_state", None)
from autoshard.runtime.activation_checkpointing import checkpointed_mode  # noqa: E402

checkpointed = [checkpointed_mode(m) for m in net.model.modules() if checkpointed_mode(m) is not None]
reduce = str(policy()._mp_policy.reduce_dtype) if policy else None
if trainer.global_rank == 0:
    print("RESULT " + json.dumps({"strategy": type(trainer.strategy).__name__, "steps": trainer.global_step,
                                  "reduce_dtype": reduce, "checkpointed": checkpointed}))
