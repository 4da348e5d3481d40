"""Bad input is answered before anything is traced, in the user's terms (flags on the command line, types in
Python), and the table shows the rule names."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

import autoshard
from autoshard.cli import main
from autoshard.errors import UsageError

RECOMMEND = ["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--seq-len", "32"]


def _a_file(tmp_path: Path) -> Path:
    path = tmp_path / "file"
    path.write_text("")
    return path


EARLY = [
    (["--output-dir", "{file}/out"], "is not a directory"),
    (["--output-dir", "/proc/autoshard-out"], "cannot be written"),
    (["--plot", "{tmp}/no-such-folder/memory.png"], "does not exist"),
    (["--plot", "{tmp}/memory.xyz"], "cannot write .xyz"),
    (["--plot", "{tmp}"], "is a directory"),
    (["--global-batch-size", "12"], "not divisible by the 8 devices"),
]


@pytest.mark.parametrize("command", [
    [*RECOMMEND, "--output-dir", ""], [*RECOMMEND, "--nvme", ""], [*RECOMMEND, "--plot", ""],
    ["export", "plan.json", "--output-dir", ""], ["export", "", "--output-dir", "out"],
    ["tune", "tiny-gpt2", "--output-dir", ""], ["tune", "tiny-gpt2", "--cache-dir", ""],
    ["hardware", "--benchmark-disk", ""], ["hardware", "--nvme", ""],
], ids=lambda c: f"{c[0]} {c[-2]}")
def test_an_empty_path_is_refused_naming_its_flag(command, tmp_path, monkeypatch, no_tracing, capsys):
    """Path("") is the current directory: --output-dir "" wrote a plan's files there, tune its study, --nvme ""
    offloaded there, and all of it exited 0 (a bad-input probe)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(command)
    assert exit_.value.code == 2
    flag = command[-2] if command[-1] == "" else "plan"
    assert f"argument {flag}: must be a path, not an empty string" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_python_refuses_an_empty_output_dir_and_checkpoint_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = autoshard.recommend("tiny-gpt2", hardware="dgx-h100", seq_len=32, cache=False)
    for out in ("", None):
        with pytest.raises(UsageError, match="export_plan\\(\\) writes into a directory, and output_dir is"):
            autoshard.export_plan(plan, out)
    with pytest.raises(UsageError, match="checkpointing.dir is an empty path"):
        autoshard.fit(torch.nn.Linear(2, 2), [torch.randn(4, 2)], loss_fn=lambda out, batch: out.sum(),
                      checkpointing=autoshard.Checkpointing(dir=""))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("flags", "message"), EARLY, ids=[m for _, m in EARLY])
