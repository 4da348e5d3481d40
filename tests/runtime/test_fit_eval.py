"""fit(eval_data=...) on two processes: each rank scores its share, in eval mode, and every backend's last
scoring is the held-out loss of the model fit() returns (FSDP2 and ZeRO-3 gather their shards in each forward:
the ranks must run as many)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_each_backend_scores_the_held_out_data_as_the_returned_model_does(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    done = subprocess.run([sys.executable, str(REPO / "tests/runtime/fit_eval_script.py"), "ddp", "fsdp",
                           "deepspeed_stage_3"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    results = [json.loads(line.removeprefix("RESULT ")) for line in done.stdout.splitlines()
               if line.startswith("RESULT ")]
    assert [r["strategy"] for r in results] == ["ddp", "fsdp", "deepspeed_stage_3"]
    for r in results:
        # 128 samples, 2 ranks × 8: 8 steps, scored at 4 and 8; 40 held-out samples: 20 per rank, 8 + 8 + 4.
        assert [(e["step"], e["batches"]) for e in r["evals"]] == [(4, 6), (8, 6)], r
        assert r["evals"][-1]["loss"] == pytest.approx(r["direct"], rel=1e-5), r
    losses = [[e["loss"] for e in r["evals"]] for r in results]
    assert losses[1] == pytest.approx(losses[0], rel=1e-5) and losses[2] == pytest.approx(losses[0], rel=1e-5)
