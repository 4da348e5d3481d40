"""The collective cost model's links, held against NCCL's measured bus bandwidths."""

from __future__ import annotations

import pytest

from autoshard.hardware import load_hardware
from autoshard.strategies import costs
from autoshard.strategies.base import Collective

GB = 1e9


def test_a_ring_over_several_dgx_a100_nodes_runs_near_the_measured_bus_bandwidth() -> None:
    """NCCL's maintainers measure 192 GB/s all-reduce bus bandwidth across DGX A100 nodes (8 × 200 Gb/s HDR;
    NVIDIA/nccl#812, quoted in NVIDIA/nccl#1576). The ring crosses each node boundary once per channel and the
    channels spread over the 8 NICs: the node's whole network bandwidth, not one GPU's share of it (25 GB/s)."""
    hw = load_hardware("dgx-a100", nodes=2)
    payload = 8 * GB
    seconds = costs.collective_seconds(Collective(kind="all_reduce", bytes=int(payload), calls=1,
                                                  group_size=hw.world_size, scope="world", overlappable=False), hw)
    bus_bandwidth = payload * 2 * (hw.world_size - 1) / hw.world_size / seconds
    assert bus_bandwidth == pytest.approx(192 * GB, rel=0.2)


def test_side_by_side_groups_of_one_rank_per_node_share_the_nodes_network() -> None:
    hw = load_hardware("dgx-h100", nodes=4)
    node_network = hw.inter_node_bandwidth_bytes_per_s
    intra = hw.node.intra_node_bandwidth_bytes_per_s
    assert node_network is not None and intra is not None
    world, inter = costs.link(hw, "world"), costs.link(hw, "inter")
    assert world.bandwidth_bytes_per_s == pytest.approx(min(node_network, intra) * costs.LINK_EFFICIENCY)
    assert inter.bandwidth_bytes_per_s == pytest.approx(node_network / hw.processes_per_node * costs.LINK_EFFICIENCY)
    assert world.known and inter.known


def test_one_node_uses_the_intra_node_link_whatever_the_scope() -> None:
    hw = load_hardware("dgx-h100")
    assert costs.link(hw, "world") == costs.link(hw, "intra") == costs.link(hw, "inter")


def test_nodes_joined_by_an_unknown_network_are_priced_at_the_assumed_link_not_the_nodes_own() -> None:
    """Three nodes of a GPU profile (no network entry): the note said 10 GB/s assumed while the collectives were
    priced at NVLink's 450 GB/s, so a 3-node plan was as fast as one node's. Within a node NVLink stays known."""
    hw = load_hardware("h100-sxm-80gb", gpus=8, nodes=3)
    assert hw.inter_node_bandwidth_bytes_per_s is None
    # The assumed 10 GB/s is the node's, as the note says: hybrid sharding's 8 replica groups (one per local rank)
    # share it, as they share a known network; each got all of it, 8x (a multi-node probe: h100-sxm-80gb:8x4
    # priced fsdp_hybrid at 116 samples/s, the same cluster with a 10 GB/s network entry at 43).
    for scope, share in (("world", 1), ("inter", 8)):
        link = costs.link(hw, scope)
        assert link.bandwidth_bytes_per_s == pytest.approx(
            costs.UNKNOWN_LINK_BYTES_PER_S / share * costs.LINK_EFFICIENCY)
        assert not link.known
    intra = costs.link(hw, "intra")
    assert intra.known and intra.bandwidth_bytes_per_s > 10 * costs.UNKNOWN_LINK_BYTES_PER_S
    assert any("10 GB/s per node" in note for note in hw.notes)


# -- the host optimizer step under offload ----------------------------------------------------------------------


def _with_host(gpus: int, cores: int | None, bandwidth: float | None = None):  # type: ignore[no-untyped-def]
    import dataclasses

    from autoshard.hardware.specs import CPUSpec

    hw = load_hardware("h100-sxm-80gb", gpus=gpus)
    cpu = CPUSpec(physical_cores=cores, memory_bandwidth_bytes_per_s=bandwidth)
    return dataclasses.replace(hw, node=dataclasses.replace(hw.node, cpu=cpu))


@pytest.mark.parametrize(("gpus", "cores", "threads"), [
    (1, 64, 64), (2, 64, 32), (8, 64, 8), (8, 4, 1),  # the node's cores shared by its ranks, at least one each
    (1, None, 8), (2, None, 4), (8, None, 1)])  # unknown host: UNKNOWN_HOST_CORES shared the same way
