"""Real studies: short real training trials (2 gloo processes, tiny models) under Optuna, end to end.

Proves what the tune issue asks: a study of at least 6 trials completes and exports a plan that fit() then
trains with; a repeated study reuses the result cache; a hanging trial is stopped at its limit with no
process left; an out-of-memory trial is recorded as infeasible (an Optuna constraint) and the study goes on;
a bug in the user's model stops the study with the user's error; and bad input gets a clear answer.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import optuna
import psutil
import pytest
import torch

import autoshard
from autoshard.errors import UsageError, UserCodeError
from autoshard.tuner import FailureClass, TrialState
from autoshard.tuner.storage import FINGERPRINT_ATTR

HERE = Path(__file__).parent
MISBEHAVING = HERE / "misbehaving_model.py"
# Small and fast: 2 CPU processes, tiny-gpt2 at sequence 32, 5 steps of which 2 are warm-up.
SMALL = {"processes": 2, "seq_len": 32, "micro_batch_sizes": [2, 4], "top_strategies": 2, "steps": 5,
         "warmup_steps": 2, "trial_timeout_s": 120, "progress": False, "precision": "32-true"}


def leftover_workers(root: Path) -> list[psutil.Process]:
    """Trial workers still alive whose run directory is under ``root``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "autoshard.tuner.worker" in " ".join(proc.info["cmdline"] or ()) and str(root) in proc.environ().get(
                    "AUTOSHARD_RUN_DIR", ""):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[autoshard.TuneResult, Path]:
    """A 6-trial study of tiny-gpt2 (DDP and the planner's runner-up), pruning off so every trial is measured."""
    root = tmp_path_factory.mktemp("tune")
    result = autoshard.tune("tiny-gpt2", trials=6, output_dir=root / "out", cache_dir=root / "cache", prune=False,
                            **SMALL)
    return result, root


def test_a_six_trial_study_completes_and_exports_the_best(study: tuple[autoshard.TuneResult, Path]) -> None:
    result, root = study
    finished = [t for t in result.trials if t.state is not TrialState.INFEASIBLE or t.failure is not
                FailureClass.PREDICTED_OOM]
    assert len(finished) >= 6
    assert result.planner_trial == 0 and result.trials[0].config is not None
    assert result.trials[0].config.strategy == result.best_plan.strategy or result.best is not result.trials[0]
    measured = [t for t in result.trials if t.state is TrialState.COMPLETE]
    assert len(measured) >= 4, [t.to_dict() for t in result.trials]
    assert result.best is not None and result.best.samples_per_s == max(t.samples_per_s for t in measured)
    for t in measured:
        assert t.samples_per_s > 0 and t.step_time_s > 0 and t.duration_s > 0
        assert t.peak_memory_kind == "host_rss" and t.peak_memory_bytes > 0
        assert t.predicted_peak_bytes > 0 and t.predicted_samples_per_s > 0
    assert {t.config.strategy for t in measured} >= {result.trials[0].config.strategy}
    out = Path(result.output_dir)
    assert (out / "study.db").is_file() and (out / "summary.md").is_file()
    assert json.loads((out / "summary.json").read_text())["best"]["number"] == result.best.number
    assert (out / "best" / "plan.json").is_file()
    assert autoshard.export.read(out / "best" / "plan.json") == result.best_plan
    assert result.best_plan.micro_batch_size == result.best.config.micro_batch_size
    assert not leftover_workers(root)


def test_fit_trains_with_the_exported_best_plan(study: tuple[autoshard.TuneResult, Path]) -> None:
    result, _ = study
    fitted = autoshard.fit("tiny-gpt2", plan=Path(result.output_dir) / "best", max_steps=2)
    assert fitted.plan == result.best_plan
    assert len(fitted.steps) == 2 and all(torch.isfinite(torch.tensor(s.loss)) for s in fitted.steps)


