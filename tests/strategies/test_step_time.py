"""Properties of the step-time model (autoshard.strategies.step_time) and of CPU-offload pricing."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from autoshard.hardware.profiles import load_profile
from autoshard.hardware.selection import load_hardware
from autoshard.hardware.specs import CPUSpec, GPUSpec, HardwareSpec
from autoshard.profiler import flops
from autoshard.profiler.op_census import CensusCounter, MatmulClass, MemoryClass, OpCensus
from autoshard.strategies import step_time
from autoshard.strategies.costs import UNKNOWN_HOST_CORES
from autoshard.strategies.deepspeed.offload_cost import (
    CPU_ADAM_BYTES_PER_PARAMETER,
    CPU_ADAM_PARAMETERS_PER_S,
    HOST_MEMORY_EFFICIENCY,
    cpu_adam_parameters_per_s,
)


def _gpu(name: str = "h100-sxm-80gb") -> GPUSpec:
    spec = load_profile(name).spec
    assert isinstance(spec, GPUSpec)
    return spec


def _matmuls(*shapes: tuple[int, int, int]) -> OpCensus:
    """The census of bf16 matmuls of these ``(M, K, N)`` shapes, traced on fake tensors."""
    with FakeTensorMode(), flops.counter(census=True) as counter:
        for m, k, n in shapes:
            torch.empty(m, k, dtype=torch.bfloat16) @ torch.empty(k, n, dtype=torch.bfloat16)
    assert isinstance(counter, CensusCounter)
    return counter.census()


def _seconds(census: OpCensus, gpu: GPUSpec, micro_batch: int = 1) -> float:
    estimate = step_time.estimate(census, micro_batch, gpu)
    assert estimate is not None
    return estimate.seconds


def test_more_flops_take_more_time():
    gpu = _gpu()
    small, large = _matmuls((4096, 4096, 4096)), _matmuls((4096, 4096, 4096), (4096, 4096, 4096))
    assert _seconds(large, gpu) > _seconds(small, gpu)
    assert _seconds(small, gpu, micro_batch=4) > _seconds(small, gpu, micro_batch=2)


def test_a_large_gemm_runs_at_the_profiles_achievable_matmul_rate():
    gpu = _gpu()
    census = _matmuls((8192, 8192, 8192))
    assert gpu.achievable is not None and gpu.peak_tflops.bf16 is not None
    expected = 2 * 8192**3 / (gpu.peak_tflops.bf16 * 1e12 * gpu.achievable.matmul)
    assert _seconds(census, gpu) == pytest.approx(expected)



def test_a_causal_attention_kernel_is_priced_at_the_flops_it_computes():
    gpu = _gpu()
    full = MatmulClass(kind="attention", dtype="bf16", min_dim=128, flops=10**13, bytes=10**9, kernels=2)
    causal = dataclasses.replace(full, work_flops=full.flops * 33 // 64)  # 4,096 positions: 33 of 64 tiles
    at_full, at_causal = (step_time.estimate(OpCensus(matmuls=(c,)), 1, gpu) for c in (full, causal))
    assert at_full is not None and at_causal is not None and gpu.achievable is not None
    assert at_full.attention_s == pytest.approx(10**13 / (gpu.peak_tflops.bf16 * 1e12 * gpu.achievable.attention))
    assert at_causal.attention_s == pytest.approx(at_full.attention_s * 33 / 64)
    assert at_causal.flops == at_full.flops == 10**13  # the step's FLOPs (and MFU) count the full scores

@pytest.mark.parametrize(("gpu_name", "conv_rate"), [("a100-sxm-80gb", "tf32"), ("v100-sxm-32gb", "fp32")])
def test_fp32_convolutions_run_at_tf32_where_the_gpu_has_it_and_fp32_matmuls_do_not(gpu_name, conv_rate):
    """cuDNN may use TF32 for fp32 convolutions by default (torch.backends.cudnn.allow_tf32), cuBLAS not for fp32
    matmuls (torch.backends.cuda.matmul.allow_tf32 = False)."""
    fractions = {"fp32": 0.6, "tf32": 0.4}
    gpu = dataclasses.replace(_gpu(gpu_name), achievable=step_time.Achievable(
        matmul=0.5, attention=0.5, memory=1.0, matmul_fp32=fractions["fp32"], matmul_tf32=fractions["tf32"]))
    flops_ = 10**13
    conv = OpCensus(matmuls=(MatmulClass(kind="conv", dtype="fp32", min_dim=4096, flops=flops_, bytes=1, kernels=1),))
    gemm = OpCensus(matmuls=(MatmulClass(kind="gemm", dtype="fp32", min_dim=4096, flops=flops_, bytes=1, kernels=1),))
    peak = getattr(gpu.peak_tflops, conv_rate)
    assert _seconds(conv, gpu) == pytest.approx(flops_ / (peak * 1e12 * fractions[conv_rate]))
    assert _seconds(gemm, gpu) == pytest.approx(flops_ / (gpu.peak_tflops.fp32 * 1e12 * fractions["fp32"]))

def test_a_500w_profile_is_slower_than_the_700w_one():
    census = _matmuls((8192, 8192, 8192))
    assert _seconds(census, _gpu("h100-sxm-80gb-500w")) > _seconds(census, _gpu("h100-sxm-80gb"))


def test_small_matmuls_reach_fewer_flops_per_second():
    gpu = _gpu()
    # The same FLOPs: a skinny GEMM (M = 16, under the H100's ridge point) and a square one.
    skinny, square = _matmuls((16, 8192, 8192)), _matmuls((1024, 1024, 1024))
    assert skinny.matmul_flops == square.matmul_flops
    assert skinny.matmuls[0].min_dim == 16 and square.matmuls[0].min_dim == 1024
    assert _seconds(skinny, gpu) > 2 * _seconds(square, gpu)


@pytest.mark.parametrize("size_bytes", [2**26, 2**28])
def test_bandwidth_bound_ops_are_priced_by_their_bytes(size_bytes):
    gpu = _gpu()
    assert gpu.achievable is not None and gpu.memory_bandwidth_bytes_per_s is not None
    one = OpCensus(memory=(MemoryClass(size_bytes=size_bytes, bytes=size_bytes, kernels=1),))
    two = OpCensus(memory=(MemoryClass(size_bytes=size_bytes, bytes=2 * size_bytes, kernels=1),))
    hbm = gpu.memory_bandwidth_bytes_per_s * gpu.achievable.memory
    assert _seconds(one, gpu) == pytest.approx(size_bytes / hbm)
    assert _seconds(two, gpu) == pytest.approx(2 * _seconds(one, gpu))


def test_many_tiny_kernels_are_bound_by_their_launches():
    census = OpCensus(memory=(MemoryClass(size_bytes=1024, bytes=1024 * 10_000, kernels=10_000),))
    estimate = step_time.estimate(census, 1, _gpu())
    assert estimate is not None
    assert estimate.seconds == pytest.approx(10_000 * step_time.LAUNCH_S)
    assert "launch-bound" in estimate.note


def test_checkpointed_blocks_add_host_time_where_the_host_bounds_the_step():
    census = OpCensus(memory=(MemoryClass(size_bytes=1024, bytes=1024 * 10_000, kernels=10_000),))
    plain = step_time.estimate(census, 1, _gpu())
    checkpointed = step_time.estimate(census, 1, _gpu(), checkpointed_blocks=24)
    assert plain is not None and checkpointed is not None
    assert checkpointed.seconds == pytest.approx(plain.seconds + 24 * step_time.CHECKPOINT_BLOCK_S)
    assert "24 checkpointed blocks" in checkpointed.note and "host-bound" in checkpointed.note
    # A step the GPU bounds hides the host's checkpointing work.
    gemm = MatmulClass(kind="gemm", dtype="bf16", min_dim=8192, flops=10**15, bytes=10**9, kernels=1)
    big = OpCensus(matmuls=(gemm,))
    long = step_time.estimate(big, 1, _gpu(), checkpointed_blocks=24)
    assert long is not None and long.seconds == step_time.estimate(big, 1, _gpu()).seconds  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["full", "op"])
def test_a_traced_checkpointing_choice_is_priced_at_its_own_host_cost_per_block(mode):
    # tiny-llama at micro-batch 1 on an H100 is host-bound: the step is its kernels' and its blocks' host time.
    from autoshard.models import load_source
    from autoshard.profiler.checkpointing import parse_checkpointing
    from autoshard.strategies import build_workload, costs

    choice = parse_checkpointing(mode)
    workload = build_workload(load_source("tiny-llama"), precision="bf16-mixed", seq_len=64, checkpointing=(True,),
                              target="cuda", checkpoint_mode=choice, jobs=1)
    trace = workload.trace("amp", True)
    seconds, note = costs.step_compute_seconds(trace, 1, load_hardware("h100-sxm-80gb", gpus=1), "bf16")
    per_block = step_time.OP_CHECKPOINT_BLOCK_S if mode == "op" else step_time.CHECKPOINT_BLOCK_S
    blocks = trace.at_1.checkpointed_blocks
    assert blocks == len(trace.at_1.blocks) > 0
    assert seconds == pytest.approx(trace.at_1.census.kernels * step_time.LAUNCH_S + blocks * per_block)
    assert f"{blocks} checkpointed blocks at {per_block * 1e3:g} ms" in note and "host-bound" in note


def test_a_gpu_without_measurements_gets_the_generic_fractions_and_says_so():
    gpu = dataclasses.replace(_gpu(), achievable=None)
    gemm = MatmulClass(kind="gemm", dtype="bf16", min_dim=8192, flops=10**15, bytes=10**9, kernels=1)
    estimate = step_time.estimate(OpCensus(matmuls=(gemm,)), 1, gpu)
    assert estimate is not None and "generic" in estimate.note
    assert estimate.seconds == pytest.approx(10**15 / (989.5e12 * step_time.GENERIC.matmul))


def test_an_unknown_peak_for_the_steps_dtype_gives_no_estimate():
    v100 = _gpu("v100-sxm-32gb")
    gemm = MatmulClass(kind="gemm", dtype="bf16", min_dim=8192, flops=10**15, bytes=10**9, kernels=1)
    assert v100.peak_tflops.bf16 is None
    assert step_time.estimate(OpCensus(matmuls=(gemm,)), 1, v100) is None


def _with_cpu(hw: HardwareSpec, cores: int, bandwidth: float | None) -> HardwareSpec:
    cpu = CPUSpec(physical_cores=cores, memory_bandwidth_bytes_per_s=bandwidth)
    return dataclasses.replace(hw, node=dataclasses.replace(hw.node, cpu=cpu))


def test_cpu_adam_scales_with_the_hosts_cores_per_rank():
    hw = load_hardware("h100-sxm-80gb", gpus=8)
    slow, _ = cpu_adam_parameters_per_s(_with_cpu(hw, 16, 10e12))  # bandwidth to spare: the threads set the pace
    fast, note = cpu_adam_parameters_per_s(_with_cpu(hw, 64, 10e12))
    assert slow == 2 * CPU_ADAM_PARAMETERS_PER_S  # 16 cores over 8 ranks
    assert fast == 4 * slow and "8 thread(s) per rank" in note


def test_cpu_adam_is_bounded_by_host_memory_bandwidth():
    hw = load_hardware("h100-sxm-80gb", gpus=8)
    rate, note = cpu_adam_parameters_per_s(_with_cpu(hw, 224, 400e9))
    assert rate == pytest.approx(400e9 * HOST_MEMORY_EFFICIENCY / CPU_ADAM_BYTES_PER_PARAMETER / 8)
    assert "host memory" in note


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_cpu_adam_without_known_cores_shares_an_assumed_host_among_the_nodes_ranks(gpus):
    # the node's CPU Adam does not grow with its GPUs: two ranks step half the parameters each at half the rate,
    # bound by the assumed workstation's two DDR5-4800 channels (8 threads at 1e9/s would need 224 GB/s)
    hw = load_hardware("rtx-4090", gpus=gpus)
    rate, note = cpu_adam_parameters_per_s(dataclasses.replace(hw, node=dataclasses.replace(hw.node, cpu=CPUSpec())))
    assert UNKNOWN_HOST_CORES == 8
    assert rate == pytest.approx(76.8e9 * HOST_MEMORY_EFFICIENCY / CPU_ADAM_BYTES_PER_PARAMETER / gpus)
    assert "cores unknown: 8 assumed" in note and "memory bandwidth unknown: 76.8 GB/s assumed" in note


@pytest.mark.parametrize(("gpus", "cores", "bandwidth", "threads"), [
    (1, 32, None, 32), (1, None, None, 8), (2, 32, None, 16), (1, 32, 50e9, 32)])
def test_a_cpu_optimizer_step_runs_on_every_core_with_one_process_per_node(gpus, cores, bandwidth, threads):
    # FSDP2's CPU offload on one GPU was priced on one thread (torchrun's OMP_NUM_THREADS=1, which it sets only
    # with several processes per node): GPT-2 on one H100 at 31.7 samples/s, on 8 at 112 per GPU. With several,
    # autoshard's launches set OMP_NUM_THREADS to the node's cores over its ranks, and the plan prices that.
    from autoshard.strategies import costs

    hw = _with_cpu(load_hardware("h100-sxm-80gb", gpus=gpus), cores, bandwidth)
    assert costs.cpu_optimizer_threads(hw)[0] == threads
    one = costs.cpu_optimizer_seconds(10**8, 84.0)
    seconds = costs.cpu_optimizer_seconds(10**8, 84.0, threads, hw.node.cpu.memory_bandwidth_bytes_per_s)
    if bandwidth is None:
        assert seconds == pytest.approx(one / threads)
    else:  # memory-bound: at most the host's bandwidth
        assert seconds == pytest.approx(10**8 * 84.0 / (bandwidth * HOST_MEMORY_EFFICIENCY))


def test_fp16_deepspeed_on_a_gpu_without_bf16_is_priced_from_its_traced_ops(tmp_path):
    """16-mixed's half modes are traced in bf16; a V100 has only an fp16 peak, and DeepSpeed's fp16 step must
    still be priced from the census (it fell back to one MFU when the census said bf16)."""
    import transformers

    from autoshard.models import load_source
    from autoshard.strategies import build_workload, get
    from autoshard.strategies.base import Candidate

    transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=128,
                            architectures=["GPT2LMHeadModel"]).save_pretrained(tmp_path)
    workload = build_workload(load_source(str(tmp_path)), precision="16-mixed", seq_len=128, checkpointing=(False,))
    half = workload.trace("half", False)
    assert half.at_1.census is not None
    assert {m.dtype for m in half.at_1.census.matmuls} == {"fp16"}
    v100 = load_hardware("v100-sxm-32gb", gpus=2)
    assert v100.gpu is not None and v100.gpu.peak_tflops.bf16 is None
    candidate = Candidate(strategy="deepspeed_stage_1", micro_batch_size=2, activation_checkpointing=False)
    cost = get("deepspeed_stage_1").cost(workload, v100, candidate)
    assert cost.notes[0].startswith("compute from the traced ops"), cost.notes[0]
    # The census priced at micro-batch 2, with ZeRO-1's host time per parameter tensor beside the launches.
    from autoshard.strategies.deepspeed.cost import ENGINE_HOST_S

    host_extra_s = len(workload.parameter_numels) * ENGINE_HOST_S[1]
    expected = step_time.estimate(half.at_1.census, 2, v100.gpu, host_extra_s=host_extra_s)
    assert expected is not None and cost.compute_s == pytest.approx(expected.seconds)


@pytest.fixture(scope="module")
def gpt2_workload():
    from autoshard.models import load_source
    from autoshard.strategies import build_workload

    return build_workload(load_source("gpt2"), precision="bf16-mixed", seq_len=128, checkpointing=(False,))


@pytest.mark.parametrize("name", ["ddp", "fsdp", "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_3"])
def test_the_optimizer_step_is_priced_after_backward_on_the_ranks_share(gpt2_workload, name):
    """DDP steps every parameter, FSDP and ZeRO 1/N of them: the traced AdamW step (84 bytes per fp32 parameter)
    at the GPU's memory-bound rate, added to the step; FSDP's, over DTensor shards, also pays DTensor's dispatch
    per parameter tensor (the for-loop by default); ZeRO's takes at least the host time of engine.step()."""
    from autoshard.strategies import get
    from autoshard.strategies.base import Candidate
    from autoshard.strategies.deepspeed.cost import ENGINE_STEP_HOST_S, ZERO3_STEP_PERSISTENT_S
    from autoshard.strategies.deepspeed.strategy import PARAM_PERSISTENCE_THRESHOLD
    from autoshard.strategies.fsdp.cost import OPTIMIZER_TENSOR_S

    hardware = load_hardware("h100-sxm-80gb", gpus=8)
    assert hardware.gpu is not None
    cost = get(name).cost(gpt2_workload, hardware, Candidate(strategy=name, micro_batch_size=1,
                                                             activation_checkpointing=False))
    census = gpt2_workload.trace("amp", False).at_1.optimizer_census
    assert census is not None
    shard = 1 if name == "ddp" else 8
    expected = step_time.optimizer_seconds(census, hardware.gpu, shard=1 / shard)
    tensors = len(gpt2_workload.parameter_numels)
    if name == "fsdp":
        expected += tensors * OPTIMIZER_TENSOR_S[False]
    if name.startswith("deepspeed"):
        intercept, per_tensor = ENGINE_STEP_HOST_S[int(name[-1])]
        host_s = intercept + tensors * per_tensor
        if name == "deepspeed_stage_3":  # the tensors it partitions, and those it keeps whole (all-gathered after)
            whole = sum(1 for n in gpt2_workload.parameter_numels if n <= PARAM_PERSISTENCE_THRESHOLD)
            host_s += whole * (ZERO3_STEP_PERSISTENT_S - per_tensor)
        assert host_s > expected  # GPT-2's 1/8 partition: the host's loops set it
        expected = host_s
        assert any(n.startswith(f"ZeRO-{name[-1]} engine.step() on the host") for n in cost.notes)
    assert cost.optimizer_s == pytest.approx(expected) and cost.optimizer_s > 0
    assert census.memory_bytes == pytest.approx(84 * gpt2_workload.trainable_parameter_count, rel=1e-3)
    assert cost.step_time_s == pytest.approx(cost.compute_s + cost.exposed_communication_s + cost.offload_s
                                             + cost.optimizer_s)
    assert any(n.startswith("optimizer step on the GPU") for n in cost.notes)


