"""The exported files run in their consumers on CPU: Lightning ``Trainer.fit``, ``accelerate launch``,
``transformers.Trainer.train`` and ``deepspeed.initialize``, each for two steps on a tiny model, no mocks.

Subprocesses where the consumer starts ranks or a process group (the scripts are in ``consumers/``); rank 0 prints
``RESULT {json}``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autoshard.errors import UsageError
from autoshard.export import hf_trainer, lightning, notes, render

from .conftest import constructible_here, cpu_plan, on_gpus

SCRIPTS = Path(__file__).parent / "consumers"
REPO = Path(__file__).parents[2]


def write(exported, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in render(exported).items():
        (directory / name).write_text(text)
    return directory


def run(command: list[str], cwd: Path, timeout_s: int = 240) -> dict:
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, f"exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
    return json.loads(lines[-1].removeprefix("RESULT "))


def accelerate_launch(directory: Path, check: str) -> dict:
    return run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", "accelerate_config.yaml",
                str(SCRIPTS / "accelerate_train.py"), check], directory)


# Lightning


def test_lightning_fits_an_fsdp_plan_with_fsdp2_and_the_plans_reduce_dtype(plan, tmp_path):
    pytest.importorskip("lightning")
    e = cpu_plan(plan, "fsdp", ranks=1, precision="bf16-mixed", accumulation=2, reduce_dtype="fp32")
    got = run([sys.executable, str(SCRIPTS / "lightning_fit.py"), "2"], write(e, tmp_path))
    assert got == {"strategy": "ModelParallelStrategy", "steps": 2, "reduce_dtype": "torch.float32",
                   "checkpointed": []}


def test_lightning_applies_an_op_selective_plans_checkpointing(plan, tmp_path):
    """An op-selective plan's shard() applied no checkpointing and said nothing: its micro-batch may fit only with
    it (a multi-node probe's llama-2-7b plan at micro-batch 8)."""
    import dataclasses

    pytest.importorskip("lightning")
    e = dataclasses.replace(cpu_plan(plan, "fsdp", ranks=1), activation_checkpointing=True, checkpointing="op")
    written = write(e, tmp_path)
    assert 'checkpoint_blocks(module, find_repeated_blocks(module).names, \'op\')' in (
        written / "lightning_trainer.py").read_text()
    got = run([sys.executable, str(SCRIPTS / "lightning_fit.py"), "2"], written)
    assert got["steps"] == 4 and got["checkpointed"] == ["op", "op"]


@pytest.mark.slow
def test_lightning_fits_a_ddp_plan(plan, tmp_path):
    """A one-device DDP plan says ``strategy="auto"``: Lightning trains it unwrapped, as fit() does."""
    pytest.importorskip("lightning")
    e = cpu_plan(plan, "ddp", ranks=1, accumulation=2)
    got = run([sys.executable, str(SCRIPTS / "lightning_fit.py"), "2"], write(e, tmp_path))
    assert got == {"strategy": "SingleDeviceStrategy", "steps": 2, "reduce_dtype": None, "checkpointed": []}
    assert 'strategy="auto"' in (tmp_path / "lightning_trainer.py").read_text()


def test_lightning_deepspeed_config_passes_lightnings_setup(plan, tmp_path, monkeypatch):
    """Lightning 2.5.6 runs DeepSpeed only on CUDA (``setup_environment``), so this runs the config step of its
    ``DeepSpeedStrategy.setup`` (``_format_config``), which refuses ``gradient_accumulation_steps``."""
    pytest.importorskip("lightning")
    pytest.importorskip("deepspeed")
    import lightning.pytorch as pl

    monkeypatch.chdir(write(on_gpus(cpu_plan(plan, "deepspeed_stage_2", ranks=1, accumulation=2)), tmp_path))
    namespace: dict = {}
    exec(constructible_here((tmp_path / "lightning_trainer.py").read_text()), namespace)
    trainer = namespace["trainer"]
    module = pl.LightningModule()
    module.trainer = trainer
    trainer.strategy.connect(module)
    trainer.strategy._format_config()
    assert trainer.strategy.config["gradient_accumulation_steps"] == 2  # set by Lightning from the Trainer
    assert trainer.strategy.config["gradient_clipping"] == 0.0


def test_a_deepspeed_plan_for_cpu_processes_gets_no_lightning_file_and_says_why(plan, tmp_path):
    """Lightning's fit() refuses DeepSpeed off CUDA ("only supported on CUDA GPUs"): the snippet could not run."""
    written = write(cpu_plan(plan, "deepspeed_stage_2", ranks=2), tmp_path)
    assert not (written / "lightning_trainer.py").exists()
    assert "DeepSpeedStrategy runs on CUDA GPUs only" in (written / "README.md").read_text()


def test_lightning_strategy_objects_are_the_snippets(plan):
    pytest.importorskip("lightning")
    from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

    ddp = cpu_plan(plan, "ddp", ranks=2, bucket_cap_mb=7.0)
    assert isinstance(lightning.strategy(ddp), DDPStrategy)
    assert lightning.strategy(cpu_plan(plan, "ddp", ranks=1)) == "auto"
    assert lightning.strategy(ddp)._ddp_kwargs["bucket_cap_mb"] == 7.0
    with pytest.raises(UsageError, match="needs no sharding"):
        lightning.sharding(ddp)
    fsdp = cpu_plan(plan, "fsdp_hybrid", ranks=2, nodes=2, precision="bf16-mixed", reduce_dtype="bf16")
    assert isinstance(lightning.strategy(fsdp), ModelParallelStrategy)
    assert lightning.trainer_precision(fsdp) == "32-true"  # the bf16 policy is fully_shard's, not autocast
    assert callable(lightning.sharding(fsdp))
    assert "reduce_dtype=torch.bfloat16" in lightning.snippet(fsdp)
    assert "init_device_mesh(device_mesh.device_type, (2, 2)" in lightning.snippet(fsdp)
    sixteen = cpu_plan(plan, "fsdp", ranks=2, precision="16-mixed")
    assert "lightning_trainer.py" not in render(sixteen, validate=False)
    assert any("no 16-mixed" in n for n in notes(sixteen))


# accelerate


def test_accelerate_launch_runs_a_deepspeed_export(plan, tmp_path):
    """DeepSpeed joins the processes accelerate launch starts and reads the exported config (on CPU each
    Accelerator still counts itself alone, which the README says: test_export.py)."""
    pytest.importorskip("accelerate")
    pytest.importorskip("deepspeed")
    got = accelerate_launch(write(cpu_plan(plan, "deepspeed_stage_2", ranks=2), tmp_path), "deepspeed")
    assert got == {"world": 2, "train_batch_size": 4, "gradient_clipping": 0.0}


def test_launch_sh_starts_cpu_ranks_an_accelerator_joins(plan, tmp_path):
    """The README said an Accelerator joins launch.sh's torchrun processes on CPU; without ACCELERATE_USE_CPU it
    did not (DistributedType.NO): each rank trained alone, its weights its own."""
    pytest.importorskip("accelerate")
    directory = write(cpu_plan(plan, "ddp", ranks=2), tmp_path)
    (directory / "train.py").write_text("import runpy, sys\nsys.argv = [sys.argv[0], 'ddp']\n"
                                        f"runpy.run_path({str(SCRIPTS / 'accelerate_train.py')!r}, "
                                        "run_name='__main__')\n")
    got = run(["bash", "launch.sh"], directory)
    assert got == {"world": 2, "distributed_type": "MULTI_CPU", "synced": True}


def test_accelerate_launch_clips_as_a_clipping_plan_says(plan, tmp_path):
    """A plan made with ``--grad-clip-norm``: DeepSpeed, started by ``accelerate launch`` from the exported files,
    clips at its norm."""
    pytest.importorskip("accelerate")
    pytest.importorskip("deepspeed")
    e = dataclasses.replace(cpu_plan(plan, "deepspeed_stage_2", ranks=2), grad_clip_norm=0.5)
    got = accelerate_launch(write(e, tmp_path), "deepspeed")
    assert got == {"world": 2, "train_batch_size": 4, "gradient_clipping": 0.5}


def test_accelerate_launch_hands_a_hybrid_plans_mesh_to_the_ranks(plan, tmp_path):
    pytest.importorskip("accelerate")
    e = cpu_plan(plan, "fsdp_hybrid", ranks=1, nodes=2)
    directory = write(e, tmp_path)
    # Two "nodes" of one rank each, started on this one machine.
    config = directory / "accelerate_config.yaml"
    config.write_text(config.read_text().replace("num_machines: 2", "num_machines: 1"))
    got = accelerate_launch(directory, "hybrid")
    # accelerate leaves size-1 dimensions out of the mesh: the two ranks are replicas, as the plan's two nodes.
    assert got == {"enabled": "true", "dp_replicate": 2, "dp_shard": 1, "mesh": ["dp_replicate"], "shape": [2]}


def test_ddp_settings_the_accelerate_file_cannot_hold_are_named_with_their_handler(plan):
    e = cpu_plan(plan, "ddp", ranks=2, bucket_cap_mb=7.0, static_graph=True, comm_hook="fp16_compress")
    note = next(n for n in notes(e) if "accelerate_config.yaml" in n)
    assert "DistributedDataParallelKwargs(" in note
    for text in ("bucket_cap_mb=7.0", "static_graph=True", "comm_hook='fp16'"):
        assert text in note
    pytest.importorskip("accelerate")
    from autoshard.export import accelerate

    (handler,) = accelerate.kwargs_handlers(e)
    assert (handler.bucket_cap_mb, handler.static_graph, str(handler.comm_hook)) == (7.0, True, "fp16")


# Hugging Face Trainer


class _Regression:  # a tiny model the Trainer can train: forward(x, labels) -> {"loss": ...}
    @staticmethod
    def build():
        import torch

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(8, 1)

            def forward(self, x, labels):
                return {"loss": torch.nn.functional.mse_loss(self.linear(x), labels)}

        data = [{"x": torch.randn(8), "labels": torch.randn(1)} for _ in range(16)]
        return Model(), data


def test_hf_trainer_trains_from_the_exported_flags_without_clipping(plan, tmp_path):
    pytest.importorskip("transformers")
    from transformers import HfArgumentParser, Trainer, TrainingArguments

    e = cpu_plan(plan, "ddp", ranks=1, accumulation=2)
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--max_steps", "2", "--use_cpu", "--report_to", "none",
         "--save_strategy", "no", *hf_trainer.arguments(e)])
    assert args.max_grad_norm == 0.0
    model, data = _Regression.build()
    result = Trainer(model=model, args=args, train_dataset=data).train()
    assert result.global_step == 2


