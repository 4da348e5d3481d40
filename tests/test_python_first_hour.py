"""What a user calling autoshard from Python (a script, a notebook) meets in the first hour: the keywords they guess,
the values they pass where another type is meant, and how a plan reads when printed. Found by a probe of the
Python API (session 45); each case was an internal error, a silent misreading or a wall of text before."""

from __future__ import annotations

import json
import time

import pytest

import autoshard
from autoshard.errors import UnknownArgument, UsageError
from autoshard.export import export_plan


@pytest.mark.parametrize(("call", "meant"), [
    (lambda: autoshard.recommend("tiny-gpt2", batch=8), "did you mean batch_size=?"),
    (lambda: autoshard.recommend("tiny-gpt2", strategy="fsdp"), "did you mean strategies=?"),
    (lambda: autoshard.recommend("tiny-gpt2", checkpointing=True), "did you mean activation_checkpointing=?"),
    (lambda: autoshard.recommend("tiny-gpt2", gpus=8), 'hardware=autoshard.load_hardware("h100-sxm-80gb", gpus=8'),
    (lambda: autoshard.profile("tiny-gpt2", seq_length=16), "did you mean seq_len=?"),
    (lambda: autoshard.tune("tiny-gpt2", strategy="fsdp"), "did you mean strategies=?"),
    (lambda: autoshard.load_hardware("dgx-h100", num_gpus=4), "did you mean gpus=?"),
    (lambda: autoshard.detect_hardware(nodes=2), "detect_hardware() got an unexpected keyword argument 'nodes'."),
    (lambda: autoshard.fit("tiny-gpt2", gpus=2), "did you mean processes=?"),
    (lambda: autoshard.fit("tiny-gpt2", nproc=2), "did you mean processes=?"),  # torchrun says --nproc-per-node
    (lambda: autoshard.fit("tiny-gpt2", strategies=["fsdp"]), "did you mean strategy=?"),
    (lambda: autoshard.fit("tiny-gpt2", lr=1e-3), "optimizer=functools.partial(torch.optim.AdamW, lr=3e-4)"),
    (lambda: autoshard.load_source("tiny-gpt2", seq_len=16), "load_source() got an unexpected keyword argument"),
])
def test_a_guessed_keyword_is_answered_with_the_argument_meant(call, meant):
    started = time.perf_counter()
    with pytest.raises(UnknownArgument) as info:
        call()
    assert meant in str(info.value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, UsageError)  # as Python's own, and ours
    assert time.perf_counter() - started < 5  # refused before any tracing


def test_load_source_of_something_that_names_no_model_is_refused_in_words():
    with pytest.raises(UsageError, match="a model source is a model.py path, a config.json path, a Hub id or a "
                                         "catalog name, but got int 3"):
        autoshard.load_source(3)  # type: ignore[arg-type]


def test_recommend_takes_progress_true_as_fit_and_tune_do_and_refuses_other_values():
    plan = autoshard.recommend("tiny-gpt2", seq_len=16, strategies=["ddp"], progress=True)
    assert plan.recommended.strategy == "ddp"
    with pytest.raises(UsageError, match=r"progress= takes a function progress\(done, total\), True or False"):
        autoshard.recommend("tiny-gpt2", seq_len=16, progress="yes")


@pytest.mark.parametrize(("call", "says"), [
    (lambda: autoshard.profile("tiny-gpt2", reserved="no"), "reserved must be True or False, but got 'no'."),
    (lambda: autoshard.profile("tiny-gpt2", extrapolate="yes"), "extrapolate must be True or False (or None)"),
    (lambda: autoshard.recommend("tiny-gpt2", cache=0), "cache must be True or False, but got 0."),
    (lambda: autoshard.tune("tiny-gpt2", prune="false"), "prune must be True or False, but got 'false'."),
    (lambda: autoshard.fit("tiny-gpt2", force="no"), "force must be True or False, but got 'no'."),
])
def test_a_switch_given_something_else_is_refused_not_read_as_its_truth(call, says):
    # a string is true: reserved="no" traced the reserve it said no to
    with pytest.raises(UsageError) as info:
        call()
    assert says in str(info.value)


def test_an_empty_strategies_list_is_refused_not_read_as_every_strategy():
    with pytest.raises(UsageError, match=r"^strategies= names no strategy"):
        autoshard.recommend("tiny-gpt2", seq_len=16, strategies=[])


