"""The explanation argues for the pick, and the hints say only what would help."""

from __future__ import annotations

import dataclasses

import pytest

from autoshard.errors import NoFeasiblePlan
from autoshard.planner import plan
from autoshard.hardware import load_hardware
from tests.planner.test_planner import H100x8, Synthetic, request, workload


def test_explanation_does_not_argue_for_keeping_parameters_whole_when_full_sharding_wins():
    # full sharding is discounted by pretrain-least-communication (shard_grad_op fits) yet predicted 50 % faster
    strategies = [Synthetic("fsdp_shard_grad_op", state_gib=40, act_gib=2, per_device_samples_s=100,
                            communication_s=0.1),
                  Synthetic("fsdp", state_gib=40, act_gib=2, per_device_samples_s=150, sharded=True,
                            communication_s=0.15)]
    p = plan(workload(3_000_000_000), H100x8, request(micro_batch_size=4, goal="pretrain"), strategies)
    assert p.recommended.strategy == "fsdp"
    assert any("pretrain-least-communication" in r for r in p.recommended.reasons)  # kept for the candidate
    text = " ".join(p.explanation)
    assert "keeps parameters whole" not in text and "communicates less" not in text
    assert "leads even after the pretrain-least-communication discount" in text


@pytest.mark.parametrize(("ds_installed", "says_install"), [(True, False), (False, True)])
def test_nothing_fits_hint_says_install_deepspeed_only_when_it_is_missing(ds_installed, says_install):
    missing = None if ds_installed else "deepspeed_stage_3_offload needs DeepSpeed, which is not installed " \
                                        "(pip install deepspeed)."
    strategies = [Synthetic("fsdp", state_gib=5000, act_gib=1, per_device_samples_s=10, sharded=True),
                  Synthetic("deepspeed_stage_3_offload", state_gib=5000, act_gib=1, per_device_samples_s=10,
                            sharded=True, unsupported=missing)]
    with pytest.raises(NoFeasiblePlan) as info:
        plan(workload(), H100x8, request(micro_batch_size=1), strategies)
    assert ("install deepspeed" in (info.value.hint or "")) is says_install


@pytest.mark.parametrize(("sharded", "says_more_gpus"), [(True, True), (False, False)])
def test_nothing_fits_suggests_more_gpus_only_when_a_strategy_weighed_shards(sharded, says_more_gpus):
    # DDP alone (--strategies ddp): a whole replica per GPU, so twice the GPUs hold no less each
    name = "fsdp" if sharded else "ddp"
    with pytest.raises(NoFeasiblePlan) as info:
        plan(workload(), H100x8, request(micro_batch_size=1),
             [Synthetic(name, state_gib=5000, act_gib=1, per_device_samples_s=10, sharded=sharded)])
    hint = info.value.hint or ""
    assert ("Try more GPUs (the fewest on which it fits are 128" in hint) is says_more_gpus
    assert ("more GPUs do not help: try a sharding strategy" in hint) is not says_more_gpus


# 81,559 MiB less 10 %: 71.7 GiB usable; the states divide among the GPUs, 1 GiB of activations does not.
@pytest.mark.parametrize(("gpus", "state_gib", "says"), [
    # --gpus 4 makes a node of 4 GPUs: more of them are more nodes, and up to 8 one node too (planner probe: it
    # offered two nodes of 4 A100s where one of 8, the common board, fits as well)
    (4, 500, "the fewest on which it fits are 8, e.g. --gpus/--nodes for 8: one node of 8 (--gpus 8), or 2 nodes "
             "of 4)"),  # 125 + 1 > 71.7
    (4, 700, "the fewest on which it fits are 16, e.g. --gpus/--nodes for 16: 4 nodes of 4)"),
    (8, 4000, "the fewest on which it fits are 64, e.g. --gpus/--nodes for 64: 8 nodes of 8)"),
    (8, 400_000, "even 4,096 are too few at this micro-batch"),
])
def test_nothing_fits_names_the_fewest_gpus_on_which_a_sharded_candidate_fits(gpus, state_gib, says):
    # not twice the GPUs asked for: 4000 GiB of states on 8 H100s need 64 of them, not 16
    with pytest.raises(NoFeasiblePlan) as info:
        plan(workload(), load_hardware("dgx-h100", gpus=gpus), request(micro_batch_size=1),
             [Synthetic("fsdp", state_gib=state_gib, act_gib=1, per_device_samples_s=10, sharded=True)])
    assert says in (info.value.hint or "")


