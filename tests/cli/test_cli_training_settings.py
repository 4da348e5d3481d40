"""The flags for settings published runs use (issue #16): the optimizer implementation and checkpointing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoshard.cli import main
from autoshard.planner import plan_file


def test_profile_traces_the_named_optimizer_implementation(capsys: pytest.CaptureFixture[str]) -> None:
    peaks = {}
    for impl in ("for-loop", "foreach"):
        assert main(["profile", "tiny-gpt2", "--batch-size", "1", "--seq-len", "16", "--target", "cpu",
                     "--optimizer-impl", impl, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["options"]["optimizer_impl"] == impl
        peaks[impl] = dict(out["phase_peaks"])["optimizer"]["temporaries"]
    assert peaks["foreach"] > peaks["for-loop"]


def test_recommend_plans_and_exports_the_optimizer_implementation(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--gpus", "2", "--seq-len", "32",
                 "--batch-size", "2", "--optimizer-impl", "fused", "--strategies", "ddp", "--output-dir",
                 str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["optimizer_impl"] == "fused"
    assert plan_file.read(tmp_path / "plan.json").optimizer_impl == "fused"


def test_an_unknown_implementation_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["profile", "tiny-gpt2", "--optimizer-impl", "vectorized"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_fused_adafactor_is_refused_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "tiny-gpt2", "--optimizer", "adafactor", "--optimizer-impl", "fused"]) != 0
    err = capsys.readouterr().err
    assert "no fused adafactor" in err and "Traceback" not in err


@pytest.mark.parametrize(("flags", "expected"), [([], "none"), (["--checkpointing"], "full"),
                                                 (["--checkpointing", "every-2"], "every-2"),
                                                 (["--checkpointing", "op"], "op")])
def test_profile_checkpointing_flag_keeps_the_bare_form(flags: list[str], expected: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "tiny-llama", "--batch-size", "2", "--seq-len", "16", *flags, "--json"]) == 0
    options = json.loads(capsys.readouterr().out)["options"]
    assert options["checkpointing"] == expected
    assert options["activation_checkpointing"] is (expected != "none")


def test_recommend_plans_only_the_checkpointing_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "tiny-llama", "--hardware", "dgx-h100", "--gpus", "2", "--seq-len", "32",
                 "--batch-size", "2", "--strategies", "ddp", "--checkpointing", "every-2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["checkpointing"] == "every-2"
    assert all(c["activation_checkpointing"] for c in out["candidates"])


def test_an_unknown_checkpointing_is_refused_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "tiny-llama", "--checkpointing", "sometimes"]) == 2
    err = capsys.readouterr().err
    assert "unknown activation checkpointing 'sometimes'" in err and "Traceback" not in err