def test_hf_trainer_trains_from_the_exported_flags_with_the_plans_clipping(plan, tmp_path):
    pytest.importorskip("transformers")
    from transformers import HfArgumentParser, Trainer, TrainingArguments

    e = dataclasses.replace(cpu_plan(plan, "ddp", ranks=1), grad_clip_norm=0.5)
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--max_steps", "2", "--use_cpu", "--report_to", "none",
         "--save_strategy", "no", *hf_trainer.arguments(e)])
    assert args.max_grad_norm == 0.5
    model, data = _Regression.build()
    assert Trainer(model=model, args=args, train_dataset=data).train().global_step == 2


def test_hf_training_arguments_built_from_a_plan(plan, tmp_path):
    pytest.importorskip("transformers")
    e = cpu_plan(plan, "fsdp", ranks=1, accumulation=2)
    args = hf_trainer.training_arguments(e, output_dir=str(tmp_path), max_steps=2, use_cpu=True)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (2, 2)
    assert args.max_grad_norm == 0.0 and args.fsdp_config["version"] == 2  # fsdp_config.json's content, no file
    # Accumulating, the Trainer reduce-scatters every micro-batch, as the plan's memory counts (and fit() runs).
    assert args.accelerator_config.gradient_accumulation_kwargs == {"sync_each_batch": True}
    once = hf_trainer.training_arguments(cpu_plan(plan, "fsdp", ranks=1), output_dir=str(tmp_path), max_steps=2,
                                         use_cpu=True)
    assert not (once.accelerator_config.gradient_accumulation_kwargs or {}).get("sync_each_batch")


