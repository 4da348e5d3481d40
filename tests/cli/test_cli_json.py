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
