"""What the tuner says when something is off, in the user's terms: a study made for another job (what differs, in
words, and the real command that deletes it), a storage that does not open (a hint that fits the URL), a trial
limit shorter than a trial takes, a study limit spent on planning, and an out-of-memory trial."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

import autoshard
from autoshard.cli import main
from autoshard.errors import AutoshardError, UsageError, UserCodeError, WorkerError, reworded
from autoshard.planner.plan_file import ExportedPlan
from autoshard.runtime import supervisor
from autoshard.tuner import storage
from autoshard.tuner.failures import classify
from autoshard.tuner.result import FailureClass, TrialState
from autoshard.tuner.runner import Measurement, TrialFailed, TrialSpec
from autoshard.tuning import TUNE_ARGUMENTS

from .standin import DDP_SPACE, replay

ARGS: dict[str, Any] = {"processes": 2, "seq_len": 32, "precision": "32-true", "steps": 5, "warmup_steps": 2,
                        "progress": False, "use_cache": False, "prune": False, "space": DDP_SPACE}
MODEL = {"name": "tiny", "parameter_count": 137216, "block_class": "Block", "layout_hash": "9e1f" * 4, "code": "f6a8"}
HARDWARE = {"gpu": None, "gpu_memory_bytes": None, "gpus_per_node": 2, "nodes": 1, "device_type": "cpu",
            "backend": "gloo", "nvme_path": None}
BATCH = {"global_batch_size": None, "precision": "32-true", "optimizer": "adamw", "seq_len": 32}
FINGERPRINT = {"model": MODEL, "hardware": HARDWARE, "batch": BATCH, "trial": {"steps": 5, "warmup_steps": 2}}


@pytest.mark.parametrize(("changed", "said"), [
    ({"model": {**MODEL, "code": "57c8"}}, "the model's code changed since the study was made"),
    ({"batch": {**BATCH, "seq_len": 64}}, "the sequence length (--seq-len) was 32 then, 64 now"),
    ({"hardware": {**HARDWARE, "gpus_per_node": 4}}, "the number of devices per node was 2 then, 4 now"),
    ({"model": {**MODEL, "name": "other", "code": "57c8"}}, "the model was tiny then, other now"),
    # trials measured over other steps were ranked with these, without a word (a new user's report)
    ({"trial": {"steps": 8, "warmup_steps": 1}}, "the length of a trial (--steps) was 5 then, 8 now"),
], ids=["edited-model-py", "seq-len", "devices", "another-model", "trial-steps"])
def test_a_study_for_another_job_says_what_differs_in_words(changed: dict[str, Any], said: str) -> None:
    study = optuna.create_study(study_name="edit-2xcpu-70a8cf91")
    storage.check_fingerprint(study, FINGERPRINT, "sqlite:////tmp/e1/study.db")
    with pytest.raises(UsageError, match="made for another job") as info:
        storage.check_fingerprint(study, {**FINGERPRINT, **changed}, "sqlite:////tmp/e1/study.db")
    assert said in info.value.message and "{" not in info.value.message, info.value.message
    assert ("optuna delete-study --study-name edit-2xcpu-70a8cf91 --storage sqlite:////tmp/e1/study.db"
            in (info.value.hint or ""))


def test_a_study_made_before_the_trial_length_was_recorded_is_the_same_job() -> None:
    study = optuna.create_study(study_name="older")
    storage.check_fingerprint(study, {k: v for k, v in FINGERPRINT.items() if k != "trial"}, "sqlite:////tmp/e/s.db")
    storage.check_fingerprint(study, FINGERPRINT, "sqlite:////tmp/e/s.db")  # not refused


def test_the_journal_delete_command_names_its_storage_class() -> None:
    study = optuna.create_study(study_name="my study")
    storage.check_fingerprint(study, FINGERPRINT, "jr/study.log")
    with pytest.raises(UsageError) as info:
        storage.check_fingerprint(study, {**FINGERPRINT, "batch": {**BATCH, "precision": "bf16-mixed"}},
                                  "jr/study.log")
    assert ("optuna delete-study --study-name 'my study' --storage jr/study.log --storage-class JournalFileBackend"
            in (info.value.hint or ""))


def test_a_sqlite_file_in_a_missing_directory_is_not_a_server(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot open the study storage") as info:
        storage.open_storage(f"sqlite:///{tmp_path / 'missing' / 'study.db'}", tmp_path)
    assert f"The directory {tmp_path / 'missing'} does not exist" in (info.value.hint or "")
    assert "server" not in (info.value.hint or "")


@pytest.mark.skipif(importlib.util.find_spec("MySQLdb") is not None, reason="the MySQL driver is installed")
def test_a_mysql_url_without_its_driver_gets_the_mysql_driver_hint(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="database driver is missing") as info:
        storage.open_storage("mysql://x@localhost/db", tmp_path)
    assert "mysqlclient" in (info.value.hint or "") and "psycopg" not in (info.value.hint or "")


def test_a_trial_limit_below_the_estimate_is_said_before_the_trials_and_in_the_timeout(tmp_path: Path) -> None:
    def times_out(exported: ExportedPlan, spec: TrialSpec, run_dir: Path, **_: Any) -> Measurement:
        raise TrialFailed(FailureClass.TIMEOUT, "the workers did not finish within the time limit and were stopped.")

    result = autoshard.tune("tiny-gpt2", trials=1, trial_timeout_s=3, output_dir=tmp_path, runner=times_out, **ARGS)
    assert any(n.startswith("A trial's time limit (3 s) is shorter than a trial is estimated to take here (about ")
               for n in result.notes), result.notes
    (trial,) = result.trials
    assert trial.message == "the workers did not finish within the trial's time limit (3 s, start-up included) and " \
                            "were stopped."


def test_a_study_limit_spent_on_planning_says_so(tmp_path: Path) -> None:
    calls: list[ExportedPlan] = []
    result = autoshard.tune("tiny-gpt2", trials=2, timeout_s=0.001, output_dir=tmp_path, runner=replay(calls), **ARGS)
    assert not calls
    said = "which left no time to start a trial (0 of 2 trial(s) done)"
    assert any(n.startswith("Stopped: planning (tracing the model, measuring this machine) took ") and said in n
               for n in result.notes), result.notes


def test_an_out_of_memory_trial_says_out_of_memory_not_user_code(tmp_path: Path) -> None:
    wrapped = UserCodeError("the model failed on the first batch (tensor(64, 32) int64): RuntimeError:  err == 0. "
                            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 68719476736 bytes. "
                            "Error code 12 (Cannot allocate memory)")
    supervisor.write_error(tmp_path, 1, wrapped)
    time.sleep(0.02)
    supervisor.write_error(tmp_path, 0, RuntimeError("Connection closed by peer"))
    assert classify(WorkerError("rank 1 failed"), tmp_path, world_size=2) == (
        FailureClass.OOM, "rank 1: out of memory: DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                          "64 GiB. Error code 12 (Cannot allocate memory)")


def test_a_python_caller_is_told_tunes_arguments_and_optunas_command_is_kept_whole(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tune()'s errors said --batch-sizes, --study-name and --output-dir to a Python caller."""
    with pytest.raises(UsageError) as info:
        autoshard.tune("tiny-gpt2", batch_size=2, micro_batch_sizes=[2, 4], output_dir=tmp_path)
    assert info.value.message == ("batch_size= fixes the micro-batch and micro_batch_sizes= lists those to try: "
                                  "pass one of them.")
    with pytest.raises(UsageError) as info:
        autoshard.tune("tiny-gpt2", study_name=" ", output_dir=tmp_path)
    assert info.value.hint == "Drop study_name= for the default name, or give one."
    study = optuna.create_study(study_name="edit-2xcpu-70a8cf91")
    storage.check_fingerprint(study, FINGERPRINT, "sqlite:////tmp/e1/study.db")
    with pytest.raises(UsageError) as info:
        storage.check_fingerprint(study, {**FINGERPRINT, "batch": {**BATCH, "seq_len": 64}},
                                  "sqlite:////tmp/e1/study.db")
    hint = reworded(info.value.hint or "", TUNE_ARGUMENTS)
    assert hint.startswith("Start fresh with another output_dir= (with storage=, another study_name= as well")
    assert "`optuna delete-study --study-name edit-2xcpu-70a8cf91 --storage sqlite:////tmp/e1/study.db`" in hint
    assert main(["tune", "tiny-gpt2", "--batch-size", "2", "--batch-sizes", "2", "4", "--output-dir",
                 str(tmp_path)]) == 2
    assert "--batch-size fixes the micro-batch and --batch-sizes lists those to try" in capsys.readouterr().err


