"""fit() under the backends beyond training once: resuming from a checkpoint, torchrun, a dying worker.

Split from ``test_fit_backends.py`` (same script, same helpers) so that ``--dist loadfile`` can run the two files
on different workers: together they were the longest file of the suite.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.runtime.test_fit_backends import results, run_script


@pytest.mark.parametrize("strategy", ["ddp", pytest.param("fsdp", marks=pytest.mark.slow),
                                      pytest.param("deepspeed_stage_2", marks=pytest.mark.slow), "deepspeed_stage_3"])
def test_resume_gives_the_same_next_losses(strategy: str, tmp_path: Path) -> None:
    options = {"strategy": strategy, "processes": 2, "checkpoint_dir": str(tmp_path), "checkpoint_every": 2}
    full = results(run_script(options))[0]
    assert full["last_checkpoint"] == str(tmp_path / "step-00000004")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000002", "step-00000004"]
    resumed = results(run_script({**options, "resume": str(tmp_path / "step-00000002")}))[0]
    assert resumed["resumed_from"] == str(tmp_path / "step-00000002")
    assert resumed["steps"] == [3, 4]
    assert resumed["losses"] == pytest.approx(full["losses"][2:], rel=1e-6)


@pytest.mark.slow  # known issue: in 2 of 4 fresh-clone CI runs a rank aborted in interpreter teardown after training
# ("terminate called without an active exception"); never reproduced locally (6 of 6 passed). docs/fit.md.
def test_fit_under_torchrun_every_rank_trains_the_same_plan() -> None:
    from autoshard.runtime.supervisor import free_port

    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                str(free_port())]
    out = sorted(results(run_script({"strategy": "fsdp"}, launcher=launcher)), key=lambda r: r["rank"])
    assert [r["rank"] for r in out] == [0, 1]
    assert out[0]["strategy"] == out[1]["strategy"] == "fsdp"
    assert out[0]["losses"] == out[1]["losses"]  # the loss is averaged over ranks
    assert out[0]["state_digest"] is not None and out[1]["state_digest"] is None  # consolidated on rank 0
    # fit() made the group and ends it: rank 0's module is given back plain (it stayed sharded, DTensors that
    # torch.save wrote and a plain model could not load); rank 1 keeps its shards.
    assert out[0]["model_plain"] and not out[1]["model_plain"]


@pytest.mark.parametrize(("how", "expected"), [
    ("raise", "rank 1 failed: RuntimeError: injected failure on rank 1"),
    ("kill", "rank 1 was killed by signal 9"),
])
def test_a_dying_worker_stops_the_run_and_is_named(how: str, expected: str) -> None:
    import uuid

    import psutil

    marker = uuid.uuid4().hex
    proc = run_script({"strategy": "ddp", "processes": 2, "fail": {"rank": 1, "step": 2, "how": how},
                       "marker": marker}, check=False, timeout=120)
    assert proc.returncode != 0
    assert expected in proc.stderr
    assert not results(proc)
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    assert left == []  # every worker was stopped and reaped


@pytest.mark.slow  # two DeepSpeed runs on 2 ranks (about 40 s); the CPU Adam step itself: test_resume_optimizer.py
def test_zero2_resumed_with_optimizer_offload_continues_the_same_losses(tmp_path: Path) -> None:
    options = {"strategy": "deepspeed_stage_2", "processes": 2, "checkpoint_dir": str(tmp_path),
               "checkpoint_every": 2}
    full = results(run_script(options))[0]
    resumed = results(run_script({**options, "strategy": "deepspeed_stage_2_offload",
                                  "resume": str(tmp_path / "step-00000002")}))[0]
    assert resumed["steps"] == [3, 4]  # DeepSpeed's CPU Adam read a key torch's AdamW never saved: KeyError
    assert resumed["losses"] == pytest.approx(full["losses"][2:], rel=1e-4)
