"""The explanation's caveat lines (autoshard/planner/caveats.py): several nodes, ZeRO-3 behind frozen weights."""

from __future__ import annotations

import dataclasses

import autoshard
from autoshard.planner.caveats import communication_bound, whole_build
from tests.planner.test_planner import H100x8, Synthetic, plan, request, workload


def test_a_step_waiting_mostly_on_the_network_across_nodes_is_said_to() -> None:
    """llama-2-70b over one 25 GbE port: 6,094 tokens/s on one DGX H100, 3,756 on two, and nothing said why
    (probe): 70 % of its step waited on communication."""
    best = plan(workload(), H100x8, request(micro_batch_size=2), [Synthetic("ddp", state_gib=10, act_gib=1,
                                                                             per_device_samples_s=100)]).recommended
    assert best.cost is not None
    two_nodes = dataclasses.replace(H100x8, nodes=2)
    bound = dataclasses.replace(best, cost=dataclasses.replace(best.cost, step_time_s=10.0,
                                                               exposed_communication_s=7.0))
    (line,) = communication_bound(bound, two_nodes)
    assert line.startswith("Communication-bound: 70 % of each step (7 of 10 s) waits on communication")
    assert communication_bound(bound, H100x8) == ()  # one node: nothing to add or take away
    hidden = dataclasses.replace(bound, cost=dataclasses.replace(bound.cost, exposed_communication_s=4.0))
    assert communication_bound(hidden, two_nodes) == ()


def test_zero3_behind_frozen_weights_says_what_it_does_not_count() -> None:
    """DeepSpeed's ZeRO-3 linear keeps every frozen linear's input for backward: LoRA-style plans ran 8-17 % over
    the prediction (a fine-tuning probe), while plans whose frozen weights all come first were exact."""
    from pathlib import Path

    frozen_llama = str(Path(__file__).parents[1] / "strategies" / "frozen_llama" / "model.py")
    zero3 = autoshard.recommend(frozen_llama, hardware="dgx-h100", strategies=["deepspeed_stage_3"])
    assert any(x.startswith("Unchecked: under ZeRO-3, DeepSpeed's own linear") for x in zero3.explanation)
    for model, strategies in ((frozen_llama, ["fsdp"]), ("tiny-llama", ["deepspeed_stage_3"])):
        plan = autoshard.recommend(model, hardware="dgx-h100", strategies=strategies)
        assert not any("DeepSpeed's own linear" in x for x in plan.explanation)


def test_building_the_model_whole_in_every_rank_beyond_the_hosts_ram_is_said() -> None:
    """A probe's Llama-2-7B on eight H100s of a 64 GiB host: ZeRO-1 and ZeRO-2 fit the GPUs, and each rank's
    fp32 build takes 25.1 GiB of host RAM, 201 GiB in all, which nothing said."""
    seven_b = workload(6_738_415_616)
    ddp = plan(seven_b, H100x8, request(micro_batch_size=1), [Synthetic("ddp", state_gib=10, act_gib=1,
                                                                        per_device_samples_s=100)]).recommended
    small_host = dataclasses.replace(H100x8, node=dataclasses.replace(
        H100x8.node, cpu=dataclasses.replace(H100x8.node.cpu, memory_available_bytes=64 * 2**30)))
    (line,) = whole_build(ddp, small_host, seven_b)
    assert line.startswith("Host RAM: building the model whole in each of a node's 8 ranks")
    assert "8 × 25.1 GiB = 200.8 GiB, above the 57.6 GiB usable of this node's 64.0 GiB" in line
    assert "straight onto its GPU" in line
    assert whole_build(ddp, H100x8, seven_b) == ()  # the DGX's 2 TiB holds eight builds
    bf16 = dataclasses.replace(seven_b, precision=autoshard.Precision.BF16_TRUE)
    assert "8 × 12.6 GiB" in whole_build(ddp, small_host, bf16)[0]  # built in bf16 under bf16-true
    cpu_processes = dataclasses.replace(small_host, node=dataclasses.replace(small_host.node, gpu=None))
    assert whole_build(ddp, cpu_processes, seven_b) == ()  # each process's memory is the host's, checked as such


def test_a_plan_whose_step_takes_hours_says_so_and_a_one_node_offload_says_how_many_nodes_hold_the_states() -> None:
    """Llama-3.1-405B on one DGX H100: ZeRO-3 with NVMe offload at 6,573 s a step, said nowhere (a probe)."""
    from autoshard.planner.caveats import offload_scope, slow_step

    big = workload(405_000_000_000)
    offload = Synthetic("deepspeed_stage_3_offload", state_gib=10, act_gib=1, per_device_samples_s=1, sharded=True,
                        cpu_gib=100)
    on_gpus = Synthetic("deepspeed_stage_3", state_gib=1000, act_gib=1, per_device_samples_s=2, sharded=True)
    p = plan(big, H100x8, request(micro_batch_size=1), [offload, on_gpus])
    best = p.recommended
    assert best.cost is not None
    (scope,) = offload_scope(best, H100x8, list(p.candidates), big, "pretrain")
    # 405e9 x 16 B = 5.9 TiB over 8 GPUs of 79.65 GiB: at least 10 nodes
    assert "model states alone (6035.0 GiB), sharded over every GPU, need at least 10 such nodes" in scope
    slow = dataclasses.replace(best, cost=dataclasses.replace(best.cost, step_time_s=6573.0))
    assert slow_step(slow) == ("Slow: 6,573 s (1.8 h) per optimizer step predicted, so 1,000 steps take 76 days: it "
                               "fits, but more or larger GPUs are what would make it trainable.",)
    assert slow_step(dataclasses.replace(best, cost=dataclasses.replace(best.cost, step_time_s=30.0))) == ()