@pytest.mark.parametrize(("precision", "says"), [("bf16-mixed", "run in bf16 throughout"),
                                                 ("32-true", "only how it holds the model states")])
def test_on_one_gpu_a_sharding_strategy_says_what_it_changes_against_ddps_best(precision, says):
    # On one device FSDP and ZeRO shard nothing; a user seeing one recommended there is told what differs from
    # DDP, with DDP's best micro-batch and throughput. On several devices the sentence is not said.
    import dataclasses

    from autoshard.hardware import load_hardware
    from autoshard.profiler.options import Precision

    strategies = [Synthetic("ddp", state_gib=20, act_gib=2, per_device_samples_s=100),
                  Synthetic("fsdp_shard_grad_op", state_gib=12, act_gib=2, per_device_samples_s=110)]
    w = dataclasses.replace(workload(1_000_000_000), precision=Precision(precision))
    one = plan(w, load_hardware("h100-sxm-80gb", gpus=1), request(), strategies)
    sharded = next(c for c in one.candidates if c.strategy == "fsdp_shard_grad_op" and c.fits)
    ddp_best = max((c for c in one.candidates if c.strategy == "ddp" and c.fits), key=lambda c: c.cost.samples_per_s)
    (sentence,) = [r for r in sharded.reasons if r.startswith("[one-device-sharding]")]
    assert says in sentence
    assert f"against {ddp_best.candidate.micro_batch_size} for DDP's best" in sentence
    assert not any(r.startswith("[one-device-sharding]") for c in one.candidates if c.strategy == "ddp"
                   for r in c.reasons)
    eight = plan(w, H100x8, request(), strategies)
    assert not any(r.startswith("[one-device-sharding]") for c in eight.candidates for r in c.reasons)


@pytest.mark.parametrize("strategy", ["deepspeed_stage_3_offload", "fsdp_cpu_offload"])
@pytest.mark.parametrize(("hardware", "warned"), [("h100-sxm-80gb", True), ("dgx-h100", False)])
def test_offloaded_states_on_a_host_of_unknown_ram_are_said_to_be_unchecked(hardware, warned, strategy):
    # A GPU profile says nothing of the host: 125 GiB of offloaded states cannot be checked against its RAM
    # (a DGX H100's 2 TiB is known, and holds them), and the optimizer step on the host (DeepSpeed's CPU Adam,
    # FSDP's CPU offload) is priced on assumed cores (the DGX's 112 are known)
    from autoshard.hardware import load_hardware

    offload = Synthetic(strategy, state_gib=1, act_gib=1, per_device_samples_s=10, sharded=True, cpu_gib=125)
    p = plan(workload(), load_hardware(hardware, gpus=8), request(micro_batch_size=1), [offload])
    said = [line for line in p.explanation if line.startswith("Unchecked:")]
    assert bool(said) is warned
    if warned:
        assert "125.0 GiB of offloaded states in CPU RAM per node" in said[0] and "--cpu-memory" in said[0]
    assumed = [line for line in p.explanation if line.startswith("Assumed:")]
    assert bool(assumed) is warned
    if warned:
        assert "8 per node were priced, shared by its 8 ranks" in assumed[0] and "--cpu-cores" in assumed[0]
    given = plan(workload(), load_hardware(hardware, gpus=8, cpu_cores=64, cpu_memory="1TiB"),
                 request(micro_batch_size=1), [offload])
    assert not [line for line in given.explanation if line.startswith("Unchecked:")]
    # the cores given, the memory bandwidth that bounds the host step is still assumed (the DGX profile has it)
    assumed = [line for line in given.explanation if line.startswith("Assumed:")]
    assert bool(assumed) is warned
    if warned:
        assert "whose memory bandwidth is not known: 614.4 GB/s per node were priced" in assumed[0]


@pytest.mark.parametrize(("gathering_comm_s", "zero2_exposed_s", "discounted"),
                         [(0.15, 0.0, True), (0.05, 0.0, False), (0.15, 0.1, False)])
