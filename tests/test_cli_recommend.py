"""`autoshard recommend` through the real entry point, on real strategies and hardware profiles."""

from __future__ import annotations

import json

import pytest

from autoshard.cli import main


def test_recommend_json_has_every_candidate_with_the_documented_fields(capsys):
    code = main(["recommend", "tiny-llama", "--hardware", "dgx-h100", "--seq-len", "64", "--batch-size", "4",
                 "--json"])
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    names = {c["strategy"] for c in plan["candidates"]}
    assert {"ddp", "fsdp", "fsdp_shard_grad_op", "deepspeed_stage_2", "deepspeed_stage_3"} <= names
    rec = plan["recommended"]
    assert rec["strategy"] == "ddp"  # a 0.2M-parameter model that fits: plain DDP
    for c in plan["candidates"]:
        assert {"strategy", "fits", "memory", "max_micro_batch_size", "step_time_s", "throughput", "reasons"} <= set(c)
        if not c["fits"]:
            assert c["reasons"], c["strategy"]
    hybrid = next(c for c in plan["candidates"] if c["strategy"] == "fsdp_hybrid")
    assert not hybrid["fits"] and "one node" in hybrid["reasons"][0]


@pytest.mark.parametrize(("hardware", "precision"), [("v100-sxm-32gb", "16-mixed"), ("dgx-h100", "bf16-mixed")])
def test_recommend_without_precision_takes_the_gpus_default(hardware, precision, capsys):
    # a V100 has no bf16: the default there is 16-mixed, not a refusal of a bf16 the user never asked for
    assert main(["recommend", "tiny-gpt2", "--hardware", hardware, "--seq-len", "32", "--batch-size", "2",
                 "--strategies", "ddp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["precision"] == precision


def test_recommend_table_names_the_recommendation_and_rejections(capsys):
    assert main(["recommend", "tiny-gpt2", "--hardware", "workstation-2x-rtx4090", "--seq-len", "64"]) == 0
    out = capsys.readouterr().out
    assert "Recommendation:" in out and "Rejected:" in out


def test_a_rejected_checkpointed_candidate_names_what_it_recomputes(capsys):
    """'deepspeed_stage_3 + checkpointing: needs 74.5 GiB' under a plan whose line above said ZeRO-3 with full
    checkpointing fits: the rejected one was op-selective, and the label did not say (probe)."""
    assert main(["recommend", "gpt2", "--hardware", "t4", "--seq-len", "1024", "--checkpointing", "op",
                 "--gpu-memory", "2GiB", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "ddp + checkpointing (op): needs" in out, out


def test_recommend_writes_a_png_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "memory.png"
    assert main(["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--seq-len", "64", "--batch-size", "2",
                 "--plot", str(png), "--json"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nothing_fits_exits_3_with_the_smallest_requirement(capsys):
    code = main(["recommend", "llama-2-70b", "--hardware", "rtx-4090", "--gpus", "1", "--seq-len", "4096",
                 "--strategies", "ddp", "fsdp"])
    assert code == 3
    err = capsys.readouterr().err
    assert "nothing fits" in err and "the smallest is" in err and "Traceback" not in err


def test_nothing_fits_names_the_host_ram_when_the_device_is_not_what_is_short(capsys):
    # On this CPU machine ZeRO-3 offload's device share is small; its offloaded states are what do not fit.
    code = main(["recommend", "llama-2-70b", "--seq-len", "128", "--strategies", "deepspeed_stage_3_offload"])
    assert code == 3
    err = capsys.readouterr().err
    assert "the smallest is deepspeed_stage_3_offload" in err and "but it needs" in err and "of CPU RAM" in err
    assert "more nodes (--nodes)" in err and "Try more GPUs" not in err  # a node's GPUs share its RAM


BAD = [
    (["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--strategies", "zero3"], "unknown strategy"),
    (["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--global-batch-size", "12"], "not divisible by the 8"),
    (["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--batch-size", "0"], "argument --batch-size: must be a positive"),
    (["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--safety-margin", "1.5"], "safety margin"),
    (["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--jobs", "0"], "argument --jobs: must be a positive whole"),
    (["recommend", "tiny-gpt2", "--hardware", "no-such-gpu"], "unknown hardware profile"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[a[-1] for a, _ in BAD])
def test_bad_input_is_a_clear_message_with_exit_code_2(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as refused:  # argparse refuses a flag's value itself (--batch-size 0), naming the flag
        code = refused.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_hardware_file_without_interconnect_bandwidths_still_plans(tmp_path, capsys):
    # A user profile that knows only the GPU: the rules that need link speeds must not fail.
    profile = tmp_path / "mygpu.yaml"
    profile.write_text(
        "kind: gpu\nname: mygpu\ndisplay_name: My GPU\nmemory: {value: 24 GiB, source: mine}\n"
        "peak_tflops: {bf16: {value: 100, source: mine}}\nsources: {mine: my own measurement}\n"
    )
    code = main(["recommend", "tiny-gpt2", "--hardware", str(profile), "--gpus", "2", "--seq-len", "64", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["recommended"]["fits"]


def test_recommend_output_dir_then_export_round_trip(tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--seq-len", "64", "--batch-size", "2",
                 "--strategies", "deepspeed_stage_2", "--output-dir", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"plan.json", "ds_config.json", "launch.sh", "slurm.sbatch"} <= names
    # Exporting the saved plan again gives the same files, so nothing needs --force.
    assert main(["export", str(out / "plan.json"), "--output-dir", str(out)]) == 0
    capsys.readouterr()
    (out / "ds_config.json").write_text("{}\n")
    assert main(["export", str(out / "plan.json"), "--output-dir", str(out)]) == 2
    assert "ds_config.json" in capsys.readouterr().err


def test_recommend_json_with_an_output_dir_lists_the_files_it_wrote(tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--seq-len", "64", "--batch-size", "2",
                 "--strategies", "ddp", "--output-dir", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    written = json.loads(captured.out)["written"]
    assert sorted(written) == sorted(str(p) for p in out.iterdir()) and str(out / "plan.json") in written
    assert f"files to {out}" in captured.err


def test_export_of_a_malformed_plan_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    assert main(["export", str(bad), "--output-dir", str(tmp_path / "x")]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_reader_that_stops_early_is_not_an_internal_error() -> None:
    """``autoshard recommend ... --json | head -c 50``: the pipe closes mid-write; no 'internal error'."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "autoshard", "recommend", "tiny-gpt2", "--hardware", "dgx-h100",
                             "--seq-len", "32", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(50)
    proc.stdout.close()  # as `head -c 50` does; the JSON (~84 KB) outgrows the 64 KiB pipe buffer, so the CLI is
    # still writing
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "internal error" not in err and "Traceback" not in err


def test_a_config_json_that_leaves_sizes_to_the_defaults_is_planned_with_an_assumed_line(tmp_path, capsys):
    folder = tmp_path / "partial"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                                    "num_hidden_layers": 2, "num_attention_heads": 4}))
    code = main(["recommend", str(folder / "config.json"), "--hardware", "dgx-h100", "--seq-len", "64",
                 "--batch-size", "4", "--no-cache"])
    assert code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"Assumed: {folder / 'config.json'} does not set vocab_size: transformers' defaults for its model_type "
            "were used (vocab_size 32,000); set them in the file if the model differs.") in out
    # Nor does it name its class: which head was planned is said (a CLIP config became its vision classifier).
    assert (f"Assumed: {folder / 'config.json'} names no architectures: planned as LlamaForCausalLM, the first class "
            "transformers' AutoModelForCausalLM has for model_type 'llama'") in out


def test_an_moe_model_on_several_gpus_is_told_expert_parallelism_is_not_planned(tmp_path, capsys):
    folder = tmp_path / "tiny-mixtral"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
        "num_local_experts": 4, "num_experts_per_tok": 2}))
    assert main(["recommend", str(folder / "config.json"), "--hardware", "dgx-h100", "--seq-len", "32",
                 "--batch-size", "2", "--no-cache"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Scope: its 4 experts per MoE layer are planned as any other parameters" in out
    assert "expert parallelism" in out