def test_bad_paths_and_batches_are_refused_before_tracing(flags, message, tmp_path, no_tracing, capsys):
    flags = [f.format(tmp=tmp_path, file=_a_file(tmp_path)) for f in flags]
    assert main([*RECOMMEND, *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "internal error" not in err


@pytest.mark.parametrize(("flags", "message"), [
    (["--hardware", "dgx-a100"], "--hardware is given twice (dgx-h100 and dgx-a100)"),
    (["--gpus", "4", "--gpus", "2"], "--gpus is given twice (4 and 2)"),
])
def test_a_hardware_flag_given_twice_is_refused(flags, message, no_tracing, capsys):
    """argparse kept the last: ``--hardware dgx-h100 --hardware dgx-a100`` planned for dgx-a100 alone, silently."""
    with pytest.raises(SystemExit) as info:
        main([*RECOMMEND, *flags])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "one machine at a time" in err


def test_profile_of_a_built_module_is_a_usage_error_with_a_hint():
    with pytest.raises(UsageError, match="not a built Linear module") as info:
        autoshard.profile(torch.nn.Linear(2, 2), batch_size=1)
    assert "model.py" in (info.value.hint or "")


def test_recommend_with_a_hardware_dict_is_a_usage_error(no_tracing):
    with pytest.raises(UsageError, match="hardware must be a HardwareSpec, a profile name, a YAML path or None"):
        autoshard.recommend("tiny-gpt2", hardware={"gpus": 8})


def test_the_hint_names_the_flag_not_the_python_argument(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("mine\n")
    assert main([*RECOMMEND, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--force" in err and "force=True" not in err and "in Python" not in err  # was "--force (--force in Python)"


def test_an_output_dir_holding_another_models_export_is_refused_before_the_traces(tmp_path, capsys, no_tracing):
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.json").write_text(json.dumps({"kind": "autoshard.plan", "model": {"name": "gpt2"}}))
    assert main([*RECOMMEND, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {out} holds the export of another model (gpt2)" in err and "--force" in err
    (out / "plan.json").write_text("not json")
    assert main([*RECOMMEND, "--output-dir", str(out)]) == 2
    assert "holds a plan.json that is no autoshard plan" in capsys.readouterr().err


def test_an_unknown_storage_scheme_is_not_blamed_on_a_server(tmp_path):
    from autoshard.tuner.storage import open_storage

    with pytest.raises(UsageError) as info:
        open_storage("foo://bar", tmp_path)
    assert "server is running" not in (info.value.hint or "")
    assert "not a database URL" in info.value.message


def test_the_table_shows_rule_names_rich_would_take_for_markup(capsys):
    # 8 devices and a small model: the small-model-ddp rule speaks. In bf16-true, as DDP's autocast step in
    # bf16-mixed moves fp32 activations that FSDP's bf16 step does not (the step-time model prices those bytes).
    assert main([*RECOMMEND, "--precision", "bf16-true"]) == 0
    assert "[small-model-ddp]" in capsys.readouterr().out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.own_cache  # counts the traces
def test_recommend_reports_each_trace_to_the_progress_callback():
    calls: list[tuple[int, int]] = []
    autoshard.recommend("tiny-gpt2", hardware="dgx-h100", seq_len=32, progress=lambda d, t: calls.append((d, t)))
    assert calls and calls[-1][0] == calls[-1][1] > 1
    assert [d for d, _ in calls] == list(range(1, len(calls) + 1))


def test_the_progress_bar_is_drawn_on_a_terminal_only_and_never_under_json():
    from autoshard._progress import tracing_progress

    with tracing_progress(stream=io.StringIO()) as progress:  # a pipe or a log file
        assert progress is None
    with tracing_progress(enabled=False, stream=_Terminal()) as progress:  # --json
        assert progress is None
    terminal = _Terminal()
    with tracing_progress(stream=terminal) as progress:
        assert progress is not None
        progress(3, 12)
    assert "Tracing" in terminal.getvalue()


FLAG_ERRORS = [
    (["recommend", "tiny-gpt2", "--seq-lenn", "32"], "autoshard recommend: error: unrecognized arguments: --seq-lenn 32 "
     "(did you mean --seq-len?)"),
    (["profile", "tiny-gpt2", "--nodes", "2"], "autoshard profile: error: unrecognized arguments: --nodes 2"),
    (["recommend", "tiny-gpt2", "--seq-len", "abc"], "autoshard recommend: error: argument --seq-len: must be a positive "
     "whole number, not 'abc'"),
    (["tune"], "autoshard tune: error: the following arguments are required: model"),
]


@pytest.mark.parametrize(("argv", "first"), FLAG_ERRORS, ids=[a[-1] for a, _ in FLAG_ERRORS])
def test_a_flag_error_is_two_lines_naming_the_subcommand_not_the_usage_block(argv, first, no_tracing, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err.splitlines()
    assert exit_info.value.code == 2
    assert err[0].startswith(first) and "did you mean" not in err[0][len(first):]
    assert err[1:] == [f"  Run '{' '.join(['autoshard', argv[0]])} --help' for its flags."]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA build runs .cuda() under fake tensors")
def test_a_model_that_puts_tensors_on_cuda_itself_is_told_why_it_cannot_be_traced_here(tmp_path, capsys):
    model = tmp_path / "model.py"
    model.write_text("import torch\n\n\ndef model():\n    return torch.nn.Linear(4, 1)\n\n\n"
                     "def batch(batch_size):\n    return torch.randn(batch_size, 4).cuda()  # as GPU scripts do\n")
    assert main(["profile", str(model), "--batch-size", "2"]) == 2
    err = capsys.readouterr().err
    assert "traced on this machine's CPU, on fake tensors" in err and "(x.device)" in err


def test_a_machine_sized_as_compare_sizes_it_is_recommend_s_gpus_and_nodes() -> None:
    """``recommend --hardware a100-sxm-80gb:2`` was an unknown profile, while ``compare`` takes that form (probe)."""
    import argparse

    from autoshard.cli._hardware_args import hardware_from_args

    def hw(**flags: object) -> object:
        args = argparse.Namespace(**{"hardware": None, "gpus": None, "nodes": None, "gpu_memory": None,
                                     "cpu_memory": None, "cpu_cores": None, "nvme": None, **flags})
        return hardware_from_args(args, environ={})

    sized = hw(hardware="h100-sxm-80gb:8x2")
    flagged = hw(hardware="h100-sxm-80gb", gpus=8, nodes=2)
    assert sized == flagged and (sized.world_size, sized.nodes) == (16, 2)  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="sizes the machine, and --gpus or --nodes sizes it again"):
        hw(hardware="h100-sxm-80gb:8", gpus=4)


@pytest.mark.parametrize("flag", ["--seq-len", "--batch-size"])
def test_a_size_beyond_torchs_integers_is_one_line(flag, capsys):
    """A --seq-len of 10^20 printed 13 lines of C++ frames and blamed the model's own code (probe)."""
    assert main(["profile", "tiny-gpt2", flag, "99999999999999999999"]) == 2
    err = capsys.readouterr().err
    assert "is above the 2,147,483,647 autoshard can trace" in err and "c10" not in err
    assert len(err.strip().splitlines()) <= 2


def test_a_size_that_is_not_one_is_said_to_be_no_size(capsys):
    """``--hardware h100-sxm-80gb:abc`` was an unknown profile named with four close ones (the bad-input probe)."""
    assert main(["recommend", "tiny-gpt2", "--hardware", "h100-sxm-80gb:abc"]) == 2
    err = capsys.readouterr().err
    assert "--hardware h100-sxm-80gb:abc: 'abc' is not a size" in err and "h100-sxm-80gb:8x2" in err


@pytest.mark.parametrize(("flags", "message"), [
    (["--timeout", "0"], "argument --timeout: must be a positive number of seconds, not '0'"),
    (["--trial-timeout", "nan"], "argument --trial-timeout: must be a positive number of seconds, not 'nan'"),
    (["--warmup-steps", "-1"], "argument --warmup-steps: must be a whole number >= 0, not '-1'"),
    (["--seed", "-1"], "argument --seed: must be a whole number from 0 to 2**32 - 1, not '-1'"),
    (["--batch-sizes", "0", "4"], "argument --batch-sizes: must be a positive whole number, not '0'"),
])
def test_tunes_numeric_flags_are_refused_by_name_before_anything_is_read(flags, message, tmp_path, capsys):
    """They were refused seconds later, after the hardware and the model were read, in Python's terms: "timeout
    must be a positive number of seconds, but got 0.0" (the tune probe)."""
    with pytest.raises(SystemExit) as info:
        main(["tune", "tiny-gpt2", "--output-dir", str(tmp_path / "out"), *flags])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_tune_refuses_steps_that_leave_nothing_to_time_naming_both_flags(tmp_path, no_tracing, capsys):
    assert main(["tune", "tiny-gpt2", "--output-dir", str(tmp_path / "out"), "--steps", "4",
                 "--warmup-steps", "3"]) == 2
    assert "--steps (4) must exceed --warmup-steps (3) by at least 2" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_python_arguments_of_the_wrong_type_get_a_usage_error(no_tracing):
    """An optimizer class given to profile() raised AttributeError ('AdamW' has no attribute 'strip'), a margin as
    text TypeError from a comparison (a bad-input probe)."""
    with pytest.raises(UsageError, match="optimizer is named here, e.g. 'adamw', but got AdamW"):
        autoshard.profile("tiny-gpt2", optimizer=torch.optim.AdamW)
    with pytest.raises(UsageError, match=r"safety margin must be a number in \[0, 1\), but got '0.1'"):
        autoshard.recommend("tiny-gpt2", hardware="dgx-h100", safety_margin="0.1")


def test_a_gradient_accumulation_past_what_a_profile_traces_is_refused_at_once(no_tracing, capsys):
    """--grad-accumulation 1000000000 traced on without a word: each micro-batch runs under the tracer."""
    assert main(["profile", "tiny-gpt2", "--grad-accumulation", "1000000000"]) == 2
    assert "gradient accumulation 1,000,000,000 is above the 1,024 micro-batches" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "message"), [
    (["--force"], "--force replaces files in --output-dir, and no --output-dir was given."),
    (["--nodes", "1000000000"], "--nodes 1,000,000,000 is more than the 65,536 nodes autoshard plans for."),
])
def test_flags_that_were_quietly_accepted_are_refused(flags, message, no_tracing, capsys):
    """--force alone was ignored; --nodes 1000000000 planned 8,000,000,000 ranks (a bad-input probe)."""
    assert main([*RECOMMEND, *flags]) == 2
    assert message in capsys.readouterr().err


def test_python_hints_name_arguments_not_flags(tmp_path, no_tracing):
    """profile(extrapolate=True) was told to "drop --extrapolate", recommend() to "drop one of the two flags"."""
    with pytest.raises(UsageError) as info:
        autoshard.recommend("tiny-gpt2", hardware="dgx-h100", batch_size=3, global_batch_size=16)
    assert info.value.hint.endswith("drop batch_size= or global_batch_size=.")
    path = tmp_path / "model.py"
    path.write_text("import torch\n\ndef model():\n    return torch.nn.Linear(4, 4)\n\n"
                    "def batch(batch_size):\n    return torch.randn(batch_size, 4)\n")
    with pytest.raises(UsageError) as info:
        autoshard.profile(str(path), extrapolate=True)
    assert "(extrapolate=False)" in info.value.hint and "--" not in info.value.hint