def test_a_ranks_host_optimizer_threads_are_the_nodes_cores_shared_by_its_ranks(gpus: int, cores: int | None,
                                                                                threads: int) -> None:
    """One rank per GPU: each gets ``cores // ranks`` threads, what the exported launch and fit() set as
    OMP_NUM_THREADS (until 2026-11-30 one thread with several ranks per node: torchrun's default, which nothing
    autoshard wrote overrode)."""
    got, note = costs.cpu_optimizer_threads(_with_host(gpus, cores))
    assert got == threads == costs.host_threads_per_rank(cores or costs.UNKNOWN_HOST_CORES, gpus)
    assert f"OMP_NUM_THREADS={threads}" in note
    assert ("8 assumed" in note) is (cores is None)


def test_the_nodes_ranks_share_its_dram_bandwidth_in_the_host_step() -> None:
    """Bound by the host's memory, two ranks stepping at once take twice as long each as one alone (as DeepSpeed's
    CPU Adam is priced); below the bound, the threads set the pace."""
    one = costs.cpu_optimizer_seconds(10**9, 84.0, 64, 100 * GB, ranks=1)
    assert costs.cpu_optimizer_seconds(10**9, 84.0, 32, 100 * GB, ranks=2) == pytest.approx(2 * one)
    assert one == pytest.approx(10**9 * 84.0 / (100 * GB * costs.HOST_MEMORY_EFFICIENCY))
    assert costs.cpu_optimizer_seconds(10**9, 84.0, 4, 1000 * GB, ranks=2) == pytest.approx(
        costs.cpu_optimizer_seconds(10**9, 84.0, 4))


@pytest.mark.parametrize(("cores", "bandwidth", "rate"), [
    (None, None, 76.8 * GB * 0.8 / 28),  # a GPU profile alone: a workstation's 8 cores and two DDR5-4800 channels
    (4, None, 76.8 * GB * 0.8 / 28),  # a small desktop still has two channels
    (16, None, 16 * 9.6 * GB * 0.8 / 28),  # its cores given, its bandwidth not: 9.6 GB/s each assumed
    (16, 614.4 * GB, 16e9),  # the host's own bandwidth: the threads set the pace
])
def test_deepspeed_cpu_adam_is_bound_by_the_hosts_memory_known_or_assumed(
        cores: int | None, bandwidth: float | None, rate: float) -> None:
    """The planner probe: one RTX 4090 fine-tuning a 7B model priced CPU Adam at 8e9 parameters/s (8 assumed
    threads at 1e9), 224 GB/s of DRAM traffic at 28 bytes a parameter, which a workstation's two channels cannot
    move; with no bandwidth known nothing bounded it."""
    from autoshard.strategies.deepspeed.offload_cost import cpu_adam_parameters_per_s

    got, note = cpu_adam_parameters_per_s(_with_host(1, cores, bandwidth))
    assert got == pytest.approx(rate)
    assert ("memory bandwidth unknown" in note) is (bandwidth is None and got < (cores or 8) * 1e9)


@pytest.mark.parametrize(("cores", "bandwidth"), [
    (64, None),  # half the parameters per rank on half the cores each: the node's cores do the same work
    (None, None),  # unknown host: UNKNOWN_HOST_CORES, shared the same way
    (64, 50 * GB),  # bound by DRAM: the two ranks share it
])
def test_fsdp_cpu_offload_on_two_gpus_loses_no_per_gpu_throughput_beyond_its_communication(
        cores: int | None, bandwidth: float | None) -> None:
    """The probe: Llama-3-8B with CPU offload on a host of unknown cores, 4.66 s a step on one H100, 14.72 s on two
    (the host step 3.35 s -> 13.4 s: one thread per rank). Two GPUs run the same micro-batch each: the step may grow
    by its exposed communication, not by a host step that slows as GPUs are added."""
    from autoshard.models import load_source
    from autoshard.strategies import build_workload, get
    from autoshard.strategies.base import Candidate

    workload = build_workload(load_source("tiny-llama"), seq_len=64)
    cand = Candidate(strategy="fsdp_cpu_offload", micro_batch_size=1, activation_checkpointing=False)
    one, two = (get("fsdp_cpu_offload").cost(workload, _with_host(g, cores, bandwidth), cand) for g in (1, 2))
    assert two.step_time_s <= one.step_time_s + (two.exposed_communication_s - one.exposed_communication_s) + 1e-9

    def host_step(cost) -> float:  # type: ignore[no-untyped-def]
        (note,) = [n for n in cost.notes if n.startswith("CPU optimizer step")]
        return float(note.split(": ")[1].split(" s ")[0])

    assert host_step(two) == pytest.approx(host_step(one), rel=0.01)  # the node's host steps its parameters alike
