"""`autoshard profile` and `autoshard models` through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoshard.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_profile_json_has_the_documented_fields(capsys):
    assert main(["profile", "tiny-gpt2", "--batch-size", "2", "--seq-len", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("model", "options", "parameter_count", "trainable_parameter_count", "peak_bytes",
                "peak_breakdown", "overheads", "flops_per_step", "block_class", "blocks", "gpu_model"):
        assert key in out, key
    breakdown = out["peak_breakdown"]
    assert breakdown["total"] == sum(v for k, v in breakdown.items() if k != "total")
    assert out["block_class"] == "GPT2Block"
    assert out["options"]["precision"] == "bf16-mixed"


def test_profile_reserved_replays_the_step_through_the_caching_allocator(capsys):
    argv = ["profile", "tiny-gpt2", "--batch-size", "2", "--seq-len", "64", "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["reserved"] is None
    assert main([*argv, "--reserved"]) == 0
    out = json.loads(capsys.readouterr().out)
    reserved = out["reserved"]
    assert reserved["peak_reserved_bytes"] >= reserved["peak_allocated_bytes"] >= out["peak_bytes"] - 2**20
    assert out["reserve_bytes"] == max(plain["reserve_bytes"], reserved["peak_reserved_bytes"] - out["peak_bytes"])
    assert out["device_total_bytes"] == out["peak_with_overheads_bytes"] + out["reserve_bytes"]
    assert main(argv[:-1] + ["--reserved"]) == 0
    assert "allocator reserve (replayed" in capsys.readouterr().out


def test_profile_table_names_the_peak_and_block(capsys):
    assert main(["profile", "tiny-llama", "--batch-size", "1", "--seq-len", "32", "--target", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "peak allocated" in out and "LlamaDecoderLayer" in out and "FLOPs per step" in out


def test_the_table_says_what_its_totals_are(capsys):
    """A probe read "nvidia-smi total (estimate)" as the figure while its reserve was a floor (GPT-2 at batch 8:
    1.68 MiB where the replay gave 1.54 GiB), and a checkpointed step's FLOPs as the model's."""
    argv = ["profile", "tiny-gpt2", "--batch-size", "2", "--seq-len", "64"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "nvidia-smi total (at least)" in out and "recomputation included" not in out
    assert main([*argv, "--reserved", "--checkpointing", "full"]) == 0
    out = capsys.readouterr().out
    assert "nvidia-smi total (estimate)" in out and "FLOPs per step:" in out and "recomputation included (" in out


def test_model_states_line_says_the_parameters_allocated_beside_their_exact_bytes(capsys):
    """Parameters are counted as stored and gradients as allocated (each tensor rounded up to a block): on a small
    model the line gives both figures for the parameters, the allocated one equal to the fp32 gradients'."""
    assert main(["profile", "tiny-gpt2", "--batch-size", "1", "--seq-len", "32"]) == 0
    line = " ".join(capsys.readouterr().out.split()).split("Model states: ", 1)[1]
    assert main(["profile", "tiny-gpt2", "--batch-size", "1", "--seq-len", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["parameter_bytes"] < out["gradient_bytes"]  # small tensors: the rounding shows
    gradients = line.split("gradients ", 1)[1].split(",")[0]
    assert line.startswith("parameters ") and f"({gradients} allocated)" in line


def test_models_lists_the_catalog(capsys):
    assert main(["models", "--json"]) == 0
    names = {row["name"]: row["parameters"] for row in json.loads(capsys.readouterr().out)}
    assert names["llama-2-7b"] == 6_738_415_616


BAD_INPUT = [
    (["profile", "no/such/model.py"], "no such file"),
    (["profile", "llama2-7b"], "Did you mean llama-2-7b"),
    (["profile", "tiny-gpt2", "--batch-size", "0"], "argument --batch-size: must be a positive whole number"),
    (["profile", "tiny-gpt2", "--seq-len", "-3"], "argument --seq-len: must be a positive whole number"),
    (["profile", "tiny-gpt2", "--precision", "fp8"], "unknown precision"),
    (["profile", "tiny-resnet", "--seq-len", "128"], "--seq-len does not apply to tiny-resnet"),
    (["profile", "gpt2", "--seq-len", "4096"], "error: --seq-len 4096 exceeds the longest sequence"),
    (["profile", "tiny-gpt2", "--reserved", "--target", "cpu"], "--reserved predicts the CUDA caching allocator's"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT, ids=[" ".join(a[1:]) for a, _ in BAD_INPUT])
def test_bad_input_is_one_clear_message_and_exit_code_2(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as refused:  # argparse refuses a flag's value itself (--batch-size 0), naming the flag
        code = refused.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2


def test_forward_shape_error_is_reported_without_traceback(tmp_path, capsys):
    bad = tmp_path / "model.py"
    bad.write_text("import torch\n\ndef model():\n    return torch.nn.Linear(2, 2)\n\ndef batch(n):\n"
                   "    return torch.randn(n, 3)\n")
    assert main(["profile", str(bad), "--target", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "forward raised RuntimeError" in err and "Traceback" not in err


def test_console_script_runs_as_a_process():
    result = subprocess.run([sys.executable, "-m", "autoshard", "profile", str(ROOT / "examples/mlp/model.py"),
                             "--json"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["parameter_count"] > 0


def test_debug_flag_shows_the_traceback_and_keeps_the_answer_and_its_exit_code():
    """--debug raised the error out of main(): exit code 1 where bad input is 2, and no JSON document on stdout
    under --json (a bad-input probe)."""
    result = subprocess.run([sys.executable, "-m", "autoshard", "--debug", "profile", "no/such/model.py", "--json"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "autoshard: error: no/such/model.py: no such file." in result.stderr
    assert json.loads(result.stdout)["error"]["type"] == "ModelSourceError"
