"""``autoshard compare`` as a new user renting GPUs meets it (the probe): its hints name hardware-file keys that
load and the machine's own name; a global batch one machine cannot divide costs that machine its row, not the
comparison, and is checked before tracing; prices show without a budget and in significant digits; bad machines,
prices and arguments are refused in the caller's terms before anything is traced."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autoshard.cli import main
from autoshard.cli.compare import in_compare_terms
from autoshard.errors import UsageError
from autoshard.hardware import load_hardware
from autoshard.planner.compare import compare, machine_hardware

MODEL = "tiny-gpt2"
MLP = str(Path(__file__).resolve().parents[2] / "examples" / "mlp" / "model.py")


def _json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict:
    assert main(argv) == code
    return json.loads(capsys.readouterr().out)


def test_the_host_hints_name_node_file_keys_that_load_and_are_then_used(tmp_path: Path, capsys) -> None:
    """The notes said ``cpu: memory:`` and ``cpu: cores:``, keys no hardware file takes (a new user's probe)."""
    argv = ["compare", MODEL, "--seq-len", "32", "--strategies", "fsdp_cpu_offload", "--json", "--hardware"]
    notes = " ".join(_json(capsys, [*argv, "t4"])["machines"][0]["notes"])
    keys = re.findall(r"\b(\w+): in a node hardware file", notes)
    assert sorted(keys) == ["cpu_cores", "cpu_memory"]
    node = tmp_path / "t4-node.yaml"
    node.write_text("kind: node\nname: t4-node\ngpu: t4\ngpus_per_node: 1\n"
                    + "".join(f"{key}: {'512 GiB' if key == 'cpu_memory' else 32}\n" for key in keys))
    hw = load_hardware(str(node))
    assert (hw.node.cpu.memory_total_bytes, hw.node.cpu.physical_cores) == (512 * 2**30, 32)
    notes = " ".join(_json(capsys, [*argv, str(node)])["machines"][0]["notes"])
    assert "node hardware file" not in notes  # what they asked for is known now


@pytest.mark.parametrize(("raw", "machine", "per_node", "said"), [
    ("Try more GPUs (the fewest on which it fits are 8, e.g. --gpus/--nodes for 8: one node of 8 (--gpus 8), or 8 "
     "nodes of 1), larger GPUs (--hardware), or NVMe offload (--nvme PATH).", "rtx-4090", 1,
     "Try more GPUs (the fewest on which it fits are 8, e.g. rtx-4090:8 (one node), or rtx-4090:1x8 (8 nodes of "
     "1)), larger GPUs (another machine), or NVMe offload (nvme: in a node hardware file)."),
    ("Try more GPUs (the fewest on which it fits are 32, e.g. --gpus/--nodes for 32: 32 nodes of 1)", "t4", 1,
     "Try more GPUs (the fewest on which it fits are 32, e.g. t4:1x32 (32 nodes of 1))"),
    ("Try more GPUs (the fewest on which it fits are 16, e.g. --gpus/--nodes for 16: 2 nodes of 8)", "dgx-h100:4", 4,
     "Try more GPUs (the fewest on which it fits are 16, e.g. dgx-h100:8x2 (2 nodes of 8))"),
    ("try more nodes (--nodes), a host with more RAM (--cpu-memory), or larger GPUs (--hardware).",
     "h100-sxm-80gb:8x2", 8, "try more nodes (more nodes: h100-sxm-80gb:8xN), a host with more RAM (cpu_memory: in a "
     "node hardware file), or larger GPUs (another machine)."),
])
def test_hints_name_the_machine_itself_not_a_placeholder(raw: str, machine: str, per_node: int, said: str) -> None:
    """``a machine of 8 GPUs (NAME:GxN): one node of 8 (NAME:G 8)`` was the probe's reading of these."""
    assert in_compare_terms(raw, machine, per_node) == said


def test_a_node_cut_to_fewer_gpus_is_said_by_its_own_name(capsys) -> None:
    row = _json(capsys, ["compare", MODEL, "--seq-len", "32", "--hardware", "dgx-h100:4", "--json"])["machines"][0]
    assert "Using 4 of the node's 8 GPUs (dgx-h100:4)." in row["notes"]


def test_a_global_batch_one_machine_cannot_divide_costs_it_its_row_only(capsys) -> None:
    """It traced, then ended the whole table with ``global batch size 1024 is not divisible by the 24 devices``."""
    doc = _json(capsys, ["compare", MODEL, "--seq-len", "32", "--hardware", "dgx-h100:8x3", "dgx-h100",
                         "--global-batch-size", "1024", "--json"])
    rows = {r["machine"]: r for r in doc["machines"]}
    assert rows["dgx-h100"]["global_batch_size"] == 1024
    refused = rows["dgx-h100:8x3"]["refused"]
    assert rows["dgx-h100:8x3"]["strategy"] is None
    assert refused.startswith("--global-batch-size 1024 does not divide among its 24 GPUs") and "1032" in refused


@pytest.mark.parametrize(("machines", "extra", "message"), [
    (["dgx-h100:8x3", "t4:3"], [], "--global-batch-size 1024 does not divide among the GPUs of any machine compared "
                                   "(dgx-h100:8x3 has 24, t4:3 has 3)"),
    (["dgx-h100:8x3"], ["--batch-size", "4"], "--global-batch-size 1024 does not divide among dgx-h100:8x3's 24 GPUs "
                                              "in micro-batches of 4 (--batch-size)"),
])
def test_a_global_batch_no_machine_can_divide_is_refused_before_tracing(machines, extra, message, no_tracing,
                                                                       capsys) -> None:
    assert main(["compare", MODEL, "--hardware", *machines, "--global-batch-size", "1024", *extra]) == 2
    assert message in capsys.readouterr().err
    with pytest.raises(UsageError, match=r"global_batch_size=1024 does not divide"):
        compare(MODEL, machines, global_batch_size=1024)


@pytest.mark.parametrize(("machine", "said"), [
    ("h100-sxm-80gb:8x2:3", "h100-sxm-80gb:8x2:3: the machine is sized twice."),
    ("rtx-4090:2000", "rtx-4090:2000: 2000 is GPUs per node, and no node holds more than 1024."),
    ("dgx-h100:16", "dgx-h100:16: 16 GPUs per node contradict 'dgx-h100', which has 8 GPUs per node."),
    ("dgx-h100:8x", "dgx-h100:8x: '8x' is not a size."),
])
def test_a_machine_badly_sized_is_told_in_compare_s_terms(machine: str, said: str, no_tracing, capsys) -> None:
    """They named ``load_hardware(...)``, ``gpus=``, ``--gpus`` and ``--nodes``, none of which compare has."""
    assert main(["compare", MODEL, "--hardware", machine]) == 2
    err = capsys.readouterr().err
    assert f"autoshard: error: {said}" in err
    assert not re.search(r"load_hardware|gpus=|nodes=|--gpus|--nodes", err)


def test_a_size_is_case_insensitive_as_profile_names_are() -> None:
    assert machine_hardware("h100-sxm-80gb:8X2").world_size == 16


def test_prices_show_without_a_budget_and_small_costs_in_significant_digits(capsys) -> None:
    """``--price`` without a budget vanished; ``cost $ 0`` was $0.24; one priced machine named no cheapest."""
    assert main(["compare", MODEL, "--seq-len", "32", "--hardware", "t4", "dgx-h100", "--price", "T4=0.35"]) == 0
    out = capsys.readouterr().out
    assert "$/GPU-h" in out and "$/1M tokens" in out and "0.35" in out
    assert "Only t4 is priced of the machines that fit" in out
    doc = _json(capsys, ["compare", MODEL, "--seq-len", "32", "--hardware", "t4", "l4", "--samples", "1e6",
                         "--price", "t4=0.35", "--price", "l4=0.7", "--json"])
    rows = {r["machine"]: r for r in doc["machines"]}
    t4 = rows["t4"]
    assert t4["usd_per_million_tokens"] == pytest.approx(0.35 / 3600 / t4["tokens_per_s"] * 1e6)
    assert t4["cost_usd"] == pytest.approx(t4["usd_per_million_samples"])  # a budget of 1M samples
    assert main(["compare", MODEL, "--seq-len", "32", "--hardware", "t4", "l4", "--samples", "1e6",
                 "--price", "t4=0.35", "--price", "l4=0.7"]) == 0
    out = capsys.readouterr().out
    assert f"{t4['cost_usd']:.3g}" in out and "Cheapest of those priced:" in out
    assert re.search(r"│\s+0\s+│", out) is None  # no cost or hours rounded to nothing


def test_the_table_shows_each_machines_global_batch_and_says_when_they_differ(capsys) -> None:
    assert main(["compare", MODEL, "--seq-len", "32", "--hardware", "t4", "dgx-h100"]) == 0
    out = capsys.readouterr().out
    assert "global batch" in out and "train different global batches" in out
    assert main(["compare", MODEL, "--seq-len", "32", "--hardware", "t4:2", "dgx-h100", "--global-batch-size",
                 "64"]) == 0
    out = capsys.readouterr().out
    assert "global batch" in out and "different global batches" not in out


@pytest.mark.parametrize(("machines", "options", "message"), [
    ("dgx-h100", {}, r"machines must be a list of machine names, e\.g\. \['dgx-h100'\]"),
    ([], {}, r"no machine to compare\.\nName one or more"),
    (["dgx-h100"], {"prices": {"dgx-h100": "2.99"}}, r"prices\['dgx-h100'\] must be a number"),
    (["dgx-h100"], {"prices": {"dgx-h100": float("inf")}}, "must be a finite positive number"),
    (["dgx-h100"], {"prices": {"dgx-h100": True}}, r"prices\['dgx-h100'\] must be a number"),
    (["dgx-h100"], {"prices": {"a100": 2.0}}, "prices= names a100, which machines= does not name"),
    (["dgx-h100"], {"hardware": "dgx-h100"}, "unexpected keyword argument 'hardware': the machines are its second"),
    (["dgx-h100"], {"gpus": 8}, r"'gpus': each machine is sized in its name, as NAME:G or NAME:GxN"),
    (["dgx-h100"], {"tokens": 1e9}, r"option\.hours\(tokens=\.\.\.\)"),
    (["dgx-h100"], {"seq_length": 32}, r"compare\(\) got an unexpected keyword argument 'seq_length'; did you mean "
                                       "seq_len="),
    (["dgx-h100", "DGX-H100"], {}, "machines= names dgx-h100 twice"),
])
def test_python_arguments_are_checked_up_front_in_python_terms(machines, options, message, no_tracing) -> None:
    with pytest.raises(UsageError, match=message) as info:
        compare(MODEL, machines, seq_len=32, **options)
    assert "--" not in str(info.value) and "load_hardware" not in str(info.value)


def test_prices_match_machines_case_aside_and_a_repeat_is_named(capsys) -> None:
    doc = _json(capsys, ["compare", MODEL, "--seq-len", "32", "--hardware", "H100-SXM-80GB", "--price",
                         "h100-sxm-80gb=2", "--json"])
    assert doc["machines"][0]["gpu_hour_usd"] == 2.0
    assert main(["compare", MODEL, "--hardware", "t4", "--price", "t4=1", "--price", "t4=2"]) == 2
    assert "--price names t4 twice." in capsys.readouterr().err


def test_a_price_named_by_profile_prices_each_of_its_sizes_but_one_priced_by_its_own_name(capsys) -> None:
    # an environment probe: --hardware dgx-h100:8x256 dgx-h100:8x64 --price dgx-h100=2.99 was refused
    doc = _json(capsys, ["compare", MODEL, "--seq-len", "32", "--hardware", "t4:2", "t4:4", "l4:2", "--price",
                         "t4=1.5", "--price", "t4:4=1.25", "--json"])
    assert {m["machine"]: m["gpu_hour_usd"] for m in doc["machines"]} == {"t4:2": 1.5, "t4:4": 1.25, "l4:2": None}


@pytest.mark.parametrize(("argv", "said"), [
    (["--price", "dgx-h100=inf"], "a price must be a finite positive number of USD per GPU-hour, not inf"),
    (["--price", "dgx-h100=nan"], "a price must be a finite positive number of USD per GPU-hour, not nan"),
    (["--samples", "2.5"], "must be a whole number of tokens or samples, not '2.5'"),
])
def test_a_budget_or_price_that_is_no_amount_is_refused(argv, said, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["compare", MODEL, "--hardware", "dgx-h100", *argv])
    assert said in capsys.readouterr().err


def test_a_token_budget_for_a_model_without_a_sequence_is_refused_before_tracing(no_tracing, capsys) -> None:
    assert main(["compare", MLP, "--hardware", "dgx-h100", "t4", "--tokens", "1e12"]) == 2
    assert "--tokens prices the budget in tokens" in capsys.readouterr().err
