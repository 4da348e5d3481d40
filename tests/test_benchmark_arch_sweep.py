"""benchmarks/arch_sweep.py: one architecture swept end to end, a name it does not know, and what counts as
autoshard's failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmark_scripts import load

pytest.importorskip("transformers")


def test_one_architecture_is_profiled_recommended_and_checked_against_transformers(tmp_path: Path,
                                                                                 capsys: pytest.CaptureFixture[str]
                                                                                 ) -> None:
    sweep = load("arch_sweep")
    assert sweep.main(["--only", "distilbert", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "arch_sweep.json").read_text())
    (row,) = report["rows"]
    assert (row["model_type"], row["architecture"], row["seq_len"]) == ("distilbert", "DistilBertForMaskedLM", 128)
    assert row["status"] == "ok", row
    assert row["parameters_exact"] and row["meta_parameters"] == row["autoshard_parameters"] > 60_000_000
    assert report["summary"]["ok"] == 1
    assert "| distilbert | DistilBertForMaskedLM | 128 | ok |" in (tmp_path / "arch_sweep.md").read_text()


def test_an_unknown_model_type_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = load("arch_sweep")
    assert sweep.main(["--only", "no-such-type", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--only no-such-type" in err
    assert not (tmp_path / "arch_sweep.json").exists()


def test_a_refusal_that_blames_a_transformers_model_is_autoshards_failure() -> None:
    sweep = load("arch_sweep")
    ok = {"status": "ok", "wall_s": 1.0, "parameter_count": 10}
    blamed = {"status": "refused", "error": "forward raised KeyError: 1 The model's own code raised it"}
    clear = {"status": "refused", "error": "autoshard cannot trace MambaForCausalLM yet: ..."}
    row = {"meta_parameters": 10}
    assert sweep._verdict({**row, "profile": ok, "recommend": ok})["status"] == "ok"
    assert sweep._verdict({**row, "profile": blamed, "recommend": {"status": "refused"}})["status"] == "failed"
    assert sweep._verdict({**row, "profile": clear, "recommend": {"status": "refused"}})["status"] == "refused"
