"""An output directory never shows a best another run exported: a run that finds no best (no trial completed,
or the user's code failed the first trial) removes what an earlier run left in ``best/`` and says so; it used to
leave it there, beside a summary saying no trial completed, for ``fit(plan="out/best")`` to train with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import autoshard
from autoshard.errors import UserCodeError

MODEL = Path(__file__).parent / "trial_model.py"
ARGS = {"processes": 1, "strategies": ["ddp"], "top_strategies": 1, "micro_batch_sizes": [2], "steps": 3,
        "warmup_steps": 1, "trial_timeout_s": 120, "use_cache": False, "progress": False, "precision": "32-true"}


@pytest.fixture(scope="module")
def earlier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output directory a one-trial study exported its best to."""
    out = tmp_path_factory.mktemp("earlier") / "out"
    result = autoshard.tune(MODEL, trials=1, output_dir=out, **ARGS)
    assert result.best is not None and (out / "best" / "plan.json").is_file()
    return out


@pytest.mark.parametrize("how", ["out_of_memory", "user_error"])
def test_a_run_without_a_best_leaves_no_best_of_an_earlier_run(earlier: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    out = tmp_path / "out"
    shutil.copytree(earlier, out, ignore=shutil.ignore_patterns("study.db"))  # the same study, started afresh
    if how == "out_of_memory":
        monkeypatch.setenv("AUTOSHARD_TEST_OOM_FROM", "1")
        result = autoshard.tune(MODEL, trials=1, output_dir=out, **ARGS)
        notes = result.notes
    else:
        monkeypatch.setenv("AUTOSHARD_TEST_RAISE", "injected bug")
        with pytest.raises(UserCodeError, match="injected bug"):
            autoshard.tune(MODEL, trials=1, output_dir=out, **ARGS)
        notes = tuple(json.loads((out / "summary.json").read_text())["notes"])
    assert not (out / "best").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"] is None and summary["exported"] == []
    assert len(summary["trials"]) >= 1 and summary["trials"][0]["state"] != "complete"
    assert any(n.startswith(f"{out / 'best'} held the files of a ddp plan an earlier run exported") for n in notes)
