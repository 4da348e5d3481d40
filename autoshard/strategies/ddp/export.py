"""DDP's part of the hand-off files (:class:`~autoshard.export.family.FamilyExporter`): no file of its own, the
constructor arguments and comm hook in Lightning's ``DDPStrategy``, the bucket size and unused-parameter search in
the HF Trainer's flags.

Names: Lightning 2.5 ``DDPStrategy(ddp_comm_state, ddp_comm_hook, **kwargs)`` (the kwargs go to
``DistributedDataParallel``); transformers 5.23 ``--ddp_bucket_cap_mb``, ``--ddp_find_unused_parameters``;
accelerate 1.15 ``distributed_type`` ``MULTI_GPU`` / ``MULTI_CPU`` / ``NO``.
"""

from __future__ import annotations

from typing import Any

from autoshard.planner.plan_file import ExportedPlan

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

    def lightning(self, exported: ExportedPlan, *, ds_config_file: str) -> tuple[list[str], str]:
        """``DDPStrategy`` with the bucket, gradient-view, static-graph and unused-parameter settings and the
        comm hook (PowerSGD with its state)."""
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
        return lines, f"DDPStrategy({', '.join(args)})"

    def hf_trainer(self, exported: ExportedPlan, *, ds_config_file: str, fsdp_config_file: str) -> list[str]:
        """The bucket size, the unused-parameter search and, with checkpointing, ``--gradient_checkpointing``."""
        s = exported.settings
        args = ["--ddp_bucket_cap_mb", str(int(s["bucket_cap_mb"])),
                "--ddp_find_unused_parameters", str(bool(s["find_unused_parameters"])).lower()]
        if exported.activation_checkpointing:
            args.append("--gradient_checkpointing")
        return args

    def launchers(self, exported: ExportedPlan, *, script: str) -> list[str]:
        """None besides torchrun."""
        return []

    def notes(self, exported: ExportedPlan) -> list[str]:
        """The comm hook (Lightning only) and the unused-parameter search (no Accelerate config key)."""
        out = []
        if exported.settings.get("comm_hook", "none") != "none":
            out.append(f"comm_hook={exported.settings['comm_hook']} is in the Lightning snippet only; register it "
                       "with model.register_comm_hook elsewhere.")
        if exported.settings.get("find_unused_parameters"):
            # accelerate 1.15 reads DDP's constructor arguments only from kwargs handlers (utils/dataclasses.py).
            out.append("The step leaves some parameters without a gradient: the Lightning snippet and HF Trainer "
                       "arguments set find_unused_parameters; with Accelerate pass kwargs_handlers=["
                       "DistributedDataParallelKwargs(find_unused_parameters=True)] to Accelerator (the config file "
                       "has no key for it).")
        return out


EXPORTER = DDPExporter()
