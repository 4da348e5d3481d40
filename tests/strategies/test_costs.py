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
    for scope in ("world", "inter"):
        link = costs.link(hw, scope)
        assert link.bandwidth_bytes_per_s == pytest.approx(costs.UNKNOWN_LINK_BYTES_PER_S * costs.LINK_EFFICIENCY)
        assert not link.known
    intra = costs.link(hw, "intra")
    assert intra.known and intra.bandwidth_bytes_per_s > 10 * costs.UNKNOWN_LINK_BYTES_PER_S
    assert any("10 GB/s per node" in note for note in hw.notes)
