"""``autoshard compare``: one model planned on several machines as ``recommend`` plans each, fastest first, with
the hours and cost of a budget; a machine where nothing fits stays in the table with its reason; bad names and
prices are refused before anything is traced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import autoshard
from autoshard.cli import main
from autoshard.errors import HardwareError, NoFeasiblePlan, UsageError
from autoshard.hardware import load_hardware
from autoshard.planner.compare import compare, machine_hardware

MODEL = "tiny-gpt2"
TINY_GPU = """\
kind: gpu
name: tiny-gpu
display_name: A GPU too small for anything
memory: 1 MiB
memory_bandwidth: 100 GB/s
peak_tflops: {fp32: 10, bf16: 100}
"""


def test_each_machine_is_planned_as_recommend_plans_it_fastest_first(tmp_path: Path) -> None:
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(TINY_GPU)
    options = compare(MODEL, ["t4:2", "dgx-h100", str(tiny)], prices={"t4:2": 0.35, "dgx-h100": 2.99},
                      seq_len=32)
    assert [o.machine for o in options] == ["dgx-h100", "t4:2", str(tiny)]
    rates = [o.samples_per_s for o in options[:2]]
    assert rates[0] is not None and rates[1] is not None and rates[0] > rates[1]
    alone = autoshard.recommend(MODEL, hardware=load_hardware("t4", gpus=2), seq_len=32)
    t4 = options[1]
    assert t4.gpus == 2 and t4.plan is not None
    assert (t4.plan.recommended.strategy, t4.plan.recommended.candidate.micro_batch_size) == (
        alone.recommended.strategy, alone.recommended.candidate.micro_batch_size)
    assert t4.samples_per_s == pytest.approx(alone.recommended.cost.samples_per_s)
    tokens = 1e9
    hours = t4.hours(tokens=tokens)
    assert hours == pytest.approx(tokens / t4.tokens_per_s / 3600)
    assert t4.cost_usd(tokens=tokens) == pytest.approx(hours * 2 * 0.35)
    nothing = options[2]  # kept, with recommend's reason and hint, instead of ending the comparison
    assert nothing.plan is None and nothing.refused and "usable" in nothing.refused
    with pytest.raises(NoFeasiblePlan) as refusal:
        autoshard.recommend(MODEL, hardware=load_hardware(str(tiny)), seq_len=32)
    assert refusal.value.hint and nothing.refused == f"{refusal.value.message} {refusal.value.hint}"
    assert nothing.hours(tokens=tokens) is None and nothing.cost_usd(tokens=tokens) is None
    row = nothing.to_dict(tokens=tokens)
    assert row["strategy"] is None and row["refused"] == nothing.refused


@pytest.mark.parametrize(("machines", "prices", "error", "message"), [
    (["dgx-h100", "nosuch-gpu"], {}, HardwareError, "unknown hardware profile 'nosuch-gpu'"),
    (["dgx-h100", "dgx-h100"], {}, UsageError, "names dgx-h100 twice"),
    (["dgx-h100"], {"a100": 2.0}, UsageError, "prices= names a100, which machines= does not name"),
    (["dgx-h100"], {"dgx-h100": 0.0}, UsageError, "must be a finite positive number"),
    (["dgx-h100:16"], {}, UsageError, "dgx-h100:16: 16 GPUs per node contradict 'dgx-h100'"),
    (["dgx-h100:8x0"], {}, UsageError, "dgx-h100:8x0: a machine has at least one GPU per node and one node"),
    ([], {}, UsageError, "no machine to compare"),
])
def test_bad_machines_and_prices_are_refused_before_tracing(machines, prices, error, message, no_tracing) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(") if "*" not in message else message):
        compare(MODEL, machines, prices=prices, seq_len=32)


def test_machines_are_sized_by_gpus_and_nodes() -> None:
    assert (machine_hardware("l40s:8").world_size, machine_hardware("l40s:8").gpu.name) == (8, "l40s")
    two = machine_hardware("h100-sxm-80gb:8x2")
    assert (two.nodes, two.world_size) == (2, 16)
    assert machine_hardware("dgx-a100").world_size == 8


def test_the_command_prints_json_alone_and_costs_only_what_is_priced(capsys) -> None:
    code = main(["compare", MODEL, "--seq-len", "32", "--hardware", "dgx-h100", "t4", "--tokens", "1e9",
                 "--price", "t4=0.35", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    assert doc["budget"] == {"tokens": 1e9, "samples": None}
    rows = {r["machine"]: r for r in doc["machines"]}
    assert rows["t4"]["cost_usd"] == pytest.approx(rows["t4"]["hours"] * 0.35)
    assert rows["dgx-h100"]["cost_usd"] is None and rows["dgx-h100"]["hours"] > 0
    assert rows["dgx-h100"]["gpus"] == 8
    recommended = autoshard.recommend(MODEL, hardware="t4", seq_len=32).to_dict()["recommended"]
    assert rows["t4"]["checkpointing"] == recommended["checkpointing"] == "none"  # compare said null, recommend "none"


def test_the_command_table_names_the_cheapest_and_the_fastest(capsys) -> None:
    assert main(["compare", MODEL, "--seq-len", "32", "--hardware", "dgx-h100", "t4:2", "--samples", "1e6",
                 "--price", "t4:2=0.35", "--price", "dgx-h100=2.99"]) == 0
    out = capsys.readouterr().out
    assert "Cheapest of those priced:" in out and "Fastest: dgx-h100" in out and "cost $" in out


def test_each_machine_says_what_its_figures_assume_in_the_table_and_the_json(capsys) -> None:
    """A GPU profile on two nodes is priced at an assumed 10 GB/s network: recommend said so, compare did not
    (probe). Its own size is not an override ("Nodes set to 2 (profile: 1)" is no news)."""
    option = machine_hardware("h100-sxm-80gb:8x2")
    assert not any(n.startswith("Nodes set to") for n in option.notes)
    assert main(["compare", MODEL, "--seq-len", "32", "--hardware", "h100-sxm-80gb:8x2", "dgx-h100:8x2",
                 "--global-batch-size", "64", "--json"]) == 0
    rows = {r["machine"]: r for r in json.loads(capsys.readouterr().out)["machines"]}
    assert any("network between them is unknown" in n for n in rows["h100-sxm-80gb:8x2"]["notes"])
    assert not any("network between them is unknown" in n for n in rows["dgx-h100:8x2"]["notes"])
    row = rows["dgx-h100:8x2"]
    assert row["global_batch_size"] == 64 == row["micro_batch_size"] * row["gradient_accumulation"] * 16
    assert main(["compare", MODEL, "--seq-len", "32", "--hardware", "h100-sxm-80gb:8x2", "t4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "h100-sxm-80gb:8x2: 2 nodes, but the network between them is unknown" in out
    assert "t4: Assumed: NVIDIA T4 has no measured kernel efficiencies" in out


def test_a_negative_price_is_told_as_such(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["compare", MODEL, "--hardware", "t4", "--price", "t4=-3"])
    assert "a price must be a finite positive number of USD per GPU-hour, not -3" in capsys.readouterr().err


def test_notes_name_what_compare_takes_not_recommends_flags(tmp_path: Path, capsys) -> None:
    """recommend's reasons name --nvme, --cpu-memory, --cpu-cores, which compare refuses: it takes them from a
    hardware file (a new user's report)."""
    small = tmp_path / "small.yaml"
    small.write_text(TINY_GPU.replace("1 MiB", "16 MiB"))
    assert main(["compare", MODEL, "--seq-len", "32", "--hardware", str(small), "--json"]) == 3  # nothing fits
    refused = json.loads(capsys.readouterr().out)["machines"][0]["refused"]
    assert "NVMe offload (nvme: in a node hardware file)" in refused and "--nvme" not in refused
    assert "against 14.40 MiB usable (16.00 MiB less a 10% margin)" in refused  # was "0.0 GiB usable (0.0 GiB ..."


def test_a_token_budget_for_a_model_without_a_sequence_is_refused_with_samples(capsys) -> None:
    """The example MLP's batches have no sequence: ``--tokens`` printed "—" for hours and cost, and exit 0, with no
    word why (the bad-input probe)."""
    mlp = str(Path(__file__).resolve().parents[2] / "examples" / "mlp" / "model.py")
    assert main(["compare", mlp, "--hardware", "dgx-h100", "--tokens", "1e12"]) == 2
    err = capsys.readouterr().err
    assert "--tokens prices the budget in tokens" in err and "--samples N" in err
    assert main(["compare", mlp, "--hardware", "dgx-h100", "--samples", "1e12", "--price", "dgx-h100=2"]) == 0


def test_an_infinite_budget_is_said_to_be_one(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["compare", MODEL, "--hardware", "t4", "--tokens", "1e309"])
    assert "must be a finite positive number, not '1e309'" in capsys.readouterr().err
