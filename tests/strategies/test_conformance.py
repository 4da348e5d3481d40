"""Every registered strategy passes the conformance suite (``tests/strategies/conformance.py``), and the registry
holds exactly the strategies and families users are told about — no skip: a registry that fails to load fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autoshard import strategies
from autoshard.strategies import Traits
from tests.strategies import conformance

EXPECTED = {
    # name: (family, ZeRO stage, offload target, parameters offloaded, hybrid)
    "ddp": ("ddp", 0, "none", False, False),
    "fsdp": ("fsdp", 3, "none", False, False),
    "fsdp_shard_grad_op": ("fsdp", 2, "none", False, False),
    "fsdp_hybrid": ("fsdp", 3, "none", False, True),
    "fsdp_cpu_offload": ("fsdp", 3, "cpu", True, False),
    "deepspeed_stage_1": ("deepspeed", 1, "none", False, False),
    "deepspeed_stage_2": ("deepspeed", 2, "none", False, False),
    "deepspeed_stage_2_offload": ("deepspeed", 2, "cpu", False, False),
    "deepspeed_stage_3": ("deepspeed", 3, "none", False, False),
    "deepspeed_stage_3_offload": ("deepspeed", 3, "cpu", True, False),
    "deepspeed_stage_3_offload_nvme": ("deepspeed", 3, "nvme", True, False),
}


def test_the_registry_holds_exactly_the_known_strategies_in_order() -> None:
    assert strategies.names() == list(EXPECTED)
    assert strategies.family_names() == ["ddp", "fsdp", "deepspeed"]


def test_the_typed_strategy_names_are_the_registrys() -> None:
    from typing import get_args

    from autoshard.strategies.base import FamilyName, StrategyName

    assert list(get_args(StrategyName)) == strategies.names()
    assert list(get_args(FamilyName)) == strategies.family_names()


def test_a_string_where_a_list_of_strategies_belongs_is_refused_before_tracing(tmp_path: Path) -> None:
    import autoshard
    from autoshard.errors import UsageError

    with pytest.raises(UsageError, match=r"a list of strategy names, e.g. \['fsdp'\]"):
        autoshard.recommend("tiny-gpt2", hardware="dgx-h100", strategies="fsdp")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"a list of strategy names, e.g. \['ddp'\]"):
        autoshard.tune("tiny-gpt2", strategies="ddp", trials=1, output_dir=tmp_path)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_preset_has_its_traits(name: str) -> None:
    family, stage, offload, offload_parameters, hybrid = EXPECTED[name]
    t = strategies.traits(name)
    assert (t.family, t.zero_stage, t.offload, t.offload_parameters, t.hybrid) == (
        family, stage, offload, offload_parameters, hybrid)
    assert t.sharded_at_rest == (family == "fsdp" or stage == 3)
    assert strategies.get(name).family == family
    assert Traits.from_dict(t.to_dict()) == t


@pytest.mark.parametrize("family", ["ddp", "fsdp", "deepspeed"])
def test_each_family_names_a_backend_and_an_exporter_that_load(family: str) -> None:
    from autoshard.export.family import FamilyExporter
    from autoshard.runtime.backends.base import Backend

    backend = strategies.backend_class(family)
    assert issubclass(backend, Backend) and backend.family == family
    exporter = strategies.exporter(family)
    for method in (m for m in dir(FamilyExporter) if not m.startswith("_")):
        assert callable(getattr(exporter, method)), f"{family}'s exporter lacks {method}"


def test_registering_a_name_twice_or_before_its_family_is_refused() -> None:
    from autoshard.strategies.ddp import DDPStrategy

    with pytest.raises(ValueError, match="registered twice"):
        strategies.register("ddp", description="again")(DDPStrategy)

    class Orphan(DDPStrategy):
        family = "nobody"  # type: ignore[assignment]

    with pytest.raises(ValueError, match="register family"):
        strategies.register("orphan", description="no family")(Orphan)
    assert "orphan" not in strategies.names()


def test_traits_refuse_what_no_strategy_can_be() -> None:
    with pytest.raises(ValueError, match="zero_stage"):
        Traits(family="ddp", zero_stage=4)
    with pytest.raises(ValueError, match="offload target"):
        Traits(family="fsdp", zero_stage=3, offload_parameters=True)
    with pytest.raises(ValueError, match="family"):
        Traits(family="megatron", zero_stage=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("check", conformance.parametrized())
@pytest.mark.parametrize("name", list(EXPECTED))
def test_strategy_conforms(name: str, check) -> None:  # type: ignore[no-untyped-def]
    check(strategies.get(name))
