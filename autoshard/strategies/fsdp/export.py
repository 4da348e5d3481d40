"""FSDP2's part of the hand-off files (:class:`~autoshard.export.family.FamilyExporter`): the Accelerate
``fsdp_config`` block, Lightning's ``ModelParallelStrategy``, the HF Trainer's ``--fsdp`` flags and
``fsdp_config.json``.

Key names: accelerate 1.15 (``commands/config/cluster.py`` ``fsdp_*`` and ``parallelism_config_*`` keys,
``utils/constants.py::FSDP_AUTO_WRAP_POLICY``); Lightning 2.5.6 ``ModelParallelStrategy`` (FSDP2; its
``FSDPStrategy`` runs FSDP1, which is not what the plan models) and ``fully_shard`` in ``configure_model()``;
transformers 5.23 ``training_args.py`` (``--fsdp``, ``--fsdp_config`` keys ``version``, ``reshard_after_forward``,
``auto_wrap_policy``, ``transformer_layer_cls_to_wrap``, ``activation_checkpointing``, ``cpu_offload``).
"""

from __future__ import annotations

import json
from typing import Any

from autoshard.errors import UsageError
from autoshard.export.family import LightningPart
from autoshard.export.hf_trainer import FSDP_CONFIG_FILE
from autoshard.export.trainer_flags import fsdp_switch_alone
from autoshard.planner.plan_file import ExportedPlan


def accelerate_fsdp_config(exported: ExportedPlan) -> dict[str, Any]:
    """Accelerate's ``fsdp_config`` block: FSDP2, the block classes as the wrapping units, checkpointing and offload.

    ``fsdp_transformer_layer_cls_to_wrap`` is one comma-separated string (accelerate's
    ``FullyShardedDataParallelPlugin`` splits it on ``,``), e.g. ``BartEncoderLayer,BartDecoderLayer``.

    ``reshard_after_forward`` is a bool in accelerate's FSDP2 plugin: a partial size (an int) is written as
    ``True`` and :func:`autoshard.export.notes` says so.
    """
    classes = exported.model.block_classes
    wrap: dict[str, str] = {"fsdp_auto_wrap_policy": "NO_WRAP"}
    if classes:
        wrap = {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "fsdp_transformer_layer_cls_to_wrap": ",".join(classes)}
    return {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": exported.settings.get("reshard_after_forward", True) is not False,
        **wrap,
        "fsdp_activation_checkpointing": exported.checkpoints_every_block,
        "fsdp_offload_params": exported.strategy_traits.offload_parameters,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
    }


