"""Hand-off files for a plan: ``plan.json``, DeepSpeed JSON, Accelerate YAML, Lightning and HF Trainer
arguments, and torchrun / deepspeed / SLURM launch commands.

Example:
    >>> import autoshard, autoshard.export  # doctest: +SKIP
    >>> plan = autoshard.recommend("tiny-gpt2", hardware="dgx-h100", seq_len=64)  # doctest: +SKIP
    >>> autoshard.export.export_plan(plan, "out/")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from autoshard.errors import UsageError
from autoshard.export import (
    accelerate,
    hf_trainer,
    launch,
    lightning,
)
from autoshard.export.trainer_flags import checkpointing_flag
from autoshard.planner import plan_file
from autoshard.planner.plan import Plan
from autoshard.planner.plan_file import ExportedPlan, from_plan, read
from autoshard.strategies import exporter

__all__ = ["ExportedPlan", "export_plan", "from_plan", "notes", "read", "render"]


EXPORT_FILES = frozenset({"plan.json", "accelerate_config.yaml", "lightning_trainer.py", "hf_trainer_args.txt",
                          "launch.sh", "slurm.sbatch", "README.md", accelerate.DS_CONFIG_FILE,
                          hf_trainer.FSDP_CONFIG_FILE})
"""Every file name an export may write: those another plan's export left that this one does not write would be
read as this plan's (a ``ds_config.json`` beside an FSDP plan's files)."""


def render(exported: ExportedPlan, *, validate: bool = True) -> dict[str, str]:
    """Every file that applies to the plan, by file name → text: the shared ones and the family's own.

    Raises:
        UsageError: DeepSpeed rejects the ds_config (or is missing while ``validate`` is true).
    """
    files = {"plan.json": plan_file.dumps(exported)}
    files.update(exporter(exported.family).files(exported, validate=validate))
    files["accelerate_config.yaml"] = accelerate.dumps(exported)
    with contextlib.suppress(UsageError):  # a plan Lightning cannot run (FSDP2 with 16-mixed): notes() says so
        files["lightning_trainer.py"] = lightning.snippet(exported)
    with contextlib.suppress(UsageError):  # a plan the HF Trainer cannot run (FSDP2 hybrid sharding): notes() says so
        files["hf_trainer_args.txt"] = hf_trainer.command_line(exported) + "\n"
    files["launch.sh"] = launch.launch_script(exported)
    files["slurm.sbatch"] = launch.sbatch(exported)
    files["README.md"] = _readme(exported, sorted(files))
    return files


def export_plan(plan: Plan | ExportedPlan | str | os.PathLike[str], output_dir: str | os.PathLike[str], *,
                force: bool = False, validate: bool = True) -> list[Path]:
    """Write the hand-off files of ``plan`` into ``output_dir`` (created if needed).

    Args:
        plan: a :class:`~autoshard.planner.plan.Plan` (its recommendation is exported), an :class:`ExportedPlan`,
            or a path :func:`read` reads (a ``plan.json``, a directory holding one, a tune ``summary.json``).
        output_dir: the directory to write into.
        force: overwrite existing files whose content differs, and remove the files of another export this plan
            does not write (a ``ds_config.json`` beside an FSDP plan). Without it nothing is written when any would
            be.
        validate: check ``ds_config.json`` with DeepSpeed's config classes (needs DeepSpeed).

    Returns:
        The paths written (files already identical are included and left untouched).

    Raises:
        UsageError: ``plan`` is none of these, a different file is in the way and ``force`` is false, or see
            :func:`render`.
    """
    if not isinstance(output_dir, (str, os.PathLike)) or not os.fspath(output_dir).strip():
        raise UsageError(f"export_plan() writes into a directory, and output_dir is {output_dir!r}.",
                         hint="Pass output_dir= the directory to write the files into (created if needed).")
    if isinstance(plan, (str, os.PathLike)):
        plan = read(os.fspath(plan))
    if not isinstance(plan, (Plan, ExportedPlan)):
        raise UsageError(f"export_plan() takes a Plan, an ExportedPlan or a plan.json path as plan=, "
                         f"not {type(plan).__name__}.",
                         hint="Pass what autoshard.recommend() returned, or the path of a plan.json it wrote.")
    exported = plan if isinstance(plan, ExportedPlan) else from_plan(plan)
    files = render(exported, validate=validate)
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory.")
    paths = {name: out / name for name in files}
    clash = [str(p) for name, p in paths.items() if p.exists() and p.read_text(encoding="utf-8") != files[name]]
    stale = sorted(out / name for name in EXPORT_FILES - set(files) if (out / name).is_file())
    if (clash or stale) and not force:
        differ = f"not overwriting {len(clash)} file(s) that differ: {', '.join(clash)}" if clash else ""
        left = (f"{', '.join(map(str, stale))}: left by another export, which this plan's does not replace and "
                "would be read as its own" if stale else "")
        raise UsageError(f"{'; '.join(part for part in (differ, left) if part)}.",
                         hint="Pass force=True to replace them and remove what another export "
                              "left, or choose another output directory.")
    try:
        for path in stale:
            path.unlink()
        out.mkdir(parents=True, exist_ok=True)
        for name, path in paths.items():
            if not path.exists() or path.read_text(encoding="utf-8") != files[name]:
                path.write_text(files[name], encoding="utf-8")
        (out / "launch.sh").chmod(0o755)
    except OSError as exc:
        raise UsageError(f"cannot write the exported files into {out}: {exc.strerror or exc}.",
                         hint="Choose an output directory you can create and write.") from exc
    return list(paths.values())


def notes(exported: ExportedPlan) -> list[str]:
    """What the files leave to the user, or could not express, for this plan (one sentence each)."""
    out = [("Your training script builds the model, data loader (batch size "
           f"{exported.micro_batch_size} per device), optimizer ({exported.optimizer}) and learning-rate schedule."),
           _clipping_note(exported)]
    if exported.optimizer == "adamw8bit":
        out.append("The plan steps bitsandbytes' 8-bit AdamW: build bitsandbytes.optim.AdamW8bit (the HF Trainer "
                   "flags say --optim adamw_bnb_8bit).")
    if exported.optimizer_impl is not None:
        how = {"foreach": "foreach=True", "for-loop": "foreach=False", "fused": "fused=True"}[exported.optimizer_impl]
        out.append(f"The plan steps the optimizer {exported.optimizer_impl} ({how} in torch.optim): build it so"
                   + (" (the HF Trainer flags say --optim)." if exported.optimizer == "adamw"
                      and exported.optimizer_impl != "for-loop" else "."))
    if exported.float32_matmul_precision != "highest":
        out.append("The plan runs fp32 matmuls on TF32 tensor cores: call torch.set_float32_matmul_precision("
                   f"{exported.float32_matmul_precision!r}) in your training script before the model runs (the HF "
                   "Trainer flags say --tf32 True; fit() sets it itself).")
    if exported.precision == "bf16-true":
        out.append("The plan keeps the model in bf16 throughout (bf16-true: no fp32 weights, no autocast): cast it "
                   "in your script (model.to(torch.bfloat16), or from_pretrained(..., dtype=torch.bfloat16)). "
                   "accelerate_config.yaml's mixed_precision 'no' and the HF Trainer's --bf16 (autocast) leave an "
                   "fp32 model fp32, at twice the planned parameter memory; Lightning's precision='bf16-true' casts "
                   "it, and so does DeepSpeed's bf16 section.")
    if exported.checkpoints_every_block:
        blocks = " and ".join(exported.model.block_classes) or "repeated block"
        ways = [] if exported.strategy_traits.hybrid else [f"hf_trainer_args.txt ({checkpointing_flag()})"]
        ways += ["the FSDP configs here"] if exported.family == "fsdp" else []
        own = {"deepspeed": "ds_config.json", "ddp": "the DDP files"}.get(exported.family)
        out.append(f"The plan checkpoints every {blocks}: {' and '.join(ways)} enable{'s' if len(ways) == 1 else ''} "
                   "it" + (f"; with {own} in your own script, enable it in your model (a transformers model: "
                           "model.gradient_checkpointing_enable())." if own else "."))
    elif exported.activation_checkpointing:
        choice = exported.checkpointing_choice
        out.append(f"The plan uses {choice.label} ({choice}, torchtitan's selective modes), which the "
                   "checkpointing switches of these files cannot express (they are off): apply it in your script "
                   "with autoshard.runtime.activation_checkpointing.checkpoint_blocks(model, "
                   f"autoshard.profiler.blocks.find_repeated_blocks(model).names, \"{choice}\") (the blocks' module "
                   "names, e.g. model.layers.0, not their class)"
                   + ("; lightning_trainer.py's shard() does." if exported.family == "fsdp"
                      and exported.precision != "16-mixed" else "."))
    out += exporter(exported.family).notes(exported)
    if exported.strategy_traits.offloads:
        out.append(f"The optimizer steps on the host: launch.sh, slurm.sbatch and hf_trainer_args.txt set "
                   f"OMP_NUM_THREADS to each node's cores // its {exported.hardware.gpus_per_node} rank(s) unless it "
                   "is set, as the plan's step time assumes (torchrun alone gives each of several processes one "
                   "thread). accelerate launch takes it from the environment (run it after that export, or pass "
                   "--num_cpu_threads_per_process; its default is 1); Lightning started with python sets the same "
                   "share itself (for FSDP, lightning_trainer.py sets it: Lightning does on rank 0 only).")
    if exported.hardware.nodes > 1:
        hw = exported.hardware
        rate = launch.network_rate(hw)
        priced = ("" if rate is None else
                  f" The step time was priced with {hw.network} per node ({rate})" if hw.network is not None else
                  f" The hardware did not describe the network: the step time was priced with {rate}")
        priced += "; launch.sh and slurm.sbatch say how to check yours." if priced else ""
        out.append("Multi-node: set MASTER_ADDR and JOB_ID in launch.sh; accelerate launch also needs "
                   "--machine_rank and --main_process_ip on each node." + priced)
    if exported.hardware.device_type == "cpu" and exported.hardware.world_size > 1 and exported.family == "deepspeed":
        # accelerate 1.15: a DEEPSPEED config starts every process, but Accelerator(cpu=True) ignores LOCAL_RANK
        # (_prepare_backend) and ACCELERATE_USE_CPU=1 turns the run into DDP.
        out.append(f"CPU processes: accelerate cannot run this DeepSpeed plan on them: accelerate launch starts the "
                   f"{exported.hardware.world_size} processes and DeepSpeed joins them, but each Accelerator counts "
                   "itself the only process (its data not sharded), and ACCELERATE_USE_CPU=1 trains DDP instead. Use "
                   "launch.sh's deepspeed line with a script that calls deepspeed.initialize with ds_config.json, "
                   "or autoshard.fit(plan=...).")
    elif exported.hardware.device_type == "cpu" and exported.hardware.world_size > 1:
        if exported.family == "fsdp":
            # accelerate 1.15's AcceleratorState gives DistributedType.FSDP only to a multi-accelerator run: on CPU
            # processes it is MULTI_CPU, and prepare() wraps the model in DistributedDataParallel.
            files = ("accelerate_config.yaml trains" if exported.strategy_traits.hybrid  # no HF files for hybrid
                     else "accelerate_config.yaml and hf_trainer_args.txt train")
            out.append("CPU processes: accelerate, and the HF Trainer on it, run FSDP only on accelerators: on CPU "
                       f"processes {files} DDP (every rank holds the "
                       "whole model), not this plan, and say nothing of it. To run the plan on CPU processes, use "
                       "launch.sh's torchrun line with a script that shards the model with fully_shard (as the "
                       "Lightning snippet's shard() does, where one is written), or autoshard.fit(plan=...).")
        # accelerate 1.15's launch_command sends use_cpu to simple_launcher: one process, unless MPI is configured.
        out.append(f"CPU processes: accelerate launch starts {exported.hardware.world_size} of them only through "
                   "MPI (mpirun_hostfile in accelerate_config.yaml); otherwise it starts one. launch.sh's torchrun "
                   "line starts them all, and an Accelerator in your script joins them because launch.sh sets "
                   "ACCELERATE_USE_CPU=1 (or pass Accelerator(cpu=True)): without it each process trains alone, "
                   "its gradients never averaged.")
    return out


def _readme(exported: ExportedPlan, names: list[str]) -> str:
    lines = [f"# autoshard export: {exported.strategy} for {exported.model.name}", "",
             (f"{exported.hardware.nodes} node(s) × {exported.hardware.gpus_per_node} "
             f"{exported.hardware.gpu or 'CPU process(es)'}, micro-batch {exported.micro_batch_size}, gradient "
             f"accumulation {exported.gradient_accumulation}, global batch {exported.global_batch_size}, "
             f"{exported.precision}."), "", "Files: " + ", ".join(n for n in names if n != "README.md") + ".",
             "What each file is: docs/export.md in autoshard's repository.", "", "## Left to you", ""]
    lines += [f"- {n}" for n in notes(exported)]
    return "\n".join(lines) + "\n"


def _trainer_cannot(exported: ExportedPlan) -> bool:
    """Whether no ``hf_trainer_args.txt`` is written for the plan: the HF Trainer cannot run FSDP2's hybrid
    sharding (:func:`files`)."""
    return exported.strategy_traits.hybrid


def _clipping_note(exported: ExportedPlan) -> str:
    """Where the files clip the gradients, or that they do not."""
    if exported.grad_clip_norm is None:
        trainer = "" if _trainer_cannot(exported) else (" (the HF Trainer arguments say --max_grad_norm 0.0; its "
                                                         "default would clip at 1.0)")
        return (f"Gradient clipping is off in every file, as the plan trains{trainer}: plan with --grad-clip-norm to "
                "clip.")
    return (f"Gradients are clipped to norm {exported.grad_clip_norm:g} wherever a file can say so ("
            + ("" if _trainer_cannot(exported) else "the HF Trainer's --max_grad_norm, ")
            + "Lightning's gradient_clip_val, a ds_config.json's gradient_clipping, fit() from "
            "plan.json); in a loop of your own "
            f"call torch.nn.utils.clip_grad_norm_(model.parameters(), {exported.grad_clip_norm:g}) before each step "
            "(accelerate: accelerator.clip_grad_norm_).")
