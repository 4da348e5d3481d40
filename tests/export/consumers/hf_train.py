"""Two steps of ``transformers.Trainer`` with the exported HF arguments (DeepSpeed plan), under torchrun."""
import json
import shlex
from pathlib import Path

import torch
from transformers import HfArgumentParser, Trainer, TrainingArguments


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 1)

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.linear(x), labels)}


words = shlex.split(Path("hf_trainer_args.txt").read_text())  # "python train.py ..." or "torchrun ... train.py ..."
flags = words[words.index("train.py") + 1:]
(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
    ["--output_dir", "out", "--max_steps", "2", "--use_cpu", "--report_to", "none", "--save_strategy", "no", *flags])
data = [{"x": torch.randn(8), "labels": torch.randn(1)} for _ in range(16)]
result = Trainer(model=Model(), args=args, train_dataset=data).train()
print("RESULT " + json.dumps({"steps": result.global_step, "max_grad_norm": args.max_grad_norm}), flush=True)
