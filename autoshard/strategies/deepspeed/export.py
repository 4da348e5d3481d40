"""DeepSpeed's part of the hand-off files (:class:`~autoshard.export.family.FamilyExporter`): ``ds_config.json``
(:mod:`autoshard.strategies.deepspeed.config`), which Accelerate, Lightning and the HF Trainer all point at, and the
``deepspeed`` launcher.

Launcher options from ``deepspeed.launcher.runner`` (deepspeed 0.19.8: ``--num_nodes``, ``--num_gpus``,
``--hostfile``, ``--master_addr``, ``--master_port``).
"""

from __future__ import annotations

import pprint
from typing import Any

from autoshard.errors import UsageError
from autoshard.export.accelerate import DS_CONFIG_FILE
from autoshard.export.family import LightningPart
from autoshard.export.launch import MASTER_PORT
from autoshard.export.trainer_flags import checkpointing_flag
from autoshard.planner.plan_file import ExportedPlan
from autoshard.strategies.deepspeed import config


def launcher(exported: ExportedPlan, *, script: str = "train.py", multi_node: bool | None = None) -> str:
    """A ``deepspeed`` launcher command (multi-node reads the nodes from a ``hostfile``: ``host slots=N`` lines)."""
    hw = exported.hardware
    many = hw.nodes > 1 if multi_node is None else multi_node
    if not many:
        return f"deepspeed --num_nodes=1 --num_gpus={hw.gpus_per_node} {script}"
    return (f"deepspeed --hostfile=hostfile --num_nodes={hw.nodes} --num_gpus={hw.gpus_per_node} "
            f"--master_addr=\"$MASTER_ADDR\" --master_port={MASTER_PORT} {script}")


def lightning_config(exported: ExportedPlan) -> dict[str, Any]:
    """The ds_config Lightning's ``DeepSpeedStrategy`` accepts: without ``gradient_accumulation_steps``, and with
    ``zero_allow_untested_optimizer`` as Lightning's own default config has it (``True``): its ZeRO-3
    ``validate`` / ``test`` / ``predict`` read the key from a given config as well (``_initialize_deepspeed_inference``,
    Lightning 2.5.6), and raised ``KeyError`` without it (export probe)."""
    ds = config.ds_config(exported)
    del ds["gradient_accumulation_steps"]
    ds["zero_allow_untested_optimizer"] = True
    return ds


CPU_LIGHTNING = ("Lightning's DeepSpeedStrategy runs on CUDA GPUs only (\"The DeepSpeed strategy is only supported on "
                 "CUDA GPUs\", Lightning 2.5): no Lightning file is written for CPU processes.")


