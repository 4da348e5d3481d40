"""The workload cache: a second plan of the same model reads the traced step instead of tracing, and says so; a
changed model or option traces again; an unusable entry is noted, ignored and rewritten; ``cache=False`` neither
reads nor writes.

Every test has an empty cache of its own (``AUTOSHARD_CACHE_DIR``, set in ``tests/conftest.py``: ``own_cache``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import autoshard
from autoshard.cache import read_json, write_json
from autoshard.models import load_source

pytestmark = pytest.mark.own_cache  # about the cache itself: each test starts from an empty one

MODEL_PY = textwrap.dedent("""
    import torch
    from layers import Block

    def model():
        return torch.nn.Sequential(Block(), Block())

    def batch(batch_size):
        return torch.randn(batch_size, 16)
""")
LAYERS_PY = textwrap.dedent("""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 16)

        def forward(self, x):
            return torch.relu(self.fc(x))
""")


@pytest.fixture
def workloads() -> Path:
    return Path(os.environ["AUTOSHARD_CACHE_DIR"]) / "workloads"


def _entries(workloads: Path) -> list[Path]:
    return sorted(workloads.glob("*.json"))


def _recommend(model: Any = "tiny-gpt2", hardware: str = "dgx-h100", **options: Any) -> autoshard.Plan:
    options.setdefault("seq_len", 32)
    options.setdefault("precision", "32-true")  # one compute mode: a third of the traces
    return autoshard.recommend(model, hardware=hardware, **options)


def _without_note(plan: autoshard.Plan) -> dict[str, Any]:
    data = plan.to_dict()
    del data["cached_workload"]
    return data


def test_a_second_plan_reads_the_entry_and_equals_the_traced_one(workloads):
    traced = _recommend()
    [entry] = _entries(workloads)
    assert traced.cached_workload is None and entry.name.startswith("tiny-gpt2-")
    again = _recommend()
    assert again.cached_workload == str(entry)
    assert _without_note(again) == _without_note(traced) == _without_note(_recommend(cache=False))


def test_other_hardware_reuses_the_entry(workloads):
    _recommend(hardware="dgx-h100")
    other = _recommend(hardware="dgx-a100")
    assert other.cached_workload is not None and len(_entries(workloads)) == 1
    assert other.hardware.gpu is not None and "A100" in other.hardware.gpu.display_name


@pytest.mark.parametrize("changed", [{"seq_len": 48}, {"precision": "bf16-true"}, {"optimizer": "sgd"}])
def test_another_sequence_precision_or_optimizer_traces_again(changed, workloads):
    _recommend()
    other = _recommend(**changed)
    assert other.cached_workload is None and len(_entries(workloads)) == 2
    assert _recommend(**changed).cached_workload is not None


def test_the_sources_own_sequence_length_asked_by_name_reads_the_entry_traced_without_it(workloads):
    # a probe's scripts passed --seq-len 8192 for llama-3-8b (its default): an 80 s trace for a 10 s answer
    default = load_source("tiny-gpt2").default_seq_len
    traced = _recommend(seq_len=None)
    named = _recommend(seq_len=default)
    assert named.cached_workload is not None and len(_entries(workloads)) == 1
    assert _without_note(named) == _without_note(traced)


def test_a_changed_model_file_or_imported_sibling_traces_again_and_other_files_do_not(tmp_path, workloads):
    (tmp_path / "layers.py").write_text(LAYERS_PY, encoding="utf-8")
    model = tmp_path / "model.py"
    model.write_text(MODEL_PY, encoding="utf-8")
    assert _recommend(str(model), seq_len=None).cached_workload is None
    (tmp_path / "notes.txt").write_text("not imported", encoding="utf-8")
    assert _recommend(str(model), seq_len=None).cached_workload is not None
    (tmp_path / "layers.py").write_text(LAYERS_PY.replace("16, 16", "16, 16, bias=False"), encoding="utf-8")
    assert _recommend(str(model), seq_len=None).cached_workload is None
    model.write_text(MODEL_PY + "\n# edited\n", encoding="utf-8")
    assert _recommend(str(model), seq_len=None).cached_workload is None
    assert len(_entries(workloads)) == 3


def test_a_model_changed_from_outside_its_folder_traces_again(tmp_path, workloads, monkeypatch, capsys):
    # A model.py whose size comes from the environment (or from the user's own package elsewhere on the path):
    # its fingerprint cannot see the change, so a cached entry is checked against what the file builds now.
    model = tmp_path / "model.py"
    model.write_text(MODEL_PY.replace("from layers import Block", "import os").replace(
        "torch.nn.Sequential(Block(), Block())", "torch.nn.Linear(16, int(os.environ['WIDTH']))"), encoding="utf-8")
    monkeypatch.setenv("WIDTH", "16")
    first = _recommend(str(model), seq_len=None)
    assert _recommend(str(model), seq_len=None).cached_workload is not None
    monkeypatch.setenv("WIDTH", "64")
    capsys.readouterr()
    changed = _recommend(str(model), seq_len=None)
    assert changed.cached_workload is None
    assert changed.workload.parameter_count == 16 * 64 + 64 != first.workload.parameter_count
    assert "now builds 1,088 trainable parameters in 2 tensors, the entry holds 272 in 2" in capsys.readouterr().err


KEPT_PY = """
import os
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(16, 16)
        kept = os.environ["KEPT"]
        if kept == "frozen":  # an EMA copy or a teacher: parameters that do not train
            self.ema = torch.nn.Linear(16, 16).requires_grad_(False)
        elif kept == "buffer":  # the same copy kept as a buffer
            self.register_buffer("ema", torch.zeros(16 * 16 + 16))

    def forward(self, x):
        return self.net(x)


