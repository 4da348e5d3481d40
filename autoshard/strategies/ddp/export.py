"""DDP's part of the hand-off files (:class:`~autoshard.export.family.FamilyExporter`): no file of its own, the
constructor arguments and comm hook in Lightning's ``DDPStrategy``, the bucket size and unused-parameter search in
the HF Trainer's flags.

Names: Lightning 2.5 ``DDPStrategy(ddp_comm_state, ddp_comm_hook, **kwargs)`` (the kwargs go to
``DistributedDataParallel``); transformers 5.23 ``--ddp_bucket_cap_mb``, ``--ddp_find_unused_parameters``;
accelerate 1.15 ``distributed_type`` ``MULTI_GPU`` / ``MULTI_CPU`` / ``NO``.
"""

from __future__ import annotations

from typing import Any

from autoshard.export.family import LightningPart
from autoshard.export.trainer_flags import checkpointing_flag
from autoshard.planner.plan_file import ExportedPlan

_ACCELERATE_HOOKS = {"fp16_compress": "fp16", "bf16_compress": "bf16", "powersgd": "power_sgd"}
"""autoshard comm hook → accelerate 1.15.0 ``DDPCommunicationHookType`` value (``utils/dataclasses.py``)."""
_HOOKS = {"fp16_compress": "default_hooks.fp16_compress_hook", "bf16_compress": "default_hooks.bf16_compress_hook"}


class DDPExporter:
    """DDP's part of each file."""

    def files(self, exported: ExportedPlan, *, validate: bool) -> dict[str, str]:
        """None: everything DDP needs fits the shared files."""
        return {}

    def accelerate(self, exported: ExportedPlan, *, ds_config_file: str) -> dict[str, Any]:
        """``MULTI_CPU`` for CPU processes, ``MULTI_GPU`` for several GPUs, ``NO`` for one."""
        hw = exported.hardware
        if hw.device_type == "cpu":
            return {"distributed_type": "MULTI_CPU"}
        return {"distributed_type": "MULTI_GPU" if hw.world_size > 1 else "NO"}

    def lightning(self, exported: ExportedPlan, *, ds_config_file: str) -> LightningPart:
        """``DDPStrategy`` with the bucket, gradient-view, static-graph and unused-parameter settings and the
        comm hook (PowerSGD with its state); on one device Lightning's ``"auto"`` (its single-device strategy: no
        DDP wrapper, as ``fit()`` trains one device)."""
        if exported.hardware.world_size == 1:
            return LightningPart(imports=[], strategy='"auto"')
        s = exported.settings
        lines = ["from lightning.pytorch.strategies import DDPStrategy"]
        args = [f"bucket_cap_mb={s['bucket_cap_mb']!r}", f"gradient_as_bucket_view={s['gradient_as_bucket_view']!r}",
                f"static_graph={s['static_graph']!r}", f"find_unused_parameters={s['find_unused_parameters']!r}"]
        hook = s.get("comm_hook", "none")
        if hook in _HOOKS:
            lines.append("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks")
            args.append(f"ddp_comm_hook={_HOOKS[hook]}")
        elif hook == "powersgd":
            lines.append("from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD")
            args += [(f"ddp_comm_state=powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank="
                     f"{s['matrix_approximation_rank']!r}, start_powerSGD_iter={s['start_powerSGD_iter']!r})"),
                     "ddp_comm_hook=powerSGD.powerSGD_hook"]
        return LightningPart(imports=lines, strategy=f"DDPStrategy({', '.join(args)})")

    def hf_trainer(self, exported: ExportedPlan, *, ds_config_file: str, fsdp_config_file: str) -> list[str]:
        """The bucket size, the unused-parameter search and, with checkpointing, the Trainer's switch
        (:func:`~autoshard.export.trainer_flags.checkpointing_flag`)."""
        s = exported.settings
        args = ["--ddp_bucket_cap_mb", str(int(s["bucket_cap_mb"])),
                "--ddp_find_unused_parameters", str(bool(s["find_unused_parameters"])).lower()]
        if exported.checkpoints_every_block:
            args.append(checkpointing_flag())
        return args

    def accelerate_handlers(self, exported: ExportedPlan) -> dict[str, dict[str, Any]]:
        """``DistributedDataParallelKwargs`` with every DDP setting of the plan: accelerate 1.15.0 reads them only
        from that handler (``utils/dataclasses.py``), its config file has no key for them."""
        s = exported.settings
        kwargs: dict[str, Any] = {k: s[k] for k in ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph",
                                                    "find_unused_parameters") if k in s}
        hook = s.get("comm_hook", "none")
        if hook != "none":
            kwargs["comm_hook"] = _ACCELERATE_HOOKS[hook]
        if hook == "powersgd":
            kwargs["comm_state_option"] = {"matrix_approximation_rank": s["matrix_approximation_rank"],
                                           "start_powerSGD_iter": s["start_powerSGD_iter"]}
        return {"DistributedDataParallelKwargs": kwargs}

    def launchers(self, exported: ExportedPlan, *, script: str) -> list[str]:
        """None besides torchrun."""
        return []

    def notes(self, exported: ExportedPlan) -> list[str]:
        """What the Accelerate config file cannot say (every DDP setting) and what the HF Trainer drops."""
        kwargs = self.accelerate_handlers(exported)["DistributedDataParallelKwargs"]
        text = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        out = [("accelerate_config.yaml has no keys for DDP's settings: pass Accelerator(kwargs_handlers=["
                f"DistributedDataParallelKwargs({text})]) (or autoshard.export.accelerate.kwargs_handlers(plan)).")]
        if exported.gradient_accumulation > 1:
            out.append(f"Accumulating {exported.gradient_accumulation} micro-batches: accelerate_config.yaml has no "
                       "key for it under DDP: build the Accelerator with gradient_accumulation_steps="
                       f"{exported.gradient_accumulation} and run each micro-batch in `with accelerator.accumulate("
                       "model):` (the HF Trainer arguments and the Lightning snippet set it).")
        if exported.settings.get("comm_hook", "none") != "none":
            out.append(f"comm_hook={exported.settings['comm_hook']} is not in the HF Trainer arguments; register "
                       "it with model.register_comm_hook there.")
        return out


EXPORTER = DDPExporter()
