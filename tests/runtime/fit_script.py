"""A training script as a user writes it, for the fit() tests: ``python fit_script.py '<json options>'``.

It builds tiny-gpt2 with a fixed seed and no dropout, trains on a fixed list of batches (three distinct batches repeated, so
the loss falls), and prints one JSON line: ``RESULT {...}``. Options (all optional): ``strategy``,
``processes``, ``max_steps``, ``checkpoint_dir``, ``checkpoint_every``, ``resume``, ``precision``,
``accumulation`` (sets the global batch), ``fail`` (``{"rank": r, "step": s, "how": "raise" | "kill"}``),
``plan`` (a plan.json path), ``force``, ``checkpointing`` (the strategy's plan with activation checkpointing).
"""

from __future__ import annotations

import json
import os
import signal
import sys

import torch

from autoshard.models import load_source
from autoshard.runtime import fit


def _optimizer(name: str):  # type: ignore[no-untyped-def]
    if name == "sgd":
        return lambda params: torch.optim.SGD(params, lr=0.5)
    return lambda params: torch.optim.AdamW(params, lr=1e-2)


def main() -> None:
    options = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    torch.manual_seed(0)
    source = load_source("tiny-gpt2")
    model = source.build()
    # No dropout: backends draw random numbers at different moments, so masks would differ between them.
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        if hasattr(m, "dropout_p"):
            m.dropout_p = 0.0
    torch.manual_seed(1)
    data = [source.batch(2, seq_len=16) for _ in range(3)] * 8
    fail = options.get("fail")
    calls = {"n": 0}

    def loss_fn(output: object, batch: object) -> torch.Tensor:
        calls["n"] += 1
        if fail and int(os.environ.get("RANK", "0")) == fail["rank"] and calls["n"] == fail["step"]:
            if fail["how"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure on rank {fail['rank']}")
        return source.loss_fn(output, batch)  # type: ignore[misc]

    if options.get("checkpointing"):  # the planner's plan for the strategy, with activation checkpointing on
        from dataclasses import replace

        import autoshard
        from autoshard.export.plan_json import from_plan
        from autoshard.runtime.planning import module_source

        hardware = autoshard.detect_hardware(gpus=options.get("processes", 1))
        planned = autoshard.recommend(module_source(model, data[0], loss_fn=source.loss_fn), hardware=hardware,
                                      batch_size=2, precision="32-true", strategies=[options["strategy"]])
        options["plan"] = replace(from_plan(planned), activation_checkpointing=True)
        options.pop("strategy")
    kwargs = {k: options[k] for k in ("strategy", "processes", "checkpoint_dir", "checkpoint_every", "resume",
                                      "precision", "plan", "force") if k in options}
    result = fit(model, data, loss_fn=loss_fn, max_steps=options.get("max_steps", 4), batch_size=2, log_every=2,
                 optimizer=_optimizer(options.get("optimizer", "adamw")), **kwargs)
    digest = None
    if result.state_dict is not None:
        digest = sum(float(t.double().sum()) for t in result.state_dict.values())
    loaded = None
    if result.model is not None and result.world_size > 1 and os.environ.get("RANK") is None:
        # The launching process's module now holds the consolidated weights.
        loaded = sum(float(t.double().sum()) for t in result.model.state_dict().values())
    # One write per line: under torchrun both ranks share the pipe, and print() writes the newline apart.
    record = {"strategy": result.plan.strategy, "losses": result.losses, "rank": result.rank,
              "world_size": result.world_size, "steps": [s.step for s in result.steps],
              "resumed_from": result.resumed_from, "last_checkpoint": result.last_checkpoint,
              "state_digest": digest, "model_digest": loaded, "notes": list(result.notes), "pid": os.getpid()}
    sys.stdout.write("RESULT " + json.dumps(record) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
