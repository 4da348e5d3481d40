"""Typed JSON for frozen dataclasses: :func:`encode` and :func:`decode`, driven by the declared field types.

Generic over the fields, so a result class that gains a field needs nothing here. Both directions walk the
declared type, not the value, and refuse what they do not know (``Any``, ``object``, a bare ``dict``) with a
:class:`SchemaError` naming the path, so nothing is stored that could not be read back as it was.

Supported: ``int``, ``float``, ``str``, ``bool``, ``None``; :class:`~enum.Enum` members (by value); dataclasses
(their ``init`` fields; ``init=False`` fields are derived caches and are rebuilt by the constructor);
``tuple[X, ...]``, fixed ``tuple[X, Y]``, ``list[X]``, ``dict[K, V]`` (as ``[key, value]`` pairs, so keys of any
supported type keep their type and order); ``X | None`` and other unions (as ``[index, value]``, so decoding
never guesses); ``Literal[...]``; and ``torch.Tensor`` (dtype, shape and the raw little-endian bytes in
base64). torch is imported only when a tensor is met.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Point:
    ...     x: int
    ...     tags: tuple[str, ...] = ()
    >>> encode(Point(1, ("a",)), Point)
    {'x': 1, 'tags': ['a']}
    >>> decode({'x': 1, 'tags': ['a']}, Point) == Point(1, ("a",))
    True
    >>> decode({'x': "1", 'tags': []}, Point)
    Traceback (most recent call last):
    ...
    autoshard._jsonable.SchemaError: Point.x: expected int, got str
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import hashlib
import sys
import types
import typing
from typing import Any, Literal, Union

__all__ = ["SchemaError", "decode", "encode", "schema_digest"]

_TENSOR_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "bool", "float64", "float32", "float16", "bfloat16")
"""Tensor dtypes stored (by ``torch.<name>``); others are refused."""


class SchemaError(ValueError):
    """A value does not have the declared type, or the type is not one this module stores."""


def encode(value: Any, tp: Any, path: str = "") -> Any:
    """``value`` of declared type ``tp`` as JSON-ready data (dicts, lists, str, int, float, bool, None).

    Raises:
        SchemaError: ``value`` is not a ``tp``, or ``tp`` holds a type this module does not store.
    """
    return _walk(value, tp, path or _name(tp), encoding=True)


def decode(data: Any, tp: Any, path: str = "") -> Any:
    """The value of type ``tp`` that :func:`encode` turned into ``data``.

    Raises:
        SchemaError: ``data`` does not have the shape ``tp`` encodes to (a field missing or unknown, a wrong
            type, a malformed tensor).
    """
    return _walk(data, tp, path or _name(tp), encoding=False)


def schema_digest(tp: Any) -> str:
    """A short digest of the type tree under ``tp`` (every dataclass's field names and types, recursively):
    it changes when a stored class gains, loses or retypes a field.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class A:
        ...     x: int
        >>> @dataclass
        ... class B:
        ...     x: int | None
        >>> schema_digest(A) != schema_digest(B)
        True
    """
    return hashlib.sha256(_describe(tp, set()).encode()).hexdigest()[:16]


# -- the walk ------------------------------------------------------------------------------------------------


def _walk(v: Any, tp: Any, path: str, *, encoding: bool) -> Any:
    if tp is Any or tp is object:
        raise SchemaError(f"{path}: {_name(tp)} is not a type this cache stores")
    if tp is type(None) or tp is None:
        if v is not None:
            raise _mismatch(path, "None", v)
        return None
    if tp is str:  # a subclass (torch's TorchVersion) is stored as its text; an Enum member is not a str here
        if not isinstance(v, str) or isinstance(v, enum.Enum):
            raise _mismatch(path, "str", v)
        return str.__str__(v) if encoding else v
    if tp in (int, bool):
        if type(v) is not tp and not (tp is int and isinstance(v, int) and not isinstance(v, bool)):
            raise _mismatch(path, tp.__name__, v)
        return int(v) if tp is int and encoding else v
    if tp is float:  # an int is a float by the numeric tower (PEP 484); kept as it is
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _mismatch(path, "float", v)
        return v
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(v, tp, path, encoding=encoding)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(v, tp, path, encoding=encoding)
    if _is_tensor_type(tp):
        return _encode_tensor(v, path) if encoding else _decode_tensor(v, path)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return _union(v, args, path, encoding=encoding)
    if origin is Literal:
        if v not in args or type(v) not in {type(a) for a in args}:
            raise SchemaError(f"{path}: expected one of {args!r}, got {v!r}")
        return v
    if origin in (tuple, list):
        return _sequence(v, origin, args, path, encoding=encoding)
    if origin is dict:
        return _dict(v, args, path, encoding=encoding)
    raise SchemaError(f"{path}: {_name(tp)} is not a type this cache stores")


def _mismatch(path: str, expected: str, v: Any) -> SchemaError:
    return SchemaError(f"{path}: expected {expected}, got {type(v).__name__}")


def _enum(v: Any, tp: type[enum.Enum], path: str, *, encoding: bool) -> Any:
    if encoding:
        if not isinstance(v, tp):
            raise _mismatch(path, tp.__name__, v)
        return v.value
    try:
        return tp(v)
    except (ValueError, TypeError):
        raise SchemaError(f"{path}: {v!r} is not a {tp.__name__}") from None


def _dataclass(v: Any, tp: type, path: str, *, encoding: bool) -> Any:
    fields = _fields(tp)
    if encoding:
        if type(v) is not tp:
            raise _mismatch(path, tp.__name__, v)
        return {name: _walk(getattr(v, name), ftp, f"{path}.{name}", encoding=True) for name, ftp in fields}
    if not isinstance(v, dict):
        raise _mismatch(path, f"{tp.__name__} (an object)", v)
    names = [name for name, _ in fields]
    if set(v) != set(names):
        missing, unknown = sorted(set(names) - set(v)), sorted(set(v) - set(names))
        raise SchemaError(f"{path}: " + "; ".join(
            part for part in (missing and f"missing {', '.join(missing)}", unknown and f"unknown {', '.join(unknown)}")
            if part))
    kwargs = {name: _walk(v[name], ftp, f"{path}.{name}", encoding=False) for name, ftp in fields}
    try:
        return tp(**kwargs)
    except (TypeError, ValueError) as exc:  # the class's own checks (__post_init__) refused the values
        raise SchemaError(f"{path}: {exc}") from None


def _union(v: Any, args: tuple[Any, ...], path: str, *, encoding: bool) -> Any:
    others = [a for a in args if a is not type(None)]
    if v is None and len(others) < len(args):
        return None
    if len(others) == 1:  # X | None: stored as X or null
        return _walk(v, others[0], path, encoding=encoding)
    if encoding:  # the first alternative the value is: [index, value]
        for i, alt in enumerate(others):
            try:
                return [i, _walk(v, alt, path, encoding=True)]
            except SchemaError:
                continue
        raise SchemaError(f"{path}: {type(v).__name__} is none of {', '.join(_name(a) for a in others)}")
    if not (isinstance(v, list) and len(v) == 2 and type(v[0]) is int and 0 <= v[0] < len(others)):
        raise SchemaError(f"{path}: expected [alternative, value] for a union, got {v!r:.60}")
    return _walk(v[1], others[v[0]], path, encoding=False)


def _sequence(v: Any, origin: type, args: tuple[Any, ...], path: str, *, encoding: bool) -> Any:
    if not isinstance(v, (tuple, list)) or (encoding and type(v) is not origin):
        raise _mismatch(path, origin.__name__, v)
    if origin is list or (len(args) == 2 and args[1] is Ellipsis):
        items = [_walk(x, args[0], f"{path}[{i}]", encoding=encoding) for i, x in enumerate(v)]
    elif args == ((),) or (not args and not v):  # tuple[()]
        items = []
    else:
        if len(v) != len(args):
            raise SchemaError(f"{path}: expected {len(args)} items, got {len(v)}")
        items = [_walk(x, a, f"{path}[{i}]", encoding=encoding) for i, (x, a) in enumerate(zip(v, args, strict=True))]
    return items if encoding or origin is list else tuple(items)


def _dict(v: Any, args: tuple[Any, ...], path: str, *, encoding: bool) -> Any:
    if len(args) != 2:
        raise SchemaError(f"{path}: a dict needs key and value types")
    key_tp, value_tp = args
    if encoding:
        if not isinstance(v, dict):
            raise _mismatch(path, "dict", v)
        return [[_walk(k, key_tp, f"{path} key", encoding=True), _walk(x, value_tp, f"{path}[{k!r}]", encoding=True)]
                for k, x in v.items()]
    if not isinstance(v, list) or not all(isinstance(p, list) and len(p) == 2 for p in v):
        raise SchemaError(f"{path}: expected a list of [key, value] pairs")
    out = {}
    for k, x in v:
        key = _walk(k, key_tp, f"{path} key", encoding=False)
        out[key] = _walk(x, value_tp, f"{path}[{key!r}]", encoding=False)
    if len(out) != len(v):
        raise SchemaError(f"{path}: repeated keys")
    return out


# -- tensors -------------------------------------------------------------------------------------------------


def _is_tensor_type(tp: Any) -> bool:
    torch = sys.modules.get("torch")  # a class annotated with torch.Tensor has imported torch
    return torch is not None and tp is torch.Tensor


def _encode_tensor(v: Any, path: str) -> dict[str, Any]:
    import torch

    if not isinstance(v, torch.Tensor) or v.device.type != "cpu" or v.layout is not torch.strided:
        raise _mismatch(path, "a dense CPU tensor", v)
    dtype = str(v.dtype).removeprefix("torch.")
    if dtype not in _TENSOR_DTYPES:
        raise SchemaError(f"{path}: tensors of {v.dtype} are not stored")
    flat = v.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    if sys.byteorder != "little":  # pragma: no cover — every platform torch ships for is little-endian
        raise SchemaError(f"{path}: tensors are stored little-endian")
    return {"dtype": dtype, "shape": list(v.shape), "data": base64.b64encode(raw).decode("ascii")}


def _decode_tensor(v: Any, path: str) -> Any:
    import torch

    if not isinstance(v, dict) or set(v) != {"dtype", "shape", "data"} or v["dtype"] not in _TENSOR_DTYPES:
        raise SchemaError(f"{path}: expected a stored tensor")
    shape = v["shape"]
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape) or \
            not isinstance(v["data"], str):
        raise SchemaError(f"{path}: malformed tensor")
    dtype = getattr(torch, v["dtype"])
    try:
        raw = base64.b64decode(v["data"], validate=True)
    except ValueError:
        raise SchemaError(f"{path}: tensor data is not base64") from None
    numel = 1
    for n in shape:
        numel *= n
    if len(raw) != numel * torch.empty((), dtype=dtype).element_size():
        raise SchemaError(f"{path}: tensor data holds {len(raw)} bytes, not those of shape {shape}")
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)


# -- types ---------------------------------------------------------------------------------------------------


@functools.cache
def _fields(tp: type) -> tuple[tuple[str, Any], ...]:
    """The dataclass's constructor fields with their resolved types."""
    try:
        hints = typing.get_type_hints(tp)
    except (NameError, TypeError) as exc:  # an annotation names something only a type checker imports
        raise SchemaError(f"{tp.__qualname__}: cannot resolve its field types ({exc})") from None
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(tp) if f.init)


def _describe(tp: Any, seen: set[type]) -> str:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp in seen:
            return tp.__qualname__
        seen.add(tp)
        body = ",".join(f"{name}:{_describe(ftp, seen)}" for name, ftp in _fields(tp))
        return f"{tp.__module__}.{tp.__qualname__}{{{body}}}"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return f"{tp.__qualname__}<{','.join(repr(m.value) for m in tp)}>"
    args = typing.get_args(tp)
    if args:
        origin = typing.get_origin(tp)
        return f"{_name(origin)}[{','.join(_describe(a, seen) for a in args)}]"
    return _name(tp)


def _name(tp: Any) -> str:
    if tp is Ellipsis:
        return "..."
    return getattr(tp, "__qualname__", None) or getattr(tp, "_name", None) or repr(tp)
