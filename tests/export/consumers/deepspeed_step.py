"""``deepspeed.initialize(config="ds_config.json")`` and two optimizer steps, under torchrun (DS_ACCELERATOR=cpu)."""
import json
import os
import sys

import deepspeed
import torch

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
                                  config="ds_config.json")
for _ in range(2 * engine.gradient_accumulation_steps()):
    micro = engine.train_micro_batch_size_per_gpu()
    x, y = torch.randn(micro, 8), torch.randn(micro, 1)
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    engine.step()
print("RESULT " + json.dumps({"steps": engine.global_steps, "stage": engine.zero_optimization_stage(),
                              "gradient_clipping": engine.gradient_clipping()}), flush=True)

# Leave without interpreter teardown once every rank is done: a gloo group left to it can abort the process after
# the work ("terminate called without an active exception", pytorch#65231), as autoshard's own workers avoid.
torch.distributed.barrier()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