def test_a_study_older_than_the_network_fields_is_the_same_job_and_a_changed_network_is_not() -> None:
    """plan.json's hardware gained the network a multi-node plan was priced with; a study made before it stored
    none, and resuming it after an upgrade must not be refused for that."""
    many = {**HARDWARE, "nodes": 2}
    priced = {**many, "network": "8 × InfiniBand NDR (400 Gb/s)", "network_bytes_per_s": 400e9}
    assert storage.fingerprint_differences({**FINGERPRINT, "hardware": many}, {**FINGERPRINT, "hardware": priced}) == []
    slower = {**priced, "network": "4 × 100 GbE", "network_bytes_per_s": 50e9}
    said = storage.fingerprint_differences({**FINGERPRINT, "hardware": priced}, {**FINGERPRINT, "hardware": slower})
    assert said == ["the network between the nodes was 8 × InfiniBand NDR (400 Gb/s) then, 4 × 100 GbE now",
                    "the network's bandwidth per node (bytes/s) was 400,000,000,000 then, 50,000,000,000 now"]


def test_a_study_whose_every_trial_failed_is_taken_up_after_the_model_is_fixed() -> None:
    """The first trial raised in the user's model.py; fixed, the same command was refused: the code changed since
    the study was made (a new user's report). Nothing was measured, so nothing is mixed up by taking it up."""
    study = optuna.create_study(study_name="fixed")
    storage.check_fingerprint(study, FINGERPRINT, "sqlite:////tmp/e/s.db")
    failed = study.ask()
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    edited = {**FINGERPRINT, "model": {**MODEL, "code": "57c8"}}
    note = storage.check_fingerprint(study, edited, "sqlite:////tmp/e/s.db")
    assert note is not None and "taken up for this job although the model's code changed" in note
    assert storage.check_fingerprint(study, edited, "sqlite:////tmp/e/s.db") is None  # recorded: the same job now
    done = study.ask()
    study.tell(done, 1.0)  # once it has measured a trial, another job is refused as before
    with pytest.raises(UsageError, match="made for another job"):
        storage.check_fingerprint(study, FINGERPRINT, "sqlite:////tmp/e/s.db")