@pytest.mark.parametrize("name", ["deepspeed_stage_2_offload", "deepspeed_stage_3_offload", "fsdp_cpu_offload"])
def test_an_offloaded_optimizer_takes_no_gpu_time(gpt2_workload, name):
    from autoshard.strategies import get
    from autoshard.strategies.base import Candidate

    cost = get(name).cost(gpt2_workload, load_hardware("h100-sxm-80gb", gpus=8),
                          Candidate(strategy=name, micro_batch_size=1, activation_checkpointing=False))
    assert cost.optimizer_s == 0.0 and cost.offload_s > 0


@pytest.mark.parametrize("name", ["deepspeed_stage_2_offload", "deepspeed_stage_3_offload"])
def test_the_offloaded_engine_step_adds_its_measured_host_time_to_the_cpu_adam(gpt2_workload, name, monkeypatch):
    # Offload was priced by its CPU Adam and transfers alone ("not measured: the offloaded step's Python"), so
    # GPT-2's ZeRO-3 offload came out faster than ZeRO-3 on eight H100s
    from autoshard.strategies import get
    from autoshard.strategies.base import Candidate
    from autoshard.strategies.deepspeed import cost as ds_cost

    hardware = load_hardware("h100-sxm-80gb", gpus=8)
    candidate = Candidate(strategy=name, micro_batch_size=1, activation_checkpointing=False)
    monkeypatch.setitem(ds_cost.ENGINE_STEP_HOST_S, 3, (0.0, 0.0))  # no floor from the resident step (below)
    monkeypatch.setattr(ds_cost, "ZERO3_STEP_PERSISTENT_S", 0.0)
    priced = get(name).cost(gpt2_workload, hardware, candidate)
    intercept, per = ds_cost.ENGINE_OFFLOAD_STEP_HOST_S[int(name[len("deepspeed_stage_")])]
    host_s = intercept + len(gpt2_workload.parameter_numels) * per
    assert host_s > 0 and any("offloaded engine.step() on the host" in n for n in priced.notes)
    monkeypatch.setitem(ds_cost.ENGINE_OFFLOAD_STEP_HOST_S, 2, (0.0, 0.0))
    monkeypatch.setitem(ds_cost.ENGINE_OFFLOAD_STEP_HOST_S, 3, (0.0, 0.0))
    unpriced = get(name).cost(gpt2_workload, hardware, candidate)
    assert priced.offload_s - unpriced.offload_s == pytest.approx(host_s)
    assert priced.step_time_s - unpriced.step_time_s == pytest.approx(host_s)