def test_tuning_the_same_job_again_reuses_the_cache(study: tuple[autoshard.TuneResult, Path]) -> None:
    result, root = study
    again = subprocess.run(
        [sys.executable, "-m", "autoshard", "tune", "tiny-gpt2", "--gpus", "2", "--seq-len", "32",
         "--batch-sizes", "2", "4", "--top", "2", "--steps", "5", "--warmup-steps", "2", "--trials", "6",
         "--precision", "32-true", "--no-prune", "--output-dir", str(root / "again"), "--cache-dir",
         str(root / "cache"), "--json"], capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    payload = json.loads(again.stdout)
    first = {json.dumps(t.config.to_dict(), sort_keys=True): t.samples_per_s for t in result.trials if t.samples_per_s}
    # Same seed, same history: the sampler proposes the same configurations first, and each one the first study
    # measured is taken from the cache, with its figure, instead of being run again.
    again_trials = [t for t in payload["trials"] if t["failure"] != "predicted_oom"]
    reused = [t for t in again_trials if json.dumps(t["config"], sort_keys=True) in first]
    assert reused and all(t["cached"] for t in reused), [(t["number"], t["cached"]) for t in reused]
    for t in reused:
        assert t["samples_per_s"] == first[json.dumps(t["config"], sort_keys=True)]
    assert again_trials[0]["cached"] and again_trials[0]["duplicate_of"] is None  # from the cache, not the study
    assert payload["best"]["samples_per_s"] >= result.best.samples_per_s
    # --json keeps stdout for the document; the trials are still said on stderr (they were not, a long study silent)
    said = [line for line in again.stderr.splitlines() if line.startswith("  trial ")]
    assert len(said) == len(payload["trials"]) and "━" not in again.stderr


def test_a_hanging_trial_is_stopped_and_an_oom_is_infeasible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOSHARD_TEST_TRIAL_COUNTER", str(tmp_path / "counter"))
    result = autoshard.tune(MISBEHAVING, processes=2, strategies=["ddp"], top_strategies=1, micro_batch_sizes=[4],
                            trials=3, trial_timeout_s=25, steps=5, warmup_steps=2, output_dir=tmp_path / "out",
                            use_cache=False, progress=False)
    hung, oom, *implied, fine = result.trials
    assert hung.state is TrialState.FAILED and hung.failure is FailureClass.TIMEOUT
    assert 25 <= hung.duration_s < 25 + 15  # stopped at its limit (plus the SIGTERM grace period at most)
    # Where it hung, from the stack each worker wrote when it was stopped: rank 0 asleep in the model's forward.
    assert f"rank 0 was in _misbehave ({MISBEHAVING}:" in hung.message, hung.message
    assert oom.state is TrialState.INFEASIBLE and oom.failure is FailureClass.OOM and "out of memory" in oom.message
    # Micro-batch 4 ran out of memory: its variants the memory model says need no less are not run (the injected
    # OOM would not recur, a real one would); the study goes on to one it says needs less, which trains.
    for t in implied:
        assert t.failure is FailureClass.IMPLIED_OOM and t.duration_s is None, t.to_dict()
        assert not (tmp_path / "out" / "trials" / f"{t.number:04d}").exists()
    assert fine.state is TrialState.COMPLETE and fine.samples_per_s > 0
    assert fine.predicted_peak_bytes < oom.predicted_peak_bytes
    assert result.best is fine
    stored = optuna.load_study(study_name=result.study_name, storage=result.storage)
    assert stored.trials[1].state == optuna.trial.TrialState.COMPLETE and stored.trials[1].constraints == {"oom": 1.0}
    assert stored.trials[0].state == optuna.trial.TrialState.FAIL
    assert stored.best_trial.number == fine.number  # Optuna's own best skips the infeasible trials
    assert not leftover_workers(tmp_path)


def test_a_bug_in_the_users_model_stops_the_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOSHARD_TEST_TRIAL_COUNTER", str(tmp_path / "counter"))
    monkeypatch.setenv("AUTOSHARD_TEST_MODE", "user_error")
    with pytest.raises(UserCodeError, match="injected bug in the user's forward"):
        autoshard.tune(MISBEHAVING, processes=2, strategies=["ddp"], top_strategies=1, micro_batch_sizes=[4],
                       trials=3, steps=4, warmup_steps=1, output_dir=tmp_path / "out", use_cache=False, progress=False)
    stored = optuna.load_study(study_name=None, storage=f"sqlite:///{tmp_path / 'out' / 'study.db'}")
    assert [t.user_attrs.get("failure") for t in stored.trials] == [FailureClass.USER_CODE.value]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"trials": 0}, "trials must be a whole number >= 1"),
    ({"trials": 2.5}, "trials must be a whole number >= 1"),
    ({"timeout_s": 0}, "timeout_s must be a positive number of seconds"),
    ({"trial_timeout_s": -1}, "trial_timeout_s must be a positive number of seconds"),
    ({"steps": 3, "warmup_steps": 2}, "must exceed warmup_steps"),
    ({"processes": 0}, "processes must be a positive whole number"),
    ({"top_strategies": 0}, "top_strategies \\(the number of strategies to compare\\) must be a whole number >= 1"),
    ({"micro_batch_sizes": [0]}, "micro-batch sizes must be positive"),
    ({"batch_size": 8, "micro_batch_sizes": [4]}, "pass one of them"),  # ran every trial at 4, without a word
    ({"study_name": " "}, "the study name is empty"),
    ({"seed": -1}, r"seed must be a whole number from 0 to 2\*\*32 - 1"),  # was an internal error (Optuna's)
    ({"storage": "not-a-url"}, "neither a database URL nor a journal file"),
    ({"hardware": "dgx-h100", "processes": None}, "trials run on this machine, which has 0 CUDA device"),
    # These four failed after the trace as Python errors, or (compress_gradients) ran a whole study as if True.
    ({"micro_batch_sizes": 4}, r"micro_batch_sizes takes a list of micro-batches, but got 4"),
    ({"space": "ddp"}, "space must be a SearchSpace"),
    ({"compress_gradients": "yes"}, "compress_gradients must be True or False"),
    ({"use_cache": 1}, "use_cache must be True or False"),
])
def test_bad_arguments_are_refused_before_any_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict,
                                                    message: str) -> None:
    def traced(*args: object, **kw: object) -> None:
        raise AssertionError("the model was traced before the bad argument was refused")

    monkeypatch.setattr("autoshard.tuner.study.plan_for", traced)  # checked before any slow work
    with pytest.raises(UsageError, match=message):
        autoshard.tune("tiny-gpt2", output_dir=tmp_path / "out", progress=False, **{"processes": 2, **kwargs})
    assert not (tmp_path / "out").exists()  # not even empty (a bad --storage left one)


