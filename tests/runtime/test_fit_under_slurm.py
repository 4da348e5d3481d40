"""fit() in a SLURM step: `srun -n 2 python train.py` ran the script twice, and each fit() started its own whole
run of the plan on the same node, with the same losses and no word (a container probe)."""

from __future__ import annotations

import pytest

import autoshard
from autoshard.errors import UsageError
from autoshard.runtime.distributed import check_not_a_launcher_copy

SRUN_TASK = {"SLURM_JOB_ID": "8", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "2",
             "SLURM_TASKS_PER_NODE": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0"}


def test_fit_in_one_of_several_srun_tasks_is_refused_before_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SRUN_TASK.items():
        monkeypatch.setenv(name, value)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("autoshard.runtime.planning.resolve", lambda *a, **k: pytest.fail("planned"))
    with pytest.raises(UsageError) as info:
        autoshard.fit("tiny-gpt2", None, max_steps=1)
    assert "this process is SLURM task 1 of 2" in str(info.value)
    assert "srun --ntasks-per-node=1 torchrun" in (info.value.hint or "")


@pytest.mark.parametrize("environ", [
    {"SLURM_JOB_ID": "8", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"},  # sbatch's script itself: one copy
    {**SRUN_TASK, "SLURM_NTASKS": "1"},  # srun of one task
    {},
])
def test_one_copy_of_the_script_starts_its_workers(environ: dict[str, str]) -> None:
    check_not_a_launcher_copy(environ)