def test_the_delete_command_of_a_study_behind_a_password_says_to_put_the_url_back() -> None:
    # the masked URL pasted as given would not log in (team-tuning probe)
    study = optuna.create_study(study_name="team1")
    shown = "postgresql://tuner:***@db.example:5432/studies"
    storage.check_fingerprint(study, FINGERPRINT, shown)
    with pytest.raises(UsageError) as info:
        storage.check_fingerprint(study, {**FINGERPRINT, "trial": {"steps": 6, "warmup_steps": 2}}, shown)
    hint = info.value.hint or ""
    assert "`optuna delete-study --study-name team1 --storage YOUR_STORAGE_URL` (your --storage URL, with its " \
           "password)" in hint
    assert "***" not in hint


def test_hardware_of_several_nodes_is_refused_before_the_model_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`autoshard tune ... --nodes 2` built the model (transformers' import, the config) before refusing the
    hardware, about 10 s of a refusal that needs none; nothing is left in the output directory."""
    def built(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the hardware was checked")

    monkeypatch.setattr("autoshard.tuner.study.load_source", built)
    out = tmp_path / "tune"
    code = main(["tune", "tiny-gpt2", "--hardware", "h100-sxm-80gb", "--nodes", "2", "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "the hardware describes 2 nodes" in err and "one shared --storage URL" in err
    assert not out.exists()


def test_a_slurm_job_of_several_nodes_is_told_to_tune_one_nodes_plan(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Inside a 2-node SLURM job the hint said to run tune on each node, where each was refused again for the
    same 2 nodes (a container probe): it names SLURM as where the nodes came from, and --nodes 1."""
    for name, value in {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "2",
                        "SLURM_TASKS_PER_NODE": "1(x2)"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("autoshard.tuner.study.load_source", lambda *a, **k: pytest.fail("the model was loaded"))
    assert main(["tune", "tiny-gpt2", "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert "describes 2 nodes (SLURM's job has 2)" in err and "pass --nodes 1" in err


_RETURNS_LOSS = '''
import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.layer(x).square().mean()  # the loss itself


def model():
    return Net()


def batch(batch_size):
    return torch.randn(batch_size, 8)
'''


@pytest.mark.parametrize("returns_loss", [True, False])
def test_the_missing_loss_note_is_given_only_when_the_forward_returns_no_loss(returns_loss: bool,
                                                                               tmp_path: Path) -> None:
    """Every tune of a model file without loss() said the trials time profiling's stand-in, which fit() will not
    train on, including the project's own examples/mlp, whose forward returns its loss (probe)."""
    source = _RETURNS_LOSS if returns_loss else _RETURNS_LOSS.replace(".square().mean()  # the loss itself", "")
    (tmp_path / "model.py").write_text(source, encoding="utf-8")
    result = autoshard.tune(str(tmp_path / "model.py"), trials=1, output_dir=tmp_path / "out",
                            runner=replay([]), **{**ARGS, "seq_len": None})
    noted = any("defines no loss()" in note for note in result.notes)
    assert noted is not returns_loss, result.notes


@pytest.mark.parametrize("global_batch_size", [None, 4])
def test_a_best_that_trains_another_global_batch_than_the_planners_says_so(global_batch_size: int | None,
                                                                           tmp_path: Path) -> None:
    """The best (micro-batch 2 on 2 ranks: 4 samples a step) was "faster than the planner's recommendation"
    (micro-batch 1: 2 a step) without a word that it learns from steps twice as large (the tune probe)."""
    result = autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path / "out", runner=replay([]),
                            **{**ARGS, "global_batch_size": global_batch_size})
    assert result.best is not None and result.best.config is not None
    assert result.best.config.micro_batch_size == 2 and result.planner_trial != result.best.number
    said = [n for n in result.notes if "samples per optimizer step" in n]
    if global_batch_size is None:
        assert said == [f"The best trains 4 samples per optimizer step, the planner's recommendation (trial "
                        f"{result.planner_trial}) 2: the batch size changes what training learns, not only its "
                        "speed. To compare at one global batch, tune with --global-batch-size "
                        "(global_batch_size=)."]
    else:
        assert said == []


def test_a_failed_trial_of_a_study_taken_up_after_a_fix_runs_again_and_is_not_counted(tmp_path: Path) -> None:
    """The fixed model's study kept its failed planner trial: a slot of the budget spent, and "The planner's
    recommendation (trial 0) has no throughput to compare with (failed, user_code)" (the tune probe)."""
    model = tmp_path / "model.py"
    model.write_text(_RETURNS_LOSS, encoding="utf-8")  # its trials fail as if the real step raised

    def boom(exported: ExportedPlan, spec: TrialSpec, run_dir: Path, **_: Any) -> Measurement:
        raise TrialFailed(FailureClass.USER_CODE, "model.py:11: ValueError: boom")

    args = {**ARGS, "seq_len": None, "prune": False}
    with pytest.raises(AutoshardError):
        autoshard.tune(str(model), trials=2, output_dir=tmp_path / "out", runner=boom, **args)
    model.write_text(_RETURNS_LOSS + "# fixed\n", encoding="utf-8")  # fixed: another job, its study taken up
    result = autoshard.tune(str(model), trials=2, output_dir=tmp_path / "out", runner=replay([]), **args)
    assert any("taken up for this job" in n and "run again first" in n for n in result.notes), result.notes
    assert [t.number for t in result.trials if t.state is TrialState.COMPLETE] == [1, 2]  # the budget: 2 measured
    rerun = next(t for t in result.trials if t.rerun_of == 0)
    assert result.planner_trial == rerun.number
    assert any(n == "Trial 0 failed for the job before: its configuration ran again as trial 1." for n in result.notes)


def test_tune_leaves_the_callers_random_state_as_it_was(tmp_path: Path) -> None:
    """``torch.manual_seed(0); tune(...); torch.randn(2)`` drew other numbers than without the tune (planning draws
    the traced batches); fit() has put the caller's state back since it was found (a notebook probe)."""
    import torch

    torch.manual_seed(0)
    expected = torch.randn(2)
    torch.manual_seed(0)
    autoshard.tune("tiny-gpt2", trials=1, output_dir=tmp_path / "out", runner=replay([]), **ARGS)
    assert torch.equal(torch.randn(2), expected)
