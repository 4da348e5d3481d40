"""``init_weights()`` of the catalog models: after ``to_empty`` on a meta build, and on a built model, it gives
exactly the weights and buffers of a seeded constructor call (the path of ``fit()`` with FSDP2)."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch import nn

from autoshard.models import ModelSource, catalog, load_source
from autoshard.profiler.blocks import find_repeated_blocks

SEED = 1234

# The tests below cost about a second per 15M parameters on CPU, and what the large entries add is size, not
# code: each family's classes also run in its tiny entry. So the entries of up to 40M parameters at 2 layers
# run in every test session, those of up to 200M under `-m slow`, and the rest (Llama, Mistral and T5-3B,
# 0.3B-3.8B parameters at 2 layers, almost all in their embeddings) not at all.
FAST_PARAMETERS = 40_000_000
SLOW_PARAMETERS = 200_000_000


def _source(name: str) -> ModelSource:
    """Entry ``name``, at 2 layers when it has a stack of repeated blocks."""
    source = load_source(name)
    return source.with_num_layers(2) if source.with_num_layers is not None else source


@functools.cache
def _parameter_count(name: str) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in _source(name).build().parameters())


def _entries() -> list[object]:
    params = []
    for name in catalog.names():
        count = _parameter_count(name)
        if count <= FAST_PARAMETERS:
            params.append(name)
        elif count <= SLOW_PARAMETERS:
            params.append(pytest.param(name, marks=pytest.mark.slow))
    return params


ENTRIES = _entries()


def _materialise(module: nn.Module) -> None:
    """``to_empty`` on the CPU, keeping tied weights tied, then every tensor poisoned (NaN, or -1 for integers)
    so that a value ``init_weights`` forgets cannot match by chance."""
    # Plain to_empty replaces each meta parameter with a new Parameter per module, which unties shared ones;
    # swapping in place keeps them shared, as FSDP2's DTensor parameters are (see the FSDP2 test below).
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        module.to_empty(device="cpu")
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            tensor.fill_(float("nan") if tensor.is_floating_point() else -1)


def _assert_same_state(module: nn.Module, reference: nn.Module) -> None:
    """Same parameter names (so the same ties) and bitwise-equal parameters and buffers."""
    assert [n for n, _ in module.named_parameters()] == [n for n, _ in reference.named_parameters()]
    expected = reference.state_dict()
    actual = module.state_dict()
    assert actual.keys() == expected.keys()
    for key, value in actual.items():
        assert torch.equal(value, expected[key]), key


@pytest.mark.parametrize("name", ENTRIES)
def test_init_weights_after_meta_build_and_to_empty_equals_a_seeded_build(name: str) -> None:
    source = _source(name)
    torch.manual_seed(SEED)
    reference = source.build()
    with torch.device("meta"):
        module = source.build()
    _materialise(module)
    torch.manual_seed(SEED)
    module.init_weights()
    _assert_same_state(module, reference)


@pytest.mark.parametrize("name", ENTRIES)
def test_init_weights_redraws_the_constructor_weights_in_place_under_the_same_seed(name: str) -> None:
    source = _source(name)
    torch.manual_seed(SEED)
    module = source.build()
    expected = {key: value.clone() for key, value in module.state_dict().items()}
    tensors = [*module.parameters(), *module.buffers()]
    addresses = [t.data_ptr() for t in tensors]
    with torch.no_grad():  # scramble every value, so that only a full re-initialisation restores them
        for tensor in tensors:
            tensor.add_(1)
    torch.manual_seed(SEED)
    module.init_weights()
    # In place: the same tensor objects in the same storage (FSDP2 shards must not be replaced).
    assert all(a is b for a, b in zip([*module.parameters(), *module.buffers()], tensors, strict=True))
    assert [t.data_ptr() for t in tensors] == addresses
    state = module.state_dict()
    assert state.keys() == expected.keys()
    for key, value in state.items():
        assert torch.equal(value, expected[key]), key


def test_construction_draws_from_the_random_stream_as_init_weights_does() -> None:
    # The constructor's layers draw their default initialisation with the random state restored afterwards,
    # so the stream moves exactly as much as init_weights() moves it: the next draw is the same.
    source = _source("tiny-gpt2")
    torch.manual_seed(SEED)
    module = source.build()
    after_build = torch.rand(4)
    torch.manual_seed(SEED)
    module.init_weights()
    assert torch.equal(torch.rand(4), after_build)


@contextlib.contextmanager
def _one_rank_gloo_group() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize("name", [n for n in catalog.names() if n.startswith("tiny-")])
def test_init_weights_initialises_fsdp2_shards_like_a_seeded_build(name: str) -> None:
    # fit()'s path: build on meta, fully_shard every repeated block and the root, to_empty, init_weights().
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    source = _source(name)
    torch.manual_seed(SEED)
    reference = source.build()
    with torch.device("meta"):
        module = source.build()
    with _one_rank_gloo_group():
        mesh = init_device_mesh("cpu", (1,))
        blocks = find_repeated_blocks(module)
        for block in blocks.names if blocks is not None else ():
            fully_shard(module.get_submodule(block), mesh=mesh)
        fully_shard(module, mesh=mesh)
        module.to_empty(device="cpu")
        torch.manual_seed(SEED)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "DTensor random operators may not have complete support on cpu")
            module.init_weights()
        assert all(isinstance(p, DTensor) for p in module.parameters())
        state = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in module.state_dict().items()}
    expected = reference.state_dict()
    assert state.keys() == expected.keys()
    for key, value in state.items():
        assert torch.equal(value, expected[key]), key