def test_zero3_offload_is_never_priced_faster_than_zero3_for_the_same_candidate(gpt2_workload):
    """The offloaded ZeRO-3 step runs the resident step's loops and its all-gather of the persistent parameters
    too (stage3.py::step, _post_step), beside the CPU Adam: priced from a line measured in another run (0.035 ms
    per tensor against 0.10 for a persistent one), GPT-2's offload came out 1 % faster than ZeRO-3 on a DGX H100."""
    from autoshard.strategies import get
    from autoshard.strategies.base import Candidate

    hardware = load_hardware("dgx-h100")
    costs = {name: get(name).cost(gpt2_workload, hardware, Candidate(strategy=name, micro_batch_size=16,
                                                                     activation_checkpointing=False))
             for name in ("deepspeed_stage_3", "deepspeed_stage_3_offload")}
    assert costs["deepspeed_stage_3_offload"].step_time_s > costs["deepspeed_stage_3"].step_time_s
    assert any("at least the" in n and "step without offload" in n for n in costs["deepspeed_stage_3_offload"].notes)


def test_host_time_beside_the_launches_makes_a_short_step_host_bound():
    # A strategy's own Python on the launching thread (host_extra_s) joins the kernel launches: the step takes
    # the longer of the GPU's work and the host's, and the note says which side set it.
    gpu = _gpu()
    census = _matmuls((4096, 4096, 4096))
    plain = step_time.estimate(census, 1, gpu)
    assert plain is not None
    hooked = step_time.estimate(census, 1, gpu, host_extra_s=10 * plain.gpu_s)
    assert hooked is not None
    assert hooked.seconds == pytest.approx(plain.launch_s + 10 * plain.gpu_s)
    assert "host-bound" in hooked.note and "host-bound" not in plain.note
    hidden = step_time.estimate(census, 1, gpu, host_extra_s=plain.gpu_s / 10)
    assert hidden is not None and hidden.seconds == pytest.approx(max(plain.gpu_s, plain.launch_s + plain.gpu_s / 10))