def test_pretrain_least_communication_applies_only_where_the_whole_parameter_strategy_communicates_less(
        gathering_comm_s, zero2_exposed_s, discounted):
    # ZeRO-2 under accumulation reduces every micro-batch: it can move more per sample than ZeRO-3, and then the
    # rule's sentence ("communicates less") would be false; without overlap_comm it waits for all of it (Llama-2-7B,
    # 8 A100s, global batch 64: 0.446 s exposed against ZeRO-3's 0.020 s, and the rule picked it 4.9 % slower)
    strategies = [Synthetic("deepspeed_stage_2", state_gib=40, act_gib=2, per_device_samples_s=100,
                            communication_s=0.1, exposed_s=zero2_exposed_s),
                  Synthetic("deepspeed_stage_3", state_gib=40, act_gib=2, per_device_samples_s=100, sharded=True,
                            communication_s=gathering_comm_s, exposed_s=0.01)]
    p = plan(workload(3_000_000_000), H100x8, request(micro_batch_size=4, goal="pretrain"), strategies)
    zero3 = next(c for c in p.candidates if c.strategy == "deepspeed_stage_3" and c.fits)
    assert any(r.startswith("[pretrain-least-communication]") for r in zero3.reasons) is discounted


@pytest.mark.parametrize(("precision", "said"), [("bf16-mixed", True), ("32-true", False)])
def test_on_several_devices_a_sharding_pick_says_part_of_its_lead_over_ddp_is_precision(precision, said):
    # GPT-2 on 8 H100s: ZeRO-1 led DDP by 26 %, in bf16 throughout against DDP's autocast, and said nothing of it
    import dataclasses

    from autoshard.profiler.options import Precision

    strategies = [Synthetic("ddp", state_gib=2, act_gib=1, per_device_samples_s=100),
                  Synthetic("deepspeed_stage_1", state_gib=1, act_gib=1, per_device_samples_s=130)]
    w = dataclasses.replace(workload(), precision=Precision(precision))
    p = plan(w, H100x8, request(micro_batch_size=4), strategies)
    zero1 = next(c for c in p.candidates if c.strategy == "deepspeed_stage_1" and c.fits)
    sentences = [r for r in zero1.reasons if r.startswith("[sharding-precision]")]
    assert bool(sentences) is said
    if said:
        assert "run in bf16 throughout" in sentences[0] and "DDP's best (micro-batch 4" in sentences[0]
    assert not any(r.startswith("[sharding-precision]") for c in p.candidates if c.strategy == "ddp" for r in c.reasons)


def test_nothing_fits_because_of_activations_does_not_suggest_more_gpus():
    # Llama-2-7B at a sequence of 1,000,000: 414 GiB of activations per sample, which no number of GPUs divides
    with pytest.raises(NoFeasiblePlan) as info:
        plan(workload(), H100x8, request(micro_batch_size=1),
             [Synthetic("fsdp", state_gib=8, act_gib=400, per_device_samples_s=10, sharded=True)])
    hint = info.value.hint or ""
    assert "activations alone (100.0 GiB) exceed a GPU" in hint  # checkpointed: the smallest
    assert "more devices do not divide them" in hint and "--gpus" not in hint and "--batch-size" not in hint


