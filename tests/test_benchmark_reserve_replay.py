"""benchmarks/reserve_replay.py: the traced allocation sequence held to a real CPU run's, through the same replay."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import load


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("reserve_replay")


@pytest.mark.parametrize("case_args", [
    ("gpt2", 2, 128, "32-true", False, 1),    # transformers' GPT-2, tied embeddings (built on the CPU, as a GPU sees)
    # autocast and checkpointing: recomputation's frees in backward. Sequence 32: CPU bf16 matmuls into GPT-2's
    # 50,257-word head are slow (sequence 128 took 127 s of CI's time, 2026-12-01; 32 takes 29 s alone).
    ("gpt2", 2, 32, "bf16-mixed", True, 2),
    ("t5-small", 2, 64, "32-true", False, None),
])
def test_the_traced_sequence_reserves_what_the_real_run_does(bench: ModuleType, case_args: tuple) -> None:
    row = bench.run_case(bench.Case(*case_args))
    assert row["error"] is None, row["error"]
    assert row["real_events"] > row["traced_events"] > 0  # the CPU kernels' own scratch is not traced
    assert abs(row["traced_allocated_bytes"] - row["real_allocated_bytes"]) <= 0.01 * row["real_allocated_bytes"]
    assert row["traced_reserved_bytes"] == row["real_reserved_bytes"], row


def test_report_is_written_and_an_unknown_model_is_refused(bench: ModuleType, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--cases", "no-such-model", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "unknown no-such-model" in capsys.readouterr().err
    monkeypatch.setattr(bench, "CASES", (bench.Case("gpt2", 1, 64, "32-true", False, 1),))
    assert bench.main(["--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "reserve_replay.json").read_text())
    assert report["summary"]["ran"] == 1 and report["rows"][0]["reserved_error_pct"] == 0.0
    assert "| gpt2/1L b1x64 32-true |" in (tmp_path / "reserve_replay.md").read_text()