def test_the_census_files_gemms_by_the_alignment_of_their_leading_dimensions():
    # GPT-2's LM head (vocabulary 50,257): forward, input gradient and weight gradient (mm(grad.t(), x)) all
    # have a 50,257-wide leading dimension; padded to 50,304 none has.
    def lm_head(vocab: int) -> OpCensus:
        with FakeTensorMode(), flops.counter(census=True) as counter:
            x = torch.empty(1024, 768, dtype=torch.bfloat16, requires_grad=True)
            w = torch.empty(vocab, 768, dtype=torch.bfloat16, requires_grad=True)
            (x @ w.t()).square().sum().backward()  # a contiguous gradient, as a loss's
        assert isinstance(counter, CensusCounter)
        return counter.census()

    odd, padded = lm_head(50257), lm_head(50304)
    assert sorted((m.alignment, m.kernels) for m in odd.matmuls) == [(1, 3)]
    assert sorted((m.alignment, m.kernels) for m in padded.matmuls) == [(16, 3)]
    assert odd.matmul_flops == pytest.approx(padded.matmul_flops, rel=1e-3)
    assert _matmuls((1024, 768, 50258)).matmuls[0].alignment == 2
    with FakeTensorMode(), flops.counter(census=True) as counter:  # an expanded operand: cuBLAS gets a copy
        torch.empty(1, dtype=torch.bfloat16).expand(1024, 50257) @ torch.empty(50257, 1024, dtype=torch.bfloat16)
    assert isinstance(counter, CensusCounter) and counter.census().matmuls[0].alignment == 1