def model():
    return Net()


def batch(batch_size):
    return torch.randn(batch_size, 16)
"""


def test_a_model_whose_frozen_parameters_or_buffers_changed_traces_again(tmp_path, workloads, monkeypatch, capsys):
    # A multi-model probe: an EMA copy chosen by the environment (parameters, then buffers) was read from the
    # entry traced with the other, doubling or halving the model's memory unnoticed; only what trains was checked.
    model = tmp_path / "model.py"
    model.write_text(KEPT_PY, encoding="utf-8")
    said = {}
    for kept in ("frozen", "frozen", "buffer", "none"):
        monkeypatch.setenv("KEPT", kept)
        capsys.readouterr()
        plan = _recommend(str(model), seq_len=None)
        said[kept] = (plan.cached_workload is not None, plan.workload.parameter_count, plan.workload.buffer_bytes,
                      capsys.readouterr().err)
    assert said["frozen"][:3] == (True, 2 * 272, 0)  # the second run read the first's entry
    assert said["buffer"][:3] == (False, 272, 4 * 272)
    assert "now builds 0 frozen parameters, the entry holds 272" in said["buffer"][3]
    assert said["none"][:3] == (False, 272, 0)
    assert "now builds 0 bytes of buffers, the entry holds 1,088" in said["none"][3]
    assert _recommend(str(model), seq_len=None).cached_workload is not None  # the entry was rewritten


def _truncated(text: str) -> str:
    return text[: len(text) // 2]


def _edited(change: Any) -> Any:
    def edit(text: str) -> str:
        data = json.loads(text)
        change(data)
        return json.dumps(data)
    return edit


UNUSABLE = [
    pytest.param(_truncated, "not valid JSON", id="truncated"),
    pytest.param(lambda text: "\x00garbage", "not valid JSON", id="corrupt"),
    pytest.param(_edited(lambda d: d.update(format=99)), "format 99", id="other-format"),
    pytest.param(_edited(lambda d: d["key"].update(torch="1.0")), "made for another torch", id="other-torch"),
    pytest.param(_edited(lambda d: d.update(kind="something.else")), "not an autoshard workload", id="foreign"),
    pytest.param(_edited(lambda d: d["workload"].pop("traces")), "wrong schema: Workload: missing traces",
                 id="field-missing"),
    pytest.param(_edited(lambda d: d["workload"].update(parameter_count="many")),
                 "wrong schema: Workload.parameter_count: expected int", id="field-mistyped"),
]


@pytest.mark.parametrize(("spoil", "reason"), UNUSABLE)
def test_an_unusable_entry_is_noted_ignored_and_rewritten(spoil, reason, workloads, capsys):
    traced = _recommend()
    [entry] = _entries(workloads)
    entry.write_text(spoil(entry.read_text(encoding="utf-8")), encoding="utf-8")
    capsys.readouterr()
    again = _recommend()
    err = capsys.readouterr().err
    assert again.cached_workload is None and _without_note(again) == _without_note(traced)
    [line] = err.splitlines()
    assert line.startswith(f"autoshard: note: ignored the cached workload {entry} (") and reason in line
    assert line.endswith("tracing again.")
    assert _recommend().cached_workload == str(entry)  # rewritten whole
    assert capsys.readouterr().err == ""


def test_an_entry_traced_by_other_software_is_said_when_the_step_is_traced_again(workloads, capsys):
    # its key differs, so it is never read: an environment probe's DeepSeek-V3 traced for 6 min 39 s, no word why
    _recommend()
    [entry] = _entries(workloads)
    data = json.loads(entry.read_text(encoding="utf-8"))
    data["key"]["torch"] = "2.0.0"
    entry.unlink()
    (workloads / f"{entry.name.rsplit('-', 1)[0]}-{'0' * 32}.json").write_text(json.dumps(data), encoding="utf-8")
    capsys.readouterr()
    assert _recommend().cached_workload is None
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("autoshard: note: the cache holds tiny-gpt2's step for these options traced by torch "
                           "2.0.0 (here ") and "autoshard cache clear --stale" in line
    _recommend(seq_len=16)  # other options: nothing of the kind
    assert capsys.readouterr().err == ""


def test_no_cache_neither_reads_nor_writes(workloads, capsys):
    _recommend(cache=False)
    assert _entries(workloads) == []
    _recommend()
    [entry] = _entries(workloads)
    entry.write_text("spoiled", encoding="utf-8")
    assert _recommend(cache=False).cached_workload is None
    assert entry.read_text(encoding="utf-8") == "spoiled" and capsys.readouterr().err == ""


def test_an_unwritable_cache_is_noted_and_the_plan_still_made(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("AUTOSHARD_CACHE_DIR", str(blocker))
    assert _recommend().recommended.fits
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("autoshard: note: could not write the workload cache:")


def test_a_source_changed_in_code_is_never_cached(workloads):
    source = load_source("tiny-gpt2")
    assert source.fingerprint is not None
    changed = source.replace(loss_fn=lambda output, batch: output.float().mean())
    assert changed.fingerprint is None
    assert _recommend(changed).cached_workload is None and _entries(workloads) == []


WRITER = """
import sys
from pathlib import Path
from autoshard.cache import write_json
path, tag = Path(sys.argv[1]), sys.argv[2]
for i in range(40):
    write_json(path, {"tag": tag, "i": i, "payload": [tag] * 50_000})
