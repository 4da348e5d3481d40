"""fit() trains five tiny models of the zoo (``benchmarks/zoo_models.py``) in 2 gloo processes on CPU: a dense
decoder, a mixture of experts, an encoder-decoder, a vision and a vision-language model.

Each case writes the tiny ``config.json`` and a user's training script, ``autoshard.fit(config_dir, max_steps=3,
processes=2, ...)`` on the model source's own example batches, and runs it as a user would (``python train.py``):
fit() plans, starts one worker per rank and returns rank 0's result. The losses must be finite.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.benchmark_scripts import load

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
MODELS = ["llama-3.1-8b", "mixtral-8x7b", "t5-large", "vit-b-16", "llava-1.5-7b"]
"""Dense decoder, MoE, encoder-decoder, vision, vision-language."""
STEPS = 3
SCRIPT = textwrap.dedent("""
    import json, sys

    import autoshard

    folder, seq_len = sys.argv[1], json.loads(sys.argv[2])
    result = autoshard.fit(folder, max_steps={steps}, processes=2, batch_size=2, seq_len=seq_len,
                           precision="32-true", log_every=1)
    print("RESULT " + json.dumps({{"losses": result.losses, "strategy": result.plan.strategy,
                                   "world_size": result.world_size}}), flush=True)
""").format(steps=STEPS)


@pytest.mark.parametrize("name", MODELS)  # 7-9 s each alone on 2 cores: in CI
def test_fit_trains_a_tiny_zoo_model_in_two_processes(name: str, tmp_path: Path) -> None:
    entry = load("zoo_models").get(name)
    entry.config("tiny").save_pretrained(tmp_path / "model")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    cmd = [sys.executable, str(script), str(tmp_path / "model"), json.dumps(entry.sequence("tiny"))]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    assert result["world_size"] == 2
    assert len(result["losses"]) == STEPS
    assert all(math.isfinite(loss) for loss in result["losses"]), result["losses"]