def test_an_output_dir_of_none_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="output_dir must be a directory path, but got None"):
        autoshard.tune("tiny-gpt2", output_dir=None, progress=False)  # type: ignore[arg-type]


def test_a_module_cannot_be_tuned(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs a model source"):
        autoshard.tune(torch.nn.Linear(2, 2), output_dir=tmp_path)  # type: ignore[arg-type]


def test_an_unwritable_output_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="cannot write to the output directory"):
        autoshard.tune("tiny-gpt2", output_dir=tmp_path / "file" / "out", processes=2)


def test_a_study_made_for_another_model_is_refused(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    other = optuna.create_study(study_name="mine", storage=storage, direction="maximize")
    other.set_user_attr(FINGERPRINT_ATTR, {"model": {"name": "some-other-model"}, "hardware": {}, "batch": {}})
    with pytest.raises(UsageError, match="was made for another job") as caught:
        autoshard.tune("tiny-gpt2", storage=storage, study_name="mine", output_dir=tmp_path / "out", **SMALL)
    assert "some-other-model" in caught.value.message and "another study_name= as well" in caught.value.hint
    assert "`optuna delete-study --study-name mine --storage " in caught.value.hint  # optuna's command, whole


def test_another_study_into_a_studys_output_directory_is_refused(study: tuple[autoshard.TuneResult, Path]) -> None:
    """tiny-llama tuned into tiny-gpt2's output directory replaced its trials/, best/ and summary, silently."""
    result, root = study
    with pytest.raises(UsageError, match=f"holds the results of study '{result.study_name}'") as caught:
        autoshard.tune("tiny-llama", output_dir=root / "out", **SMALL)
    assert f'study_name="{result.study_name}" goes on with that one' in (caught.value.hint or "")
    summary = json.loads((root / "out" / "summary.json").read_text())
    assert summary["study_name"] == result.study_name


def test_an_unreachable_storage_is_named_without_its_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://tuner:secret@127.0.0.1:{port}/studies"
    monkeypatch.setattr("autoshard.tuner.study.plan_for", lambda *a, **k: pytest.fail("traced before the storage"))
    with pytest.raises(UsageError) as caught:
        autoshard.tune("tiny-gpt2", storage=url, output_dir=tmp_path / "out", **SMALL)
    text = str(caught.value)
    assert f"postgresql://tuner:***@127.0.0.1:{port}/studies" in text and "secret" not in text


def test_cli_bad_input_is_one_line_and_no_traceback(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "autoshard", "tune", "tiny-gpt2", "--trials", "0", "--output-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("autoshard tune: error: argument --trials: must be a positive whole number")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 2


TUNED_FIT_SCRIPT = """
import json, sys
import autoshard

result = autoshard.fit("tiny-gpt2", processes=2, seq_len=32, precision="32-true", max_steps=2,
                       tune=json.loads(sys.argv[1]))
if not autoshard.is_worker():
    print("RESULT " + json.dumps({"plan": result.plan.to_dict(), "notes": result.notes, "steps": len(result.steps)}))
"""


def test_fit_tunes_first_when_asked(study: tuple[autoshard.TuneResult, Path], tmp_path: Path) -> None:
    """Run as a user runs it, a script: fit()'s workers run it again and reach fit(tune=...), where they train
    with the plan tuned in the launching process (they failed there: "fit(tune=True) under a launcher")."""
    result, root = study
    # The same job as the module's study, with its cache: the trials are taken from the cache, then fit trains.
    tune_args = {k: v for k, v in SMALL.items() if k not in ("processes", "seq_len", "precision")}
    tune = {**tune_args, "trials": 6, "prune": False, "output_dir": str(tmp_path / "t"),
            "cache_dir": str(root / "cache")}
    script = tmp_path / "train.py"
    script.write_text(TUNED_FIT_SCRIPT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), json.dumps(tune)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    fitted = json.loads(line.removeprefix("RESULT "))
    assert fitted["plan"] == result.best_plan.to_dict() and fitted["steps"] == 2
    (note,) = [n for n in fitted["notes"] if n.startswith("Tuned with")]
    counts = re.match(r"Tuned with (\d+) trial\(s\) \((\d+) from the result cache\)", note)
    assert counts is not None and 0 < int(counts[2]) <= int(counts[1]) <= 6, note  # trials queued past 6 not counted


def test_tuners_sharing_a_storage_seed_their_samplers_apart() -> None:
    """Two tuners on one PostgreSQL study, both --seed 0, ran the same configurations at once: TPE's random
    start-up trials ignore the constant liar. On a named storage each process mixes its host and pid in."""
    import subprocess
    import sys

    code = "from autoshard.tuner.study import sampler_seed; print(sampler_seed(0, shared=True), " \
           "sampler_seed(0, shared=False))"
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
            for _ in range(2)]
    assert runs[0][1] == runs[1][1] == "0" and runs[0][0] != runs[1][0]


@pytest.mark.parametrize(("given", "example"), [("8", "[8]"), (4, "[4]"), ("many", "[8]")])
def test_a_micro_batch_not_in_a_list_is_answered_with_a_list_tune_takes(given: object, example: str) -> None:
    """``micro_batch_sizes="8"`` suggested ``['8']``, which was refused in turn (the bad-input probe)."""
    from autoshard.tuner.space import check_space_arguments

    with pytest.raises(UsageError) as refused:
        check_space_arguments(1, given)  # type: ignore[arg-type]
    assert f"micro_batch_sizes={example}" in str(refused.value.hint)