"""


def test_concurrent_writers_leave_a_whole_entry_at_every_moment(tmp_path):
    path = tmp_path / "entry.json"
    env = {**os.environ, "PYTHONPATH": str(Path(autoshard.__file__).parent.parent)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag], env=env) for tag in "ab"]
    seen = set()
    while any(w.poll() is None for w in writers):
        data, problem = read_json(path)
        assert problem is None
        if data is not None:
            assert data["payload"] == [data["tag"]] * 50_000
            seen.add(data["tag"])
    assert [w.returncode for w in writers] == [0, 0]
    data, problem = read_json(path)
    assert problem is None and data["i"] == 39 and seen
    assert [p.name for p in tmp_path.iterdir()] == ["entry.json"]  # no temporary file left behind


def test_write_json_reports_an_unwritable_directory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    assert write_json(blocker / "entry.json", {}) is not None


def test_write_json_makes_no_missing_home_directory(tmp_path, monkeypatch):
    # HOME=/nonexistent (a system account's): the cache's mkdir(parents=True) made it, as root
    home = tmp_path / "nonexistent" / "home"
    monkeypatch.setenv("HOME", str(home))
    why = write_json(home / ".cache" / "autoshard" / "workloads" / "entry.json", {})
    assert why is not None and "does not exist" in why and not (tmp_path / "nonexistent").exists()
    assert write_json(tmp_path / "elsewhere" / "entry.json", {}) is None  # only the home is not made


@pytest.mark.slow  # three fit() runs, each planning and training a step
def test_fit_plans_from_the_cache_with_a_note_and_cache_false_neither_reads_nor_writes(workloads):
    def notes(**options: Any) -> list[str]:
        result = autoshard.fit("tiny-gpt2", max_steps=1, seq_len=16, batch_size=2, **options)
        return [n for n in result.notes if "cached" in n]

    assert notes(cache=False) == [] and _entries(workloads) == []
    assert notes() == [] and len(_entries(workloads)) == 1
    [note] = notes()
    assert note.startswith(f"Planned from the traced step cached in {_entries(workloads)[0]}")


def test_a_workload_holding_a_value_of_another_type_is_refused_before_anything_is_written(tmp_path):
    from autoshard._jsonable import SchemaError
    from autoshard.planner.workload_cache import entry_path, store, workload_key
    from tests.planner.test_planner import workload

    key = workload_key(load_source("tiny-gpt2"), precision="bf16-mixed", optimizer="adamw", seq_len=None,
                       checkpointing=(False,), target="cuda")
    assert key is not None
    bad = dataclasses.replace(workload(), parameter_numels=[1, 2])  # a list where the class declares a tuple
    path = entry_path(tmp_path, key)
    with pytest.raises(SchemaError, match=r"Workload\.parameter_numels: expected tuple, got list"):
        store(path, key, bad)
    assert not path.exists() and list(tmp_path.iterdir()) == []
    assert store(path, key, workload()) and read_json(path)[0]["key"] == key.to_dict()


def test_a_cached_step_whose_plan_now_checkpoints_says_it_traces_selective_checkpointing(workloads, capsys):
    # a probe's llama-3-8b plan read its step from the cache, then traced op-selective for 47 s without a word
    # (a new global batch made the plan checkpoint); tiny-gpt2 at micro-batch 64: 189 MiB a GPU, 154 checkpointed
    from autoshard.hardware import load_hardware
    from autoshard.planner.machine import plan_for

    def planned(mib: int) -> autoshard.Plan:
        hardware = load_hardware("dgx-h100", gpus=1)
        gpu = dataclasses.replace(hardware.node.gpu, memory_bytes=mib * 2**20)
        hardware = dataclasses.replace(hardware, node=dataclasses.replace(hardware.node, gpu=gpu))
        return plan_for("tiny-gpt2", hardware, seq_len=128, batch_size=64, strategies=["ddp"])

    assert not planned(80_000).recommended.candidate.activation_checkpointing
    capsys.readouterr()
    tight = planned(190)  # 171 MiB usable: only checkpointed candidates fit
    said = capsys.readouterr().err
    assert tight.recommended.candidate.activation_checkpointing and tight.checkpointing_weighed
    assert "selective checkpointing is weighed too; its step is not in the workload cache yet" in said
    again = planned(190)
    assert again.cached_workload is not None and "not in the workload cache" not in capsys.readouterr().err