class DeepSpeedExporter:
    """DeepSpeed's part of each file."""

    def files(self, exported: ExportedPlan, *, validate: bool) -> dict[str, str]:
        """``ds_config.json``, checked by DeepSpeed's own config classes when ``validate``.

        Raises:
            UsageError: DeepSpeed rejects it (or is missing while ``validate`` is true).
        """
        return {DS_CONFIG_FILE: config.dumps(exported, check=validate)}

    def accelerate(self, exported: ExportedPlan, *, ds_config_file: str) -> dict[str, Any]:
        """``distributed_type: DEEPSPEED`` pointing at the config file, and no ``mixed_precision`` key.

        accelerate 1.15.0 takes zero stage, offload, batch and precision from the config file, and refuses a
        config that also sets them: ``accelerate launch`` lists ``mixed_precision`` as coming from the config
        whenever the key is there, even as ``no`` (``commands/launch.py``), and ``DeepSpeedPlugin.
        _deepspeed_config_checks`` (``utils/dataclasses.py``) raises ``ValueError`` for it.
        """
        section: dict[str, Any] = {"deepspeed_config_file": ds_config_file}
        if exported.hardware.nodes > 1:
            section["deepspeed_multinode_launcher"] = "standard"
        return {"distributed_type": "DEEPSPEED", "deepspeed_config": section, "mixed_precision": None}

    def lightning(self, exported: ExportedPlan, *, ds_config_file: str) -> LightningPart:
        """``DeepSpeedStrategy(config=...)`` with ``ds_config.json``'s content less ``gradient_accumulation_steps``.

        Lightning 2.5.6 sets that key from ``Trainer(accumulate_grad_batches)`` and raises when the config has it
        (``strategies/deepspeed.py::_format_batch_size_and_grad_accum_config``).
        """
        if exported.hardware.device_type == "cpu":
            raise UsageError(CPU_LIGHTNING)
        ds = lightning_config(exported)
        return LightningPart(
            imports=["from lightning.pytorch.strategies import DeepSpeedStrategy"],
            definitions=[f"# {ds_config_file} less gradient_accumulation_steps (Lightning sets it from "
                         "accumulate_grad_batches and refuses it here)",
                         f"ds_config = {pprint.pformat(ds, sort_dicts=False, width=100)}"],
            strategy="DeepSpeedStrategy(config=ds_config)")

    def accelerate_handlers(self, exported: ExportedPlan) -> dict[str, dict[str, Any]]:
        """None: ``ds_config.json`` carries everything."""
        return {}

    def hf_trainer(self, exported: ExportedPlan, *, ds_config_file: str, fsdp_config_file: str) -> list[str]:
        """``--deepspeed`` with the config file and, with checkpointing, the Trainer's switch
        (:func:`~autoshard.export.trainer_flags.checkpointing_flag`)."""
        args = ["--deepspeed", ds_config_file]
        if exported.checkpoints_every_block:
            args.append(checkpointing_flag())
        return args

    def launchers(self, exported: ExportedPlan, *, script: str) -> list[str]:
        """DeepSpeed's launcher, one node and many (commented out: torchrun is the default). With optimizer
        offload, the multi-node line needs ``OMP_NUM_THREADS`` in ``./.deepspeed_env``: over ssh the launcher
        carries only that file's variables and a few prefixes (``EXPORT_ENVS``, ``launcher/runner.py``, 0.19.8)."""
        out = ["", "# or DeepSpeed's launcher (multi-node: one 'hostname slots=GPUS' line per node in ./hostfile;",
               "# it starts the other nodes over ssh; it passes --local_rank=N to your script, which must accept it,",
               "# e.g. parser.add_argument('--local_rank', type=int, default=0)):",
               "# " + launcher(exported, script=script, multi_node=False),
               "# " + launcher(exported, script=script, multi_node=True)]
        if exported.strategy_traits.offloads:
            ranks = exported.hardware.gpus_per_node
            out.insert(3, f"# (with several nodes, also put the line OMP_NUM_THREADS=<cores per node / {ranks}> in "
                          "./.deepspeed_env: ssh does not carry the export above)")
        return out

    def notes(self, exported: ExportedPlan) -> list[str]:
        """The optimizer under offload, and the NVMe path to fill in."""
        cpu = exported.hardware.device_type == "cpu"
        out = ["ds_config.json has no optimizer block: with optimizer offload use "
               "deepspeed.ops.adam.DeepSpeedCPUAdam (DeepSpeed refuses other client optimizers by default).",
               (f"ds_config.json says gradient_clipping {exported.grad_clip_norm or 0.0:g} (DeepSpeed's own default "
                "would clip at 1.0)" + ("." if cpu else "; the Lightning snippet carries its content inline, so an "
                                        "edit to one is not seen by the other."))]
        if cpu:
            out.append(CPU_LIGHTNING)
        if exported.strategy_traits.offload == "nvme" and exported.hardware.nvme_path is None:
            out.append(f"Replace nvme_path {config.NVME_PATH_PLACEHOLDER} in ds_config.json with a directory on "
                       "a local NVMe drive of every node.")
        return out


EXPORTER = DeepSpeedExporter()