def test_unaligned_16_bit_gemms_run_at_the_profiles_measured_fraction():
    gpu = _gpu("h200-sxm-141gb")
    assert gpu.achievable is not None
    f = gpu.achievable
    assert f.unaligned_matmul_2b is not None and f.unaligned_matmul is not None
    aligned, odd, even = (_matmuls((8192, 768, n)) for n in (50304, 50257, 50260))
    # Compute-bound GEMMs of (nearly) the same FLOPs: the time ratio is the profile's.
    assert _seconds(odd, gpu) / _seconds(aligned, gpu) == pytest.approx(1 / f.unaligned_matmul_2b, rel=0.01)
    assert _seconds(even, gpu) / _seconds(aligned, gpu) == pytest.approx(1 / f.unaligned_matmul, rel=0.01)
    # fp32 GEMMs (not measured) and GPUs whose profile does not know are not priced.
    fp32 = dataclasses.replace(odd.matmuls[0], dtype="fp32")
    assert step_time.alignment_factor(fp32, f) == 1.0
    a100 = _gpu("a100-sxm-80gb")
    assert a100.achievable is None or a100.achievable.unaligned_matmul_2b is None
    assert _seconds(odd, a100) == pytest.approx(_seconds(aligned, a100), rel=0.01)


@pytest.mark.parametrize("mode", ["amp", "half"])
def test_memory_bound_traffic_is_a_fixed_part_per_micro_batch_plus_a_part_per_sample(gpt2_workload, mode):
    """The census at micro-batches 1 and 2 splits the memory-bound traffic: autocast casts every weight in forward
    and its gradient back in backward once per micro-batch, whatever its size. Priced as micro-batch 1's times
    ``b``, GPT-2's DDP step at micro-batch 8 counted those casts 8 times; the split gives the traffic of the
    census counted at micro-batch 5 itself (a profile of its own), to within 1 %."""
    from autoshard import profile
    from autoshard.models import load_source

    trace = gpt2_workload.trace(mode, False)
    one, two = trace.at_1.census, trace.at_2.census
    assert one is not None and two is not None
    fixed = 2 * one.memory_bytes - two.memory_bytes
    if mode == "amp":  # at least the casts of the matmul weights (about 85 M parameters), 6 bytes each way
        assert fixed > 2 * 6 * 85e6
    else:  # parameters in bf16: no casts; left is mostly the tied embedding's gradient (50257 x 768, zeroed,
        # scattered into, and its two uses summed)
        assert 0 < fixed < 0.5 * (2 * 6 * 85e6)
    scale, note = step_time._memory_scale(one, two, 5)
    direct = profile(load_source("gpt2"), batch_size=5, seq_len=128, precision=trace.precision).census
    assert direct is not None
    assert one.memory_bytes * scale == pytest.approx(direct.memory_bytes, rel=0.01)
    assert (one.memory_bytes * 5 - direct.memory_bytes) / direct.memory_bytes > (0.3 if mode == "amp" else 0.0)
    assert "per micro-batch" in note


