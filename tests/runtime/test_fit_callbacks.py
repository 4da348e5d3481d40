"""``fit(callbacks=[...])``: the user's objects are told of the run on rank 0 as it goes (an observability probe:
there was no way to log to TensorBoard or Weights & Biases, or to act every N steps, before fit() returned)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import autoshard
from autoshard.errors import UsageError, UserCodeError

REPO = Path(__file__).resolve().parents[2]


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(8)]


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_log(self, steps: list[autoshard.StepMetrics]) -> None:
        self.seen += [("log", s.step, s.loss) for s in steps]

    def on_eval(self, metrics: autoshard.EvalMetrics) -> None:
        self.seen.append(("eval", metrics.step, metrics.loss))

    def on_checkpoint(self, step: int, path: str) -> None:
        self.seen.append(("checkpoint", step, path))

    def on_train_end(self, steps: list[autoshard.StepMetrics]) -> None:
        self.seen.append(("end", [s.step for s in steps], [s.loss for s in steps]))


class _OnlyEvals:
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_eval(self, metrics: autoshard.EvalMetrics) -> None:
        self.steps.append(metrics.step)


def test_callbacks_are_told_each_log_scoring_and_checkpoint_in_order(tmp_path: Path) -> None:
    recorder, evals = _Recorder(), _OnlyEvals()
    result = autoshard.fit(torch.nn.Linear(8, 1), _data(), loss_fn=torch.nn.functional.mse_loss, max_steps=4,
                           log_every=2, eval_data=_data()[:2], eval_every=2, progress=False,
                           checkpointing=autoshard.Checkpointing(dir=tmp_path, every=2), callbacks=[recorder, evals])
    losses = result.losses
    assert recorder.seen == [
        ("log", 1, losses[0]), ("log", 2, losses[1]), ("checkpoint", 2, str(tmp_path / "step-00000002")),
        ("eval", 2, result.evals[0].loss),
        ("log", 3, losses[2]), ("log", 4, losses[3]), ("checkpoint", 4, str(tmp_path / "step-00000004")),
        ("eval", 4, result.evals[1].loss), ("end", [1, 2, 3, 4], losses)]
    assert evals.steps == [2, 4]


class _Broken:
    def on_log(self, steps: list[autoshard.StepMetrics]) -> None:
        raise KeyError("run_name")


def test_a_callback_that_raises_stops_the_run_naming_it() -> None:
    with pytest.raises(UserCodeError, match=r"callbacks\[0\]\.on_log \(_Broken\) raised KeyError: 'run_name'"):
        autoshard.fit(torch.nn.Linear(8, 1), _data(), loss_fn=torch.nn.functional.mse_loss, max_steps=2,
                      log_every=1, progress=False, callbacks=[_Broken()])


@pytest.mark.parametrize(("given", "said"), [
    (lambda steps: None, r"callbacks= takes a list of objects, but got function"),
    ([lambda steps: None], r"callbacks\[0\] \(function\) has none of the methods fit\(\) calls"),
    ([_Recorder(), object()], r"callbacks\[1\] \(object\) has none of the methods"),
])
def test_what_is_not_a_list_of_callbacks_is_refused_before_planning(given: Any, said: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match=said):
        autoshard.fit(torch.nn.Linear(8, 1), _data(), loss_fn=torch.nn.functional.mse_loss, max_steps=1,
                      callbacks=given)
    assert "planning" not in capsys.readouterr().err


SCRIPT = textwrap.dedent("""
    import json, os, sys

    import torch

    import autoshard


    class FileLogger:  # as a TensorBoard SummaryWriter: opened once, buffered, closed at the end
        def __init__(self, path):
            self.file = open(path, "a", buffering=1 << 20)

        def on_log(self, steps):
            for s in steps:
                self.file.write(json.dumps({"pid": os.getpid(), "rank": os.environ.get("RANK"), "step": s.step,
                                            "loss": s.loss}) + "\\n")

        def on_train_end(self, steps):
            self.file.write(json.dumps({"end": [s.step for s in steps]}) + "\\n")
            self.file.close()


    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(8)]
    result = autoshard.fit(torch.nn.Linear(8, 1), data, loss_fn=torch.nn.functional.mse_loss, max_steps=4,
                           log_every=2, processes=2, strategy="ddp", progress=False,
                           callbacks=[FileLogger(sys.argv[1])])
    print("RESULT " + json.dumps({"pid": os.getpid(), "losses": result.losses}))
""")


def test_under_the_workers_fit_starts_rank_0_tells_the_scripts_callbacks(tmp_path: Path) -> None:
    script, log = tmp_path / "train.py", tmp_path / "log.jsonl"
    script.write_text(SCRIPT, encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    done = subprocess.run([sys.executable, str(script), str(log)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    *rows, end = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines()]
    # The worker leaves without Python's exit handlers: the lines reach the file because on_train_end closed it.
    assert end == {"end": [1, 2, 3, 4]}
    assert [(r["rank"], r["step"]) for r in rows] == [("0", 1), ("0", 2), ("0", 3), ("0", 4)]
    assert [r["loss"] for r in rows] == pytest.approx(result["losses"])
    assert {r["pid"] for r in rows} != {result["pid"]}  # told in rank 0's worker, not the launching process
