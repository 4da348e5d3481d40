"""Every ``--json`` command's stdout is one JSON document: library logging (DeepSpeed's "Setting accelerator to
CPU") goes to stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from autoshard.cli import main

COMMANDS = {
    "profile": ["profile", "tiny-gpt2", "--seq-len", "32", "--json"],
    # a DeepSpeed pick: exporting validates ds_config.json with DeepSpeed, whose import logs on stdout
    "recommend-output-dir": ["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--seq-len", "32",
                             "--strategies", "deepspeed_stage_2", "--json", "--output-dir", "{tmp}/out"],
    "hardware": ["hardware", "--hardware", "dgx-h100", "--json"],
    "hardware-list": ["hardware", "--list", "--json"],
    "models": ["models", "--json"],
}


@pytest.mark.parametrize("name", COMMANDS)
def test_json_stdout_of_a_real_process_parses(name, tmp_path):
    argv = [a.format(tmp=tmp_path) for a in COMMANDS[name]]
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}  # DeepSpeed detects, and says so
    done = subprocess.run([sys.executable, "-m", "autoshard", *argv], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)


def test_tune_json_stdout_is_json_alone_when_the_library_prints(monkeypatch, capfd, tmp_path):
    def noisy_tune(*args, **kwargs):
        print("[WARNING] Setting accelerator to CPU.")  # a library logger bound to sys.stdout
        os.write(1, b"written by C code or a child process\n")
        return types.SimpleNamespace(to_dict=lambda: {"best": {"strategy": "ddp"}}, best=object())

    monkeypatch.setattr("autoshard.tuning.tune", noisy_tune)
    code = main(["tune", "tiny-gpt2", "--hardware", "dgx-h100", "--output-dir", str(tmp_path), "--json"])
    out, err = capfd.readouterr()
    assert code == 0
    assert json.loads(out) == {"best": {"strategy": "ddp"}}
    assert "Setting accelerator to CPU" in err and "child process" in err


@pytest.mark.parametrize(("argv", "kind", "code"), [
    (["recommend", "tiny-gpt2", "--strategies", "ddp,fsdp", "--json"], "UsageError", 2),
    (["recommend", "tiny-gpt2", "--hardware", "t4", "--seq-len", "64", "--batch-size", "1000000", "--strategies",
      "ddp", "--json"], "NoFeasiblePlan", 3),
])
def test_a_failing_json_command_still_prints_one_json_document_the_error(argv, kind, code):
    """A script reading ``--json`` got an empty stdout on a refusal; now the error is that document (the
    message and hint stay on stderr for a person), and nothing-fits carries every candidate it weighed."""
    done = subprocess.run([sys.executable, "-m", "autoshard", *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == code, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["type"] == kind and error["exit_code"] == code and error["message"] in done.stderr
    assert done.stderr.startswith("autoshard: error: ") and "Traceback" not in done.stderr
    if kind == "NoFeasiblePlan":
        assert {c["strategy"] for c in error["candidates"]} == {"ddp"}
        assert all(not c["fits"] and c["reasons"] for c in error["candidates"])
        assert "--batch-size" in error["hint"]
        # "as in candidates above" (docs/recommend.md): what each recomputes, and the GPU's nvidia-smi view
        assert {c["checkpointing"] for c in error["candidates"]} <= {"none", "full"}
        assert all("device" in c["memory"] for c in error["candidates"] if c["memory"] is not None)


@pytest.mark.parametrize("argv", [
    ["recommend", "tiny-gpt2", "--batch-size", "abc", "--json"],
    ["recommend", "tiny-gpt2", "--goal", "train", "--json"],
    ["profile", "tiny-gpt2", "--json", "--nodes", "2"],
])
def test_a_flag_argparse_refuses_is_the_json_document_too(argv, capsys):
    """Flag errors came from argparse before ``--json`` was read: stdout stayed empty."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert exit_info.value.code == 2 == error["exit_code"] and error["type"] == "UsageError"
    assert err.splitlines()[0].endswith(error["message"]) and "--help" in error["hint"]
    with pytest.raises(SystemExit):
        main([a for a in argv if a != "--json"])
    assert capsys.readouterr().out == ""


def test_an_internal_error_under_json_is_the_json_document(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("autoshard.cli.models.run", broken)
    assert main(["models", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["error"] == {"type": "InternalError", "message": "RuntimeError: a bug", "exit_code": 1,
                                        "hint": "This is a bug in autoshard; rerun with --debug and report the "
                                                "traceback."}
    assert "internal error: RuntimeError: a bug" in err