def test_gemm_bytes_are_the_weights_once_per_kernel_plus_the_activations_per_sample(gpt2_workload):
    """A GEMM reads its weight (and backward writes the weight's gradient) once, whatever the micro-batch; only its
    activations grow with it. From the census at micro-batches 1 and 2, GPT-2's GEMM bytes at micro-batch 5 are
    those of the census counted at micro-batch 5 itself (a profile of its own), to within 1 %; priced as
    micro-batch 1's times 5 they were a third more."""
    from autoshard import profile
    from autoshard.models import load_source

    trace = gpt2_workload.trace("amp", False)
    one, two = trace.at_1.census, trace.at_2.census
    assert one is not None and two is not None
    direct = profile(load_source("gpt2"), batch_size=5, seq_len=128, precision=trace.precision).census
    assert direct is not None

    def gemm_bytes(census):
        return sum(m.bytes for m in census.matmuls if m.kind != "attention")

    split = gemm_bytes(one) * step_time._gemm_bytes_scale(one, two, 5)
    assert split == pytest.approx(gemm_bytes(direct), rel=0.01)
    assert gemm_bytes(one) * 5 > 1.3 * gemm_bytes(direct)


def test_short_sequences_at_a_large_micro_batch_are_not_priced_by_their_weight_reads(tmp_path):
    """The same 4,096 tokens a step as 8-token sequences at micro-batch 512 or 1,024-token ones at micro-batch 4:
    the GEMMs are the same [4096 x 2048] x [2048 x N] (attention only cheaper), so the GPU's time is the same.
    Priced with micro-batch 1's bytes times the micro-batch, every weight was read 512 times (a Llama-2-7B step
    of 8-token sequences came out 15 x slower: a new user's report, 2026-11-30)."""
    from autoshard.hardware import load_hardware
    from autoshard.models import load_source
    from autoshard.strategies import build_workload

    model = tmp_path / "llama_2b_wide.py"
    model.write_text(
        "from autoshard.models.catalog._common import token_batch, token_loss\n"
        "from autoshard.models.catalog.llama import LlamaConfig, LlamaForCausalLM\n"
        "CONFIG = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_layers=2,\n"
        "                     num_heads=16, num_kv_heads=16)\n"
        "def model():\n    return LlamaForCausalLM(CONFIG)\n"
        "def batch(batch_size, seq_len=1024):\n"
        "    return token_batch(batch_size, seq_len, vocab_size=CONFIG.vocab_size)\n"
        "def loss(output, batch):\n    return token_loss(output, batch)\n", encoding="utf-8")
    gpu = load_hardware("h100-sxm-80gb", gpus=1).gpu
    gpu_s = {}
    for seq, micro in ((1024, 4), (8, 512)):
        trace = build_workload(load_source(str(model)), precision="bf16-mixed", seq_len=seq, checkpointing=(False,),
                               target="cuda").trace("amp", False)
        estimate = step_time.estimate(trace.at_1.census, micro, gpu, census_2=trace.at_2.census)
        assert estimate is not None
        gpu_s[seq] = estimate.gpu_s
    assert gpu_s[8] <= 1.05 * gpu_s[1024], gpu_s  # the same within 5 % (per-sequence elementwise work aside)


