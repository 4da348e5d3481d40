"""Exports of a clipping plan (``grad_clip_norm``): every file that can say it clips at the plan's norm, and the
real DeepSpeed config class and Lightning ``Trainer`` read it. (Planning and pricing: tests/planner/
test_grad_clip_norm.py; accelerate and the HF Trainer running the files: test_consumers.py.)"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoshard.export import hf_trainer, lightning, notes, render
from autoshard.strategies.deepspeed import config as ds_config

from .conftest import constructible_here, cpu_plan, on_gpus


def test_every_export_clips_as_the_plan_says(plan) -> None:
    ddp = cpu_plan(plan, "ddp", ranks=2)
    clipped = dataclasses.replace(ddp, grad_clip_norm=1.0)
    ds = dataclasses.replace(cpu_plan(plan, "deepspeed_stage_2", ranks=2), grad_clip_norm=1.0)
    assert ds_config.ds_config(ds)["gradient_clipping"] == 1.0
    assert ds_config.ds_config(cpu_plan(plan, "deepspeed_stage_2", ranks=2))["gradient_clipping"] == 0.0
    args = hf_trainer.arguments(clipped)
    assert args[args.index("--max_grad_norm") + 1] == "1.0"
    assert "gradient_clip_val=1.0" in lightning.snippet(clipped)
    assert "gradient_clip_val" not in lightning.snippet(ddp)
    assert any("clipped to norm 1 " in n for n in notes(clipped))
    assert any("--grad-clip-norm" in n for n in notes(ddp))


def test_deepspeed_and_lightning_read_the_norm(plan, tmp_path: Path) -> None:
    """The real DeepSpeed config class takes the exported ``gradient_clipping``; the real Lightning ``Trainer``
    built from the exported snippet clips at the plan's norm."""
    pytest.importorskip("lightning")
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    e = dataclasses.replace(on_gpus(cpu_plan(plan, "deepspeed_stage_2", ranks=1, accumulation=2)), grad_clip_norm=0.5)
    files = render(e)
    assert DeepSpeedConfig(json.loads(files["ds_config.json"])).gradient_clipping == 0.5  # one rank: no group
    (tmp_path / "lightning_trainer.py").write_text(constructible_here(files["lightning_trainer.py"]))
    code = ("import runpy; ns = runpy.run_path('lightning_trainer.py'); t = ns['trainer']; "
            "print('RESULT', t.gradient_clip_val)")  # the algorithm left to Lightning's default, the norm
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-1] == "RESULT 0.5"