@pytest.mark.slow
def test_hf_trainer_trains_a_deepspeed_plan(plan, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("deepspeed")
    directory = write(cpu_plan(plan, "deepspeed_stage_2", ranks=1, accumulation=2), tmp_path)
    got = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
               str(SCRIPTS / "hf_train.py")], directory)
    assert got == {"steps": 2, "max_grad_norm": 0.0}


# DeepSpeed


def test_deepspeed_initialize_takes_ds_config_and_steps(plan, tmp_path):
    pytest.importorskip("deepspeed")
    directory = write(cpu_plan(plan, "deepspeed_stage_2", ranks=1, accumulation=2), tmp_path)
    got = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
               str(SCRIPTS / "deepspeed_step.py")], directory)
    assert got == {"steps": 2, "stage": 2, "gradient_clipping": 0.0}


# README


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "fsdp_hybrid", "deepspeed_stage_2"])
def test_readme_names_only_files_the_export_has(plan, strategy):
    files = render(cpu_plan(plan, strategy, ranks=2), validate=False)
    named = set(re.findall(r"[\w.-]+\.(?:json|yaml|py|txt|sh|sbatch)\b", files["README.md"]))
    assert named <= set(files), named - set(files)


def test_hf_trainer_steps_bitsandbytes_8bit_adamw_from_the_exported_flags(plan, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("bitsandbytes")
    import torch
    from transformers import HfArgumentParser, Trainer, TrainingArguments

    e = dataclasses.replace(cpu_plan(plan, "ddp", ranks=1), optimizer="adamw8bit", optimizer_impl=None)
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--max_steps", "2", "--use_cpu", "--report_to", "none",
         "--save_strategy", "no", *hf_trainer.arguments(e)])
    assert args.optim == "adamw_bnb_8bit"

    class Wide(torch.nn.Module):  # 4096 weights: bitsandbytes keeps 8-bit state from its min_8bit_size on
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(64, 64)

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.linear(x), labels)}

    model = Wide()
    data = [{"x": torch.randn(64), "labels": torch.randn(64)} for _ in range(16)]
    trainer = Trainer(model=model, args=args, train_dataset=data)
    assert trainer.train().global_step == 2
    state = trainer.optimizer.optimizer.state[model.linear.weight]
    assert state["state1"].dtype == torch.uint8 and state["state2"].dtype == torch.uint8