def test_a_gpu_without_measurements_gets_kernel_rates_times_the_median_fitted_whole_step_factor():
    """The fitted profiles are their kernels' rates (MAMF, as each profile's note cites it) times a factor fitted
    on published whole steps; a GPU without measurements takes the kernel rates times the median of those
    factors, not the kernel rates alone (which put an RTX 4090 at a higher fraction of its peak than any GPU
    with measurements)."""
    kernel_rates = {"h100-sxm-80gb": 0.803, "a100-sxm-80gb": 0.869, "v100-sxm-32gb": step_time.KERNEL_RATES.matmul}
    factors = []
    for name, rate in kernel_rates.items():
        achievable = _gpu(name).achievable
        assert achievable is not None
        factors.append(achievable.matmul / rate)
    assert pytest.approx(statistics.median(factors), rel=0.005) == step_time.WHOLE_STEP_FACTOR
    generic = step_time.GENERIC
    assert generic.matmul == pytest.approx(step_time.KERNEL_RATES.matmul * step_time.WHOLE_STEP_FACTOR, abs=1e-3)
    assert generic.attention == pytest.approx(step_time.KERNEL_RATES.attention * step_time.WHOLE_STEP_FACTOR,
                                              abs=1e-3)
    rtx = _gpu("rtx-4090")
    assert rtx.achievable is None
    assert generic.matmul <= statistics.median(_gpu(n).achievable.matmul for n in kernel_rates)
