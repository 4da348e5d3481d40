"""A training script as a user writes it, for the fit() tests: ``python fit_script.py '<json options>'``.

It builds tiny-gpt2 with a fixed seed and no dropout, trains on a fixed list of batches (three distinct batches repeated, so
the loss falls), and prints one JSON line: ``RESULT {...}``. Options (all optional): ``strategy``,
``processes``, ``max_steps``, ``optimizer`` (``adamw``, ``sgd``, ``adamw8bit``; ``bnb:<Class>`` /
``bnb-factory:<Class>``: a bitsandbytes optimizer class, or a factory building one), ``checkpoint_dir``,
``checkpoint_every``, ``resume`` (passed as ``Checkpointing(dir=, every=, resume=)``), ``precision``,
``fail`` (``{"rank": r, "step": s, "how": "raise" | "kill"}``),
``plan`` (a plan.json path), ``force``, ``checkpointing`` (the strategy's plan with activation checkpointing),
``plan_for`` (``{"strategy": s, "precision": p, "nodes": n}``: a plan built by hand for ``processes`` ranks over
``n`` simulated nodes, without the planner, which refuses ``fsdp_cpu_offload`` and ``fsdp_hybrid`` on one
CPU machine), ``report_shards`` (add each parameter's mesh, placements and local fraction under a launcher,
in a process group the script makes, so that every rank keeps its shards).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import torch

from autoshard.models import load_source
from autoshard.runtime import Checkpointing, fit


def _optimizer(name: str):  # type: ignore[no-untyped-def]
    if name == "adamw8bit":  # by name: fit() builds bitsandbytes' AdamW8bit itself
        return name
    if name.startswith(("bnb:", "bnb-factory:")):  # a bitsandbytes class, or a factory building one
        import bitsandbytes

        how, cls_name = name.split(":")
        cls = getattr(bitsandbytes.optim, cls_name)
        return cls if how == "bnb" else (lambda params: cls(params, lr=1e-3))
    if name == "sgd":
        return lambda params: torch.optim.SGD(params, lr=0.5)
    return lambda params: torch.optim.AdamW(params, lr=1e-2)


def _plan_for(model: torch.nn.Module, spec: dict, processes: int):  # type: ignore[no-untyped-def]
    """An ExportedPlan for ``spec["strategy"]`` with its knobs' defaults, on ``spec["nodes"]`` CPU "nodes"."""
    from dataclasses import replace

    import autoshard
    from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint
    from autoshard.runtime.planning import model_fingerprint
    from autoshard.strategies import get

    nodes = int(spec.get("nodes", 1))
    hw = replace(autoshard.detect_hardware(gpus=processes), nodes=nodes, processes_per_node=processes // nodes)
    strategy = get(spec["strategy"])
    return ExportedPlan(
        strategy=spec["strategy"], family=strategy.family, micro_batch_size=2, gradient_accumulation=1,
        activation_checkpointing=False, settings={k.name: k.default for k in strategy.knobs(hw)},
        precision=spec.get("precision", "32-true"), optimizer="adamw", seq_len=16,
        model=model_fingerprint(model, "tiny-gpt2"),
        hardware=HardwareFingerprint(gpu=None, gpu_memory_bytes=None, gpus_per_node=processes // nodes, nodes=nodes,
                                     device_type="cpu", backend="gloo", nvme_path=None))


def _shards(model: torch.nn.Module) -> list[dict]:
    """Each DTensor parameter's mesh shape and names, placements, local / global element counts, local sum."""
    from torch.distributed.tensor import DTensor

    out = []
    for name, p in model.named_parameters():
        if isinstance(p, DTensor):
            out.append({"name": name, "mesh": list(p.device_mesh.shape),
                        "mesh_dims": list(p.device_mesh.mesh_dim_names or ()),
                        "placements": [str(x) for x in p.placements], "local": p.to_local().numel(),
                        "global": p.numel(), "local_sum": float(p.to_local().double().sum())})
    return out


def main() -> None:
    options = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    own_group = bool(options.get("report_shards")) and os.environ.get("RANK") is not None
    if own_group:  # fit() joins a group the script made and leaves every rank its shards to report
        import torch.distributed as dist

        dist.init_process_group("gloo")
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
        from autoshard.planner.plan_file import from_plan
        from autoshard.runtime.planning import module_source

        hardware = autoshard.detect_hardware(gpus=options.get("processes", 1))
        planned = autoshard.recommend(module_source(model, data[0], loss_fn=source.loss_fn), hardware=hardware,
                                      batch_size=2, precision="32-true", strategies=[options["strategy"]])
        options["plan"] = replace(from_plan(planned), activation_checkpointing=True)
        options.pop("strategy")
    if options.get("plan_for"):
        options["plan"] = _plan_for(model, options["plan_for"], options.get("processes") or int(
            os.environ.get("WORLD_SIZE", "1")))
    kwargs: dict[str, Any] = {k: options[k] for k in ("strategy", "processes", "precision", "plan", "force")
                              if k in options}
    if "checkpoint_dir" in options or "resume" in options:
        kwargs["checkpointing"] = Checkpointing(dir=options.get("checkpoint_dir"),
                                                every=options.get("checkpoint_every"),
                                                resume=options.get("resume", False))
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
              "state_digest": digest, "model_digest": loaded, "notes": list(result.notes), "pid": os.getpid(),
              "model_plain": result.model is not None and not any(
                  type(p).__name__ == "DTensor" for p in result.model.parameters())}
    if options.get("report_shards") and result.model is not None:
        record["shards"] = _shards(result.model)
    sys.stdout.write("RESULT " + json.dumps(record) + "\n")
    sys.stdout.flush()
    if own_group:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