@pytest.mark.parametrize(("value", "says"), [
    (None, "load_hardware() takes a profile name or YAML path, not None"),
    (8, "load_hardware() takes a profile name or YAML path, not 8"),
])
def test_load_hardware_refuses_what_is_not_a_profile(value, says):
    with pytest.raises(UsageError) as info:
        autoshard.load_hardware(value)
    assert str(info.value).startswith(says) and "detect_hardware()" in str(info.value)


def test_load_hardware_given_a_spec_says_it_is_hardware_already():
    spec = autoshard.load_hardware("dgx-h100")
    with pytest.raises(UsageError, match=r"this is a HardwareSpec already"):
        autoshard.load_hardware(spec, nodes=2)


def test_the_command_lines_sized_machine_names_work_from_python():
    assert autoshard.load_hardware("l40s:8x2").world_size == 16
    assert autoshard.load_hardware("l40s:4").world_size == 4
    with pytest.raises(UsageError, match=r"sizes the machine, and gpus= or nodes= sizes it again"):
        autoshard.load_hardware("l40s:8", gpus=4)


@pytest.mark.parametrize("argument", ["gpu_memory", "cpu_memory"])
def test_memory_without_a_unit_is_refused_not_read_as_bytes(argument):
    # 80 was taken as 80 bytes, and the plan then said the activations of "0.0 GiB" exceeded a GPU
    with pytest.raises(UsageError) as info:
        autoshard.load_hardware("dgx-h100", **{argument: 80})
    assert str(info.value) == (f"{argument}=80 is 80 bytes, less than any machine's memory.\n"
                               f'Give a unit: {argument}="80GB" (10**9 bytes each) or {argument}="80GiB" (2**30 each).')
    assert autoshard.load_hardware("dgx-h100", gpu_memory=80 * 2**30).gpu.memory_bytes == 80 * 2**30


def test_export_plan_reads_a_plan_json_path_and_refuses_other_values(tmp_path):
    plan = autoshard.recommend("tiny-gpt2", seq_len=16, strategies=["ddp"])
    first = export_plan(plan, tmp_path / "a")
    again = export_plan(str(tmp_path / "a" / "plan.json"), tmp_path / "b")
    assert [p.name for p in first] == [p.name for p in again]
    assert (tmp_path / "a" / "plan.json").read_text() == (tmp_path / "b" / "plan.json").read_text()
    export_plan(tmp_path / "a", tmp_path / "c")  # the directory holding it, as fit(plan=...) takes it
    with pytest.raises(UsageError, match=r"takes a Plan, an ExportedPlan or a plan.json path as plan=, not dict"):
        export_plan(plan.to_dict(), tmp_path / "d")


def test_a_plan_prints_as_a_line_and_its_explanation_not_its_traced_step():
    plan = autoshard.recommend("gpt2", hardware="dgx-h100", seq_len=128, strategies=["ddp", "fsdp"])
    line = repr(plan)
    e = plan.recommended
    assert line.startswith(f"<Plan 'gpt2': {e.strategy}, micro-batch {e.candidate.micro_batch_size}")
    assert "samples/s predicted; 1 × 8 × NVIDIA H100" in line and len(line) < 300  # 450 kB before
    assert str(plan) == "\n".join(plan.explanation)
    assert json.loads(json.dumps(plan.to_dict()))["recommended"]["strategy"] == e.strategy  # unchanged


def test_a_cpu_plan_says_its_speed_is_a_placeholder():
    plan = autoshard.recommend("tiny-gpt2", seq_len=16, strategies=["ddp"],
                               hardware=autoshard.detect_hardware(environ={"CUDA_VISIBLE_DEVICES": ""}))
    assert "samples/s at a placeholder CPU speed (for ranking only; fit() measures the real one)" in \
        plan.explanation[0]
    assert "at a placeholder CPU speed" in repr(plan)


def test_tune_for_gpus_this_machine_lacks_names_processes_not_hardware(tmp_path):
    # the hint came out as "(or pass hardware= N)": the command line's --gpus is tune()'s processes=
    with pytest.raises(UsageError) as info:
        autoshard.tune("tiny-gpt2", hardware="dgx-h100", output_dir=tmp_path)
    assert info.value.hint == "Drop hardware= to tune for this machine as detected (or pass processes=N)."