def test_nothing_fits_on_cpu_processes_names_their_memory_not_a_gpu():
    # `autoshard recommend llama-3-8b --gpus 2` on a machine without a GPU said the activations "exceed a GPU"
    from autoshard.hardware.detect import detect_hardware

    cpu = detect_hardware(gpus=2, environ={"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(NoFeasiblePlan) as info:
        plan(workload(), cpu, request(micro_batch_size=1),
             [Synthetic("fsdp", state_gib=0.01, act_gib=400, per_device_samples_s=10, sharded=True)])
    hint = info.value.hint or ""
    assert "exceed a CPU process's share of memory" in hint and "a GPU" not in hint


def test_nothing_fits_because_of_the_micro_batch_asked_for_suggests_a_smaller_one():
    # Llama-2-7B on 8 H100s at --batch-size 64: 107.5 GiB of activations; the hint named --seq-len and larger
    # GPUs, not the flag the user had just set
    with pytest.raises(NoFeasiblePlan) as info:
        plan(workload(), H100x8, request(micro_batch_size=64),
             [Synthetic("fsdp", state_gib=8, act_gib=8, per_device_samples_s=10, sharded=True)])
    hint = info.value.hint or ""
    assert "activations alone (128.0 GiB at micro-batch 64) exceed a GPU" in hint
    assert "smaller micro-batch (--batch-size; batch_size= in fit())" in hint and "--global-batch-size" in hint


def test_pretrain_least_communication_weighs_the_whole_parameter_strategy_that_would_be_picked_instead():
    # Llama-2-7B on a DGX A100 at global batch 64: ZeRO-1 communicates less than ZeRO-3, and the discount then
    # lifted ZeRO-2, faster than ZeRO-1 but waiting on all its reductions: picked 4.9 % slower than ZeRO-3
    strategies = [Synthetic("deepspeed_stage_1", state_gib=40, act_gib=2, per_device_samples_s=80,
                            communication_s=0.05, exposed_s=0.0),
                  Synthetic("deepspeed_stage_2", state_gib=40, act_gib=2, per_device_samples_s=95,
                            communication_s=0.1, exposed_s=0.1),
                  Synthetic("deepspeed_stage_3", state_gib=40, act_gib=2, per_device_samples_s=100, sharded=True,
                            communication_s=0.15, exposed_s=0.01)]
    p = plan(workload(3_000_000_000), H100x8, request(micro_batch_size=4, goal="pretrain"), strategies)
    assert p.recommended.strategy == "deepspeed_stage_3"
    assert not any(r.startswith("[pretrain-least-communication]") for r in p.recommended.reasons)


@pytest.mark.parametrize(("asked", "said"), [({}, True), ({"micro_batch_size": 1024}, False),
                                             ({"global_batch_size": 8192}, False)])
def test_a_micro_batch_at_the_search_limit_is_said_to_be_the_limit_not_memory(asked, said):
    # ResNet-50 on 8 A100s fits 1024 images per GPU in 43 of 80 GiB: the plan took 8,192 a step, without a word
    small = [Synthetic("ddp", state_gib=0.1, act_gib=0.001, per_device_samples_s=1000)]
    p = plan(workload(), H100x8, request(**asked), small)
    assert p.recommended.candidate.micro_batch_size == 1024
    lines = [line for line in p.explanation if "search's limit" in line]
    assert bool(lines) is said
    if said:
        assert "global batch of 8,192 over 8 device(s)" in lines[0] and "--global-batch-size" in lines[0]


@pytest.mark.parametrize(("nodes", "said"), [(2, "on several nodes"), (1, "on one node")])
def test_an_offloading_plan_on_several_nodes_says_what_autoshard_does_not_plan(nodes, said):
    # Llama 3.1 405B on 16 DGX H100 nodes came out as ZeRO-3 with CPU offload at micro-batch 1, without a word that
    # runs that size add tensor and pipeline parallelism, which autoshard does not plan; on one node (a 6,573 s
    # step, an environment probe) nothing was said either, where more nodes are the first answer
    from autoshard.hardware import load_hardware

    offload = Synthetic("deepspeed_stage_3_offload", state_gib=100, act_gib=2, per_device_samples_s=5, sharded=True,
                        cpu_gib=500)
    on_gpus = Synthetic("deepspeed_stage_3", state_gib=2000, act_gib=2, per_device_samples_s=6, sharded=True)
    p = plan(workload(), load_hardware("dgx-h100", nodes=nodes), request(micro_batch_size=1), [offload, on_gpus])
    (line,) = [line for line in p.explanation if line.startswith("Scope: ")]
    assert said in line and "tensor or pipeline parallelism" in line and "does not plan" in line
    assert ("More nodes shard them further (--nodes N" in line) is (nodes == 1)


@pytest.mark.parametrize(("goal", "frozen", "said"), [("finetune", False, True), ("pretrain", False, False),
                                                       ("finetune", True, False)])
def test_a_full_fine_tune_that_only_fits_offloaded_names_parameter_efficient_fine_tuning(goal, frozen, said):
    # Llama-2-7B fine-tuned on one RTX 4090 was planned with 125 GiB of host RAM, and LoRA, what most would run on
    # that card, went unsaid (planner probe); a model with frozen parameters (LoRA already) is not told of it
    import dataclasses

    from autoshard.hardware import load_hardware

    offload = Synthetic("deepspeed_stage_3_offload", state_gib=10, act_gib=2, per_device_samples_s=5, sharded=True,
                        cpu_gib=100)
    on_gpus = Synthetic("deepspeed_stage_3", state_gib=200, act_gib=2, per_device_samples_s=6, sharded=True)
    w = workload()
    if frozen:
        w = dataclasses.replace(w, trainable_parameter_count=w.parameter_count // 100)
    p = plan(w, load_hardware("rtx-4090"), request(micro_batch_size=1, goal=goal), [offload, on_gpus])
    lines = [line for line in p.explanation if line.startswith("Scope: this fine-tunes all")]
    assert bool(lines) is said
    if said:
        assert "only offloading makes that fit" in lines[0] and "get_peft_model" in lines[0]


def test_offload_asked_for_where_the_gpus_hold_the_states_is_not_said_to_be_needed():
    # a 172K-parameter model on 2 DGX nodes with --strategies fsdp_cpu_offload (2.5 of 80 GiB) was told "this plan
    # offloads to the host, because data parallelism with sharding leaves each GPU too little room"
    from autoshard.hardware import load_hardware

    offload = Synthetic("deepspeed_stage_3_offload", state_gib=1, act_gib=1, per_device_samples_s=5, sharded=True,
                        cpu_gib=5)
    small = Synthetic("deepspeed_stage_3", state_gib=1, act_gib=1, per_device_samples_s=4, sharded=True)
    two = load_hardware("dgx-h100", nodes=2)
    for strategies in ([offload], [offload, small]):
        p = plan(workload(), two, request(micro_batch_size=1, strategies=tuple(s.name for s in strategies)),
                 strategies)
        assert p.recommended.strategy == "deepspeed_stage_3_offload" or len(strategies) == 2
        assert not [line for line in p.explanation if line.startswith("Scope: ")]


def test_deepspeed_16_mixed_on_a_cpu_without_fp16_kernels_is_refused_when_planned():
    # fit(strategy="deepspeed_stage_2", precision="16-mixed") on a CPU was planned, its workers started, and
    # deepspeed.initialize raised "Type fp16 is not supported on your device" in a 30-line traceback
    import torch

    from autoshard.hardware.detect import detect_hardware
    from autoshard.profiler.options import Precision
    from autoshard.strategies import get

    cpu = detect_hardware(gpus=1, environ={"CUDA_VISIBLE_DEVICES": ""})
    said = get("deepspeed_stage_2").unsupported_precision(Precision.FP16_MIXED, cpu)
    if torch.ops.mkldnn._is_mkldnn_fp16_supported():  # a CPU with fp16 kernels (AMX-FP16, AVX512-FP16) runs it
        assert said is None
    else:
        assert said is not None and "cannot train in 16-mixed on this CPU" in said
    assert get("deepspeed_stage_2").unsupported_precision(Precision.BF16_MIXED, cpu) is None
    assert get("deepspeed_stage_2").unsupported_precision(Precision.FP16_MIXED, H100x8) is None
    assert get("ddp").unsupported_precision(Precision.FP16_MIXED, cpu) is None  # torch's own autocast runs it


def test_nothing_fits_on_cpu_processes_does_not_offer_cpu_offload_or_a_sequence_to_a_model_without_one():
    # a model whose batch() takes no seq_len, on CPU processes: the hint offered "a shorter --seq-len" (an error for
    # it) and CPU offload, which moves nothing without a GPU (probe of tune)
    import dataclasses

    from autoshard.hardware.detect import detect_hardware

    cpu = detect_hardware(gpus=2, environ={"CUDA_VISIBLE_DEVICES": ""})
    states = [Synthetic("fsdp", state_gib=400, act_gib=0.01, per_device_samples_s=10, sharded=True)]
    for seq_len, says_seq in ((None, False), (2048, True)):
        with pytest.raises(NoFeasiblePlan) as info:
            plan(dataclasses.replace(workload(), seq_len=seq_len), cpu, request(micro_batch_size=1), states)
        hint = info.value.hint or ""
        assert ("a shorter --seq-len" in hint) is says_seq, hint
        assert "offloading strategy" not in hint and "CPU offload" not in hint, hint
        assert hint.endswith("NVMe offload (--nvme PATH), or a shorter --seq-len." if says_seq else
                             "larger GPUs (--hardware), or NVMe offload (--nvme PATH)."), hint


def test_a_peak_at_the_optimizer_step_says_what_its_activations_are():
    """Llama-2-7B under DDP on a DGX A100 peaked at the optimizer step with 25.1 GiB of "activations" (foreach
    AdamW's temporaries) beside an equal full-checkpointing row: read as something checkpointing would cut
    (planner probe)."""
    from autoshard.strategies.base import GpuMemory, MemoryEstimate

    gpu = GpuMemory(parameters=1, gradients=1, optimizer=2, activations=2**30, buffers=0, overhead=0)
    (said,) = MemoryEstimate(gpu=gpu, peak_phase="optimizer").with_peak_said().notes
    assert said.startswith("the peak is the optimizer step: its 1.00 GiB of 'activations' are the step's own")
    assert "activation checkpointing does not lower it" in said
    assert MemoryEstimate(gpu=gpu, peak_phase="backward").with_peak_said().notes == ()


@pytest.mark.parametrize("measured", [False, True])
def test_an_nvme_plan_on_disks_of_unknown_bandwidth_says_what_it_priced(measured):
    """DeepSeek-V3 on one DGX H100 was planned with NVMe offload at 10,800 s a step, all of it the 2 GB/s assumed
    of a disk the profile gives no bandwidth for, and nothing said so (architectures probe)."""
    import dataclasses

    hardware = load_hardware("dgx-h100")
    if measured:
        disks = tuple(dataclasses.replace(d, read_bytes_per_s=25e9, write_bytes_per_s=20e9)
                      for d in hardware.node.nvme)
        hardware = dataclasses.replace(hardware, node=dataclasses.replace(hardware.node, nvme=disks))
    nvme = Synthetic("deepspeed_stage_3_offload_nvme", state_gib=1, act_gib=1, per_device_samples_s=1,
                     sharded=True, cpu_gib=100)
    p = plan(workload(), hardware, request(micro_batch_size=1), [nvme])
    said = [line for line in p.explanation if "has no measured bandwidth" in line]
    assert bool(said) is not measured
    if said:
        assert said[0].startswith("Assumed: the NVMe the states swap to (of its 1 s step)")
        assert "2 GB/s read and write per node were priced" in said[0] and "--benchmark-disk" in said[0]


@pytest.mark.parametrize("nvme", [None, "tmp"])
def test_a_host_short_of_ram_is_offered_nvme_only_when_none_is_known(nvme, tmp_path):
    # 5,000 GiB of offloaded states on a host of 1 TiB: the hint offered NVMe offload (--nvme PATH) on hardware
    # that had named its NVMe already (the NVMe candidate was weighed, and is short as well)
    offload = Synthetic("deepspeed_stage_3_offload", state_gib=1, act_gib=1, per_device_samples_s=10, sharded=True,
                        cpu_gib=5000)
    hardware = load_hardware("h100-sxm-80gb", gpus=8, cpu_memory="1TiB", nvme=tmp_path if nvme else None)
    with pytest.raises(NoFeasiblePlan) as info:
        plan(workload(), hardware, request(micro_batch_size=1), [offload])
    hint = info.value.hint or ""
    assert hint.startswith("The offloaded states are divided among nodes") and "--cpu-memory" in hint
    assert ("NVMe offload (--nvme PATH)" in hint) is (nvme is None)
    assert hint.endswith(", or GPUs large enough (h100-nvl or h200-sxm-141gb or b200, with --hardware).")


@pytest.mark.parametrize(("gpu", "said"), [
    ("h100-sxm-80gb", "try a --seq-len of at most about 62,464 (activations grow at least in proportion to the "
                      "sequence, so at that length they fit by these figures; recommend at it to check) or GPUs large "
                      "enough (b200, with --hardware)."),
    # the largest shipped: "larger GPUs" sent a 128k-token user nowhere; "a shorter --seq-len" said not how short
    ("b200", "try a --seq-len of at most about 52,736 (activations grow at least in proportion to the sequence, so at "
             "that length they fit by these figures; recommend at it to check)."),
])
def test_larger_gpus_are_named_where_one_is_shipped(gpu, said):
    # one sample's activations, 150 GiB checkpointed at micro-batch 1, exceed any GPU but a B200's 180 GB
    states = [Synthetic("fsdp", state_gib=1, act_gib=600 if gpu != "b200" else 1600, per_device_samples_s=10,
                        sharded=True)]
    with pytest.raises(NoFeasiblePlan) as info:
        plan(dataclasses.replace(workload(), seq_len=131072), load_hardware(gpu, gpus=8), request(micro_batch_size=1),
             states)
    assert (info.value.hint or "").endswith(said), info.value.hint
