"""Train the example GPT with the strategy autoshard recommends for this machine.

    python examples/train_gpt.py                   # one process (CPU or one GPU)
    python examples/train_gpt.py --processes 2     # two worker processes (GPUs, or gloo on CPU)
    torchrun --nproc-per-node 2 examples/train_gpt.py

fit() plans, starts one worker per device itself when asked for more than one, and returns rank 0's result.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import autoshard
from autoshard.models import load_source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=None, help="GPUs to use, or CPU processes")
    parser.add_argument("--strategy", default=None, help="plan only this strategy, e.g. fsdp")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--checkpoint-dir", default=None)
    args = parser.parse_args()

    source = load_source(Path(__file__).with_name("gpt") / "model.py")
    torch.manual_seed(0)
    model = source.build()
    torch.manual_seed(1)
    data = [source.batch(4, seq_len=64) for _ in range(4)]  # a small fixed set: the loss visibly falls
    result = autoshard.fit(model, data, loss_fn=source.loss_fn, processes=args.processes, strategy=args.strategy,
                           max_steps=args.steps, batch_size=4,
                           checkpointing=autoshard.Checkpointing(dir=args.checkpoint_dir),
                           optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3))
    if result.rank == 0:
        print(f"{result.plan.strategy} on {result.world_size} process(es), micro-batch {result.plan.micro_batch_size}")
        shown = list(result.steps[:: max(1, len(result.steps) // 5)])
        for step in shown + [s for s in result.steps[-1:] if s not in shown]:  # the last step, once
            print(f"step {step.step:4d}  loss {step.loss:.4f}  {step.samples_per_s:8.1f} samples/s")


if __name__ == "__main__":
    main()