def test_lightning_zero3_config_passes_the_setup_of_validate_test_and_predict(plan, tmp_path, monkeypatch):
    """Outside fit(), Lightning 2.5.6's ZeRO-3 path (``_initialize_deepspeed_inference``) reads
    ``zero_allow_untested_optimizer`` from the given config, which only its own default config had: validate,
    test and predict raised ``KeyError`` (export probe). Run up to DeepSpeed's initialize, which needs CUDA."""
    pytest.importorskip("lightning")
    pytest.importorskip("deepspeed")
    import deepspeed
    import lightning.pytorch as pl
    import torch

    monkeypatch.chdir(write(on_gpus(cpu_plan(plan, "deepspeed_stage_3", ranks=1, accumulation=1)), tmp_path))
    namespace: dict = {}
    exec(constructible_here((tmp_path / "lightning_trainer.py").read_text()), namespace)
    strategy = namespace["trainer"].strategy
    module = pl.LightningModule()
    module.trainer = namespace["trainer"]
    strategy.connect(module)
    strategy._format_config()
    seen: dict = {}

    def initialize(**kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop: DeepSpeed itself needs CUDA here")

    monkeypatch.setattr(deepspeed, "initialize", initialize)
    with pytest.raises(RuntimeError, match="stop: DeepSpeed itself"):
        strategy._initialize_deepspeed_inference(torch.nn.Linear(2, 2))
    assert seen["config"]["zero_allow_untested_optimizer"] is True
    assert seen["config"]["zero_optimization"]["stage"] == 3


@pytest.mark.parametrize(("ranks", "affinity"), [(4, None), (1, {0})])
def test_lightning_fsdp_offload_file_gives_every_rank_its_share_of_the_cores(plan, tmp_path, ranks, affinity):
    """Lightning sets the thread share in a launcher ModelParallelStrategy makes in the first process only: its
    other ranks took every core for the host's optimizer step (export probe). The file run as a rank (OMP unset).
    In a job confined to some cores (a cpuset, taskset) the share is of those, as launch.sh's nproc counts them
    (a container probe: the file divided os.cpu_count(), every core of the machine)."""
    pytest.importorskip("lightning")
    if affinity is not None and (not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2):
        pytest.skip("needs CPU affinity and two cores")
    exported = on_gpus(cpu_plan(plan, "fsdp_cpu_offload", ranks=ranks))
    write(exported, tmp_path)
    snippet = constructible_here((tmp_path / "lightning_trainer.py").read_text())
    confine = "" if affinity is None else f"import os\nos.sched_setaffinity(0, {affinity!r})\n"
    count = "os.cpu_count()" if affinity is None else "len(os.sched_getaffinity(0))"
    check = confine + snippet + f"\nimport json, os, torch\nprint(json.dumps([torch.get_num_threads(), {count}]))\n"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    threads, cores = json.loads(proc.stdout.strip().splitlines()[-1])
    assert threads == max(1, cores // ranks)