def trainer_fsdp_config(exported: ExportedPlan) -> dict[str, Any]:
    """The HF Trainer's ``fsdp_config`` for an FSDP plan (FSDP2).

    Raises:
        UsageError: hybrid sharding: the Trainer's FSDP2 path has none (transformers 5.23 accepts
            ``hybrid_shard`` only with FSDP1).
    """
    if exported.strategy_traits.hybrid:
        raise UsageError("the Hugging Face Trainer has no FSDP2 hybrid sharding; use the Accelerate config with "
                         "a parallelism config, or plan with strategies=['fsdp'].")
    classes = exported.model.block_classes
    config: dict[str, Any] = {
        "version": 2,
        "reshard_after_forward": exported.settings.get("reshard_after_forward", True) is not False,
        "activation_checkpointing": exported.checkpoints_every_block,
        "cpu_offload": exported.strategy_traits.offload_parameters,
    }
    if classes:
        config["auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP"
        config["transformer_layer_cls_to_wrap"] = list(classes)
    return config


_TORCH_DTYPES = {"fp32": "torch.float32", "bf16": "torch.bfloat16"}


def accelerate_parallelism_config(exported: ExportedPlan) -> dict[str, int]:
    """Accelerate's ``parallelism_config`` for a hybrid plan: replicate across nodes, shard within each.

    Keys as ``accelerate config`` writes them (accelerate 1.15.0 ``commands/config/cluster.py``;
    ``accelerate launch`` copies them onto its ``--parallelism_config_*`` options, ``commands/launch.py``).
    """
    hw = exported.hardware
    return {"parallelism_config_dp_replicate_size": hw.nodes, "parallelism_config_dp_shard_size": hw.gpus_per_node}


def lightning_part(exported: ExportedPlan) -> LightningPart:
    """Lightning's ``ModelParallelStrategy`` (FSDP2) and a ``shard(module, device_mesh)`` function applying
    ``fully_shard`` as planned: the block classes (matched by name), ``reshard_after_forward`` (a partial int too),
    the mixed-precision policy with the plan's ``reduce_dtype``, CPU offload, activation checkpointing, and for
    hybrid plans a ``(nodes, ranks per node)`` mesh (FSDP2 replicates over the first dimension).

    Lightning's own mesh stays one flat data-parallel dimension over every rank, so its distributed sampler gives
    each rank its own batches (``ModelParallelStrategy.distributed_sampler_kwargs`` splits over ``data_parallel``).

    Raises:
        UsageError: ``16-mixed``: ``ModelParallelStrategy`` refuses it (Lightning 2.5.6
            ``accelerator_connector.py``), and the policy alone would run fp16 without loss scaling.
    """
    if exported.precision == "16-mixed":
        raise UsageError("Lightning's ModelParallelStrategy (FSDP2) has no 16-mixed precision.",
                         hint="Plan with precision='bf16-mixed', or train this plan with autoshard.fit().")
    s = exported.settings
    hw = exported.hardware
    traits = exported.strategy_traits
    policy = exported.precision == "bf16-mixed"  # bf16-true casts the model and runs without a policy
    kwargs = ["mesh=mesh"]
    if policy:
        reduce = _TORCH_DTYPES[str(s.get("reduce_dtype", "fp32"))]
        kwargs.append(f"mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype={reduce})")
    if traits.offload_parameters:
        # Pinning needs an accelerator (torch/distributed/fsdp/_fully_shard/_fsdp_param.py, torch 2.13).
        pin = bool(s.get("pin_memory", True)) and hw.device_type == "cuda"
        kwargs.append(f"offload_policy=CPUOffloadPolicy(pin_memory={pin!r})")
    if traits.hybrid:
        mesh = (f"init_device_mesh(device_mesh.device_type, ({hw.nodes}, {hw.gpus_per_node}), "
                "mesh_dim_names=('replicate', 'shard'))  # hybrid: replicate across nodes, shard within")
    else:
        mesh = "device_mesh['data_parallel']"
    body = []
    if traits.offloads:
        # Lightning 2.5.6 sets the thread share in the launcher, which ModelParallelStrategy creates in the first
        # process only: ranks 1.. would each take every core for the optimizer step on the host (export probe)
        # the usable cores, as launch.sh's nproc counts them (a job's CPU affinity), not the machine's
        body += ["if 'OMP_NUM_THREADS' not in os.environ:  # the plan's share of the host's cores; Lightning sets it "
                 "on rank 0 only here",
                 "    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else "
                 "os.cpu_count() or 1",
                 f"    torch.set_num_threads(max(1, cores // {hw.gpus_per_node}))", ""]
    body += [
        f"BLOCKS = {set(exported.model.block_classes)!r}  # the plan's repeated block classes, by name",
        "",
        "",
        "def shard(module, device_mesh):",
        '    """FSDP2 as planned. Call it in your LightningModule: def configure_model(self): '
        'shard(self.model, self.device_mesh)."""',
        f"    mesh = {mesh}",
    ]
    if exported.checkpoints_every_block:
        body.append("    apply_activation_checkpointing(module, check_fn=lambda m: type(m).__name__ in BLOCKS)")
    elif exported.activation_checkpointing:  # selective (op, every N): torch's wrapper has no such mode; the plan's
        choice = exported.checkpointing_choice  # micro-batch may fit only with it (it was left out: a probe)
        body += [f"    # the plan's {choice.label} ({choice}): autoshard's wrapper, before fully_shard",
                 "    from autoshard.profiler.blocks import find_repeated_blocks",
                 "    from autoshard.runtime.activation_checkpointing import checkpoint_blocks",
                 f"    checkpoint_blocks(module, find_repeated_blocks(module).names, {str(choice)!r})"]
    body += [
        f"    kwargs = dict({', '.join(kwargs)})",
        "    for block in [m for m in module.modules() if type(m).__name__ in BLOCKS]:",
        f"        fully_shard(block, reshard_after_forward={s.get('reshard_after_forward', True)!r}, **kwargs)",
        "    fully_shard(module, **kwargs)",
    ]
    imports = (["import os"] if traits.offloads else []) + ["import torch",
                                                            "from lightning.pytorch.strategies import "
                                                            "ModelParallelStrategy"]
    names = ["fully_shard"] + (["MixedPrecisionPolicy"] if policy else []) + \
        (["CPUOffloadPolicy"] if traits.offload_parameters else [])
    imports.append(f"from torch.distributed.fsdp import {', '.join(sorted(names))}")
    if traits.hybrid:
        imports.append("from torch.distributed.device_mesh import init_device_mesh")
    if exported.checkpoints_every_block:
        imports.append("from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import "
                       "apply_activation_checkpointing")
    return LightningPart(imports=imports, definitions=body, precision="32-true" if policy else None,
                         strategy=f"ModelParallelStrategy(data_parallel_size={hw.world_size}, tensor_parallel_size=1)")


class FSDPExporter:
    """FSDP2's part of each file."""

    def files(self, exported: ExportedPlan, *, validate: bool) -> dict[str, str]:
        """``fsdp_config.json`` for the HF Trainer, where the Trainer can run the plan."""
        if exported.strategy_traits.hybrid:
            return {}
        return {FSDP_CONFIG_FILE: json.dumps(trainer_fsdp_config(exported), indent=2) + "\n"}

    def accelerate(self, exported: ExportedPlan, *, ds_config_file: str) -> dict[str, Any]:
        """``distributed_type: FSDP``, the ``fsdp_config`` block and, for hybrid plans, ``parallelism_config``."""
        out: dict[str, Any] = {"distributed_type": "FSDP", "fsdp_config": accelerate_fsdp_config(exported)}
        if exported.strategy_traits.hybrid:
            out["parallelism_config"] = accelerate_parallelism_config(exported)
        return out

    def accelerate_handlers(self, exported: ExportedPlan) -> dict[str, dict[str, Any]]:
        """None (the knobs the file cannot hold have no handler either: :meth:`notes` lists them)."""
        return {}

    def lightning(self, exported: ExportedPlan, *, ds_config_file: str) -> LightningPart:
        """See :func:`lightning_part`."""
        return lightning_part(exported)

    def hf_trainer(self, exported: ExportedPlan, *, ds_config_file: str, fsdp_config_file: str) -> list[str]:
        """``--fsdp`` options and ``--fsdp_config``; checkpointing is in the config file.

        Raises:
            UsageError: see :func:`trainer_fsdp_config`.
        """
        # transformers 5.23 parsed --fsdp as a string ("true" refused: "Unknown `fsdp` option"); 5.24 takes --fsdp
        # alone and warns on the string. fsdp_config.json holds every option either way, and wins over the string.
        config = trainer_fsdp_config(exported)  # refuses hybrid sharding, whichever form --fsdp takes here
        args = ["--fsdp"]
        if not fsdp_switch_alone():
            reshard = config["reshard_after_forward"]
            options = ["full_shard" if reshard else "shard_grad_op", "auto_wrap"]
            args.append(" ".join(options + (["offload"] if exported.strategy_traits.offload_parameters else [])))
        args += ["--fsdp_config", fsdp_config_file]
        if exported.gradient_accumulation > 1:
            # The Trainer skips the gradient sync on all but the last micro-batch (accelerate's no_sync:
            # set_requires_gradient_sync(False) under FSDP2), which keeps every unsharded gradient between them;
            # the plan reduce-scatters every micro-batch, as fit() does (transformers 5.24 Trainer: sync_each_batch).
            args += ["--accelerator_config", json.dumps({"gradient_accumulation_kwargs": {"sync_each_batch": True}})]
        return args

    def launchers(self, exported: ExportedPlan, *, script: str) -> list[str]:
        """None besides torchrun."""
        return []

    def notes(self, exported: ExportedPlan) -> list[str]:
        """Partial resharding, the knobs no config can express, FSDP1 under Lightning, hybrid sharding."""
        out = []
        raf = exported.settings.get("reshard_after_forward")
        if not isinstance(raf, bool):
            out.append(f"reshard_after_forward={raf} (a partial shard) is written as True: Accelerate, Lightning and "
                       "the HF Trainer take only a bool.")
        lightning = exported.precision != "16-mixed"  # else no Lightning file is written
        out.append("forward_prefetch, backward_prefetch, reduce_dtype, blocks_per_unit and foreach are not "
                   "expressible in the Accelerate and HF Trainer configs; "
                   + ("the Lightning snippet sets reduce_dtype (and a partial reshard_after_forward), set the rest"
                      if lightning else "set them")
                   + " in your own fully_shard code if they differ from the defaults.")
        reduce = _accelerate_reduce_note(exported)
        if reduce:
            out.append(reduce)
        if lightning:
            out.append("Lightning runs FSDP2 through ModelParallelStrategy: call the snippet's shard(self.model, "
                       "self.device_mesh) in your LightningModule's configure_model().")
        else:
            out.append("Lightning's ModelParallelStrategy has no 16-mixed precision: no Lightning file is written.")
        if not exported.strategy_traits.hybrid:
            out.append(_state_dict_note(exported))
        if exported.strategy_traits.hybrid:
            out.append("Hybrid sharding: the HF Trainer cannot run it with FSDP2 (no file written); the Accelerate "
                       "config's parallelism_config replicates across nodes and shards within each.")
        if exported.gradient_accumulation > 1:
            out.append(f"Accumulating {exported.gradient_accumulation} micro-batches: the plan reduce-scatters every "
                       "micro-batch (sharded gradients kept between them). Accelerate's accumulate() / no_sync() skips "
                       "that under FSDP2 and keeps every unsharded gradient instead: build the Accelerator with "
                       f"GradientAccumulationPlugin(num_steps={exported.gradient_accumulation}, sync_each_batch=True) "
                       "(the HF Trainer arguments here set it; Lightning syncs every micro-batch already).")
        return out


def _state_dict_note(exported: ExportedPlan) -> str:
    """How the two files save checkpoints: accelerate's ``save_state`` sharded (each rank writes its shard), the
    HF Trainer at its default ``FULL_STATE_DICT``, which gathers the whole model on rank 0's host for every
    checkpoint: with ``SHARDED_STATE_DICT`` its ``save_model()`` writes no model at all under FSDP (transformers
    5.24 ``Trainer.save_model`` saves only a full state dict), so the Trainer's default is kept and its cost said.
    """
    width = 2 if exported.precision == "bf16-true" else 4  # FSDP2 keeps fp32 weights unless the model is cast
    gib = exported.model.parameter_count * width / 2**30
    return ("Checkpoints: the Accelerate config saves save_state() checkpoints sharded (SHARDED_STATE_DICT, each "
            "rank its own shard; accelerate merge-weights joins them into one model). fsdp_config.json leaves the "
            "HF Trainer at its FULL_STATE_DICT default, so that trainer.save_model() writes a loadable model (it "
            f"writes none under SHARDED_STATE_DICT): each checkpoint then gathers the whole model ({gib:,.1f} GiB "
            "of weights) and its optimizer state in rank 0's host memory; set \"state_dict_type\": "
            "\"SHARDED_STATE_DICT\" there if that host cannot hold it.")


def _accelerate_reduce_note(exported: ExportedPlan) -> str | None:
    """What Accelerate and the HF Trainer reduce gradients in, where that is not the plan's ``reduce_dtype``.

    Given ``mixed_precision`` bf16 or fp16 and no policy of the user's, accelerate 1.15 builds FSDP's policy with
    ``reduce_dtype`` equal to ``param_dtype`` (``FullyShardedDataParallelPlugin.set_mixed_precision``, called from
    ``AcceleratorState``); its config file and environment have no field for it, and the HF Trainer (transformers
    5.24) builds its Accelerator the same way.
    """
    low = {"bf16-mixed": "bf16", "16-mixed": "fp16"}.get(exported.precision)
    planned = str(exported.settings.get("reduce_dtype", "fp32"))
    if low is None or planned == low:
        return None
    torch_dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}
    dtype = torch_dtype[low]
    replan = " (or plan with --reduce-dtype bf16, which prices what these two run)" if low == "bf16" else ""
    lightning = ", as the Lightning snippet does" if exported.precision == "bf16-mixed" else ""
    return (f"Accelerate and the HF Trainer reduce-scatter the gradients in {low}, not in the plan's {planned}: "
            f"from mixed_precision {low} accelerate 1.15 builds FSDP's MixedPrecisionPolicy with reduce_dtype = "
            f"param_dtype, and neither config has a field for it. To run the plan with Accelerate, build the "
            f"Accelerator with fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2, mixed_precision_policy="
            f"{{'param_dtype': {dtype}, 'reduce_dtype': {torch_dtype.get(planned, planned)}, 'output_dtype': "
            f"{dtype}}}) beside the config file; the HF Trainer has no setting for it{replan}. fit() reduces in "
            f"{planned} as planned{lightning}.")

EXPORTER = FSDPExporter()
