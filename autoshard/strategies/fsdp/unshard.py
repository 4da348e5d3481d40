"""Giving back a module ``fully_shard`` sharded in place: plain parameters, its own classes, no FSDP hooks.

A one-process ``fit()`` trains the user's own module, and ``fully_shard`` changes it in place (torch 2.13,
``torch/distributed/fsdp/_fully_shard``): each unit's class becomes a subclass ``FSDP<Class>`` of ``FSDPModule``
(``_fsdp_init.py``), its forward gets a pre- and a post-hook (``FSDPState.init``, ``_fsdp_state.py``), the
composable API records its state (``torch/distributed/_composable_state.py`` and the ``contract`` keys in the
module's ``__dict__``), and its parameters become ``DTensor`` shards. With the process group gone, the module
could run no forward, and ``save_pretrained`` failed inside safetensors ("Attempted to access the data pointer on
an invalid python storage"). :func:`unshard_in_place` undoes each of these from the consolidated state dict.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor


def unshard_in_place(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Make ``module`` (sharded by ``fully_shard``, its training done) a plain module holding ``state``.

    Parameters shared by several modules (tied embeddings) stay shared; each parameter keeps its
    ``requires_grad`` and goes back to the device its shard was on, in the dtype ``state`` holds.
    """
    from torch.distributed import _composable_state
    # the module: torch.distributed._composable's attribute `contract` is the function of that name
    contract = importlib.import_module("torch.distributed._composable.contract")

    for sub in module.modules():
        if not isinstance(sub, FSDPModule):
            continue
        fsdp_state = sub._get_fsdp_state()
        for handle in (fsdp_state._pre_forward_hook_handle, fsdp_state._post_forward_hook_handle):
            if handle is not None:
                handle.remove()
        own: type = next(c for c in type(sub).__mro__ if not issubclass(c, FSDPModule))  # FSDP<Class>'s Class
        sub.__class__ = own
        for key in (contract.STATE_KEY, contract.REGISTRY_KEY):
            sub.__dict__.pop(key, None)
        _composable_state._module_state_mapping.pop(sub, None)
    plain: dict[int, nn.Parameter] = {}
    for prefix, sub in module.named_modules(remove_duplicate=False):
        for name, param in list(sub._parameters.items()):
            if param is None or not isinstance(param, DTensor):
                continue
            if id(param) not in plain:
                key = f"{prefix}.{name}" if prefix else name
                plain[id(param)] = nn.Parameter(state[_state_key(key, state)].to(device=param.device),
                                                requires_grad=param.requires_grad)
            sub._parameters[name] = plain[id(param)]


_WRAPPERS = frozenset({"_orig_mod", "_checkpoint_wrapped_module", "_fsdp_wrapped_module"})
"""Module names a wrapper adds to a parameter's path and ``get_model_state_dict`` leaves out of its keys
(``_get_fqns``, torch/distributed/checkpoint/state_dict.py, torch 2.13): ``torch.compile``'s ``OptimizedModule``
holds the module it compiled as ``_orig_mod``."""


def _state_key(path: str, state: dict[str, torch.Tensor]) -> str:
    """The key of the parameter at ``path`` in a full state dict: ``path`` less the wrappers' names.

    Example:
        >>> _state_key("blocks.0._orig_mod.norm.weight", {"blocks.0.norm.weight": torch.zeros(1)})
        'blocks.0.norm.weight'
    """
    if path in state:
        return path
    return ".".join(part for part in path.split(".") if part not in _WRAPPERS)
