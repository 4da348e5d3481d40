"""autoshard._jsonable: typed JSON that round-trips what it stores and refuses what it does not know."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Literal

import pytest
import torch

from autoshard._jsonable import SchemaError, decode, encode, schema_digest
from autoshard.profiler.scaling import DepthTimelines
from autoshard.profiler.timeline import Timeline


class Color(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Inner:
    n: int
    x: float = 0.0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Outer:
    name: str
    color: Color
    inner: Inner
    maybe: Inner | None
    items: tuple[int, ...]
    pair: tuple[str, bool]
    table: dict[int, Inner]
    either: str | tuple[tuple[str, int], ...]
    mode: Literal["a", "b"]
    cache: dict[str, int] = dataclasses.field(default_factory=dict, init=False, compare=False)


OUTER = Outer(name="m", color=Color.BLUE, inner=Inner(n=1, x=0.5), maybe=None, items=(1, 2, 3), pair=("p", True),
              table={2: Inner(n=2), 1: Inner(n=1, x=float("inf"))}, either=(("s", 1),), mode="b")


def _through_json(value: Any, tp: Any) -> Any:
    return decode(json.loads(json.dumps(encode(value, tp))), tp)


def test_nested_dataclasses_enums_unions_and_int_keys_round_trip_in_order():
    copy = _through_json(OUTER, Outer)
    assert copy == OUTER and list(copy.table) == [2, 1] and copy.color is Color.BLUE
    assert _through_json(dataclasses.replace(OUTER, either="plain", maybe=Inner(n=3)), Outer).either == "plain"


def test_depth_timelines_with_a_layout_and_tensors_round_trip():
    timeline = Timeline({"forward": torch.arange(14, dtype=torch.int64).reshape(2, 7)},
                        {"forward": torch.tensor([0, 1])}, ("", "layers.0"))
    depth = DepthTimelines((3, 4), (timeline, timeline), 12, (1, 1), (("layers", 0, 12),),
                           ((0, 1, 11), (0, 1, 2, 11)))
    copy = _through_json(depth, DepthTimelines)
    assert copy.stack == (("layers", 0, 12),) and copy.positions == depth.positions and copy.weights == (1, 1)
    assert torch.equal(copy.timelines[1].phases["forward"], timeline.phases["forward"])
    assert copy.timelines[0].phases["forward"].dtype == torch.int64
    assert copy.timelines[0].block_names == ("", "layers.0")


@dataclasses.dataclass
class HoldsAny:
    value: Any


@dataclasses.dataclass
class HoldsBareDict:
    value: dict  # type: ignore[type-arg]


@dataclasses.dataclass
class HoldsObject:
    value: object


@pytest.mark.parametrize("cls", [HoldsAny, HoldsBareDict, HoldsObject])
def test_fields_of_unknown_shape_are_refused_both_ways(cls):
    with pytest.raises(SchemaError, match="not a type this cache stores"):
        encode(cls(value={"a": 1}), cls)
    with pytest.raises(SchemaError, match="not a type this cache stores"):
        decode({"value": {"a": 1}}, cls)


GOOD = encode(OUTER, Outer)

BAD = [
    ({**GOOD, "name": 1}, "Outer.name: expected str, got int"),
    ({**GOOD, "items": [1, "2"]}, r"Outer.items\[1\]: expected int, got str"),
    ({**GOOD, "items": [1, True]}, r"Outer.items\[1\]: expected int, got bool"),
    ({**GOOD, "color": "green"}, "'green' is not a Color"),
    ({k: v for k, v in GOOD.items() if k != "mode"}, "missing mode"),
    ({**GOOD, "extra": 1}, "unknown extra"),
    ({**GOOD, "mode": "c"}, "expected one of"),
    ({**GOOD, "pair": ["p"]}, "expected 2 items"),
    ({**GOOD, "either": [5, "x"]}, r"expected \[alternative, value\]"),
    ({**GOOD, "table": {"1": {"n": 1}}}, r"list of \[key, value\] pairs"),
    ({**GOOD, "inner": None}, "expected Inner"),
    ([], "expected Outer"),
]


@pytest.mark.parametrize(("data", "message"), BAD, ids=[m for _, m in BAD])
def test_data_of_the_wrong_shape_is_refused_with_its_path(data, message):
    with pytest.raises(SchemaError, match=message):
        decode(data, Outer)


def test_a_value_that_is_not_its_declared_type_is_refused_on_encoding():
    with pytest.raises(SchemaError, match=r"Outer\.items"):
        encode(dataclasses.replace(OUTER, items=[1, 2]), Outer)  # a list where a tuple is declared
    with pytest.raises(SchemaError, match=r"Outer\.name: expected str, got Color"):
        encode(dataclasses.replace(OUTER, name=Color.RED), Outer)


@pytest.mark.parametrize(("stored", "message"), [
    ({"dtype": "int64", "shape": [2, 3], "data": "AAAA"}, "not those of shape"),
    ({"dtype": "complex64", "shape": [1], "data": ""}, "expected a stored tensor"),
    ({"dtype": "int64", "shape": [-1], "data": ""}, "malformed tensor"),
    ({"dtype": "int64", "shape": [1], "data": "not base64!"}, "not base64"),
])
def test_malformed_tensors_are_refused(stored, message):
    with pytest.raises(SchemaError, match=message):
        decode(stored, torch.Tensor)


def test_the_schema_digest_changes_with_a_field():
    @dataclasses.dataclass
    class Before:
        a: int

    @dataclasses.dataclass
    class After:
        a: int
        b: str = ""

    After.__qualname__ = Before.__qualname__
    assert schema_digest(Before) != schema_digest(After)
    assert schema_digest(Outer) == schema_digest(Outer)
