"""Reading hardware YAML with messages that name the file, the key, what was expected and what was found.

Every number in a profile may be written bare (``memory: 80 GiB``) or with its provenance::

    memory: {value: 80 GiB, source: datasheet, note: "why this number"}

where ``source`` names an entry of the file's top-level ``sources:`` mapping. Shipped profiles are read in
*strict* mode, which requires the second form for every number, so no figure ships without a citation.
Only ``yaml.safe_load`` is used: a profile can never run code.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from autoshard.errors import HardwareError

T = TypeVar("T")

_MISSING = object()


def read_yaml(path: Path) -> dict[str, Any]:
    """Read one YAML file whose top level is a mapping.

    Raises:
        HardwareError: the file cannot be read, is not valid YAML, or is not a mapping.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HardwareError(f"{path}: no such hardware file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HardwareError(f"{path}: cannot read the hardware file: {exc}.") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise HardwareError(
            f"{where}: malformed YAML: {problem}.",
            hint="Check the indentation and quoting around that line (docs/hardware.md shows the format).",
        ) from None
    if not isinstance(data, dict):
        raise HardwareError(
            f"{path}: expected a mapping of keys (kind:, name:, ...) at the top level, found {_describe(data)}."
        )
    duplicate = _duplicate_key(yaml.compose(text, Loader=yaml.SafeLoader))
    if duplicate is not None:  # safe_load keeps the last silently: `gpus_per_node: 8` then `4` planned 4 GPUs
        key, line, first = duplicate
        raise HardwareError(f"{path}:{line}: {key!r} is given twice (first on line {first}).",
                            hint="Keep one of the two.")
    return data


def _duplicate_key(node: yaml.Node | None) -> tuple[str, int, int] | None:
    """The first key a YAML mapping repeats (anywhere in the document), its line and the line of the first one."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                line = key.start_mark.line + 1
                if key.value in seen:
                    return key.value, line, seen[key.value]
                seen[key.value] = line
            found = _duplicate_key(value)
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found = _duplicate_key(item)
            if found is not None:
                return found
    return None


def _describe(value: Any) -> str:
    if value is _MISSING:
        return "nothing (the key is missing)"
    if value is None:
        return "an empty value"
    if isinstance(value, dict):
        return f"a mapping with keys {sorted(map(str, value))}"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    return f"{value!r} ({type(value).__name__})"


class Doc:
    """A mapping inside a hardware file, with its key path, for reading values with precise errors.

    Args:
        data: the mapping.
        file: the file it came from (named in every message).
        path: the key path of ``data`` inside the file (``""`` at the top level).
        sources: the file's ``sources:`` mapping (citation id → citation).
        strict: require ``{value:, source:}`` for every number (shipped profiles).
    """

    def __init__(
        self, data: Mapping[str, Any], *, file: str, path: str = "", sources: Mapping[str, str], strict: bool
    ) -> None:
        self.data = data
        self.file = file
        self.path = path
        self.sources = sources
        self.strict = strict

    @classmethod
    def top(cls, data: Mapping[str, Any], *, file: str, strict: bool) -> Doc:
        """The top-level document of a file, with its ``sources:`` checked."""
        raw = data.get("sources", {})
        probe = cls(data, file=file, sources={}, strict=strict)
        if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
            raise probe.error("sources", "a mapping of citation ids to citations (strings)", raw)
        return cls(data, file=file, sources=raw, strict=strict)

    def key(self, key: str) -> str:
        """The dotted path of ``key`` inside the file."""
        return f"{self.path}.{key}" if self.path else key

    def error(
        self, key: str, expected: str, found: Any = _MISSING, *, found_text: str | None = None,
        hint: str | None = None,
    ) -> HardwareError:
        """A :class:`HardwareError` naming the file, the key path, what was expected and what was found.

        Args:
            key: the key, relative to this mapping.
            expected: what a valid value is (``"a positive size ..."``).
            found: the value found (described with its type), or nothing when the key is missing.
            found_text: a description of what was found, used instead of ``found``.
            hint: an optional second line telling the user how to fix it.
        """
        what = found_text if found_text is not None else _describe(found)
        return HardwareError(f"{self.file}: {self.key(key)}: expected {expected}, found {what}.", hint=hint)

    def check_keys(self, required: Iterable[str], optional: Iterable[str] = ()) -> None:
        """Reject unknown keys (suggesting the closest allowed one) and missing required ones.

        Required keys read through :meth:`string`, :meth:`quantity`, ... report their own absence with what
        they expect; list them here too so that an unknown key is reported first (it is often a typo of one).
        """
        allowed = tuple(dict.fromkeys((*required, *optional)))
        for key in self.data:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"Did you mean {close[0]!r}?" if close else None
                where = f"{self.file}: {self.key(str(key))}"
                raise HardwareError(f"{where}: unknown key; expected one of {', '.join(allowed)}.", hint=hint)

    def present(self, key: str) -> bool:
        """Whether ``key`` is present at all (even if null)."""
        return key in self.data

    def has(self, key: str) -> bool:
        """Whether ``key`` is present (and not null)."""
        return self.data.get(key) is not None

    def raw(self, key: str) -> Any:
        """The value of ``key`` as YAML read it (``None`` when absent)."""
        return self.data.get(key)

    def string(self, key: str) -> str:
        """A required non-empty string."""
        value = self.data.get(key, _MISSING)
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, "a non-empty string", value)
        return value.strip()

    def optional_string(self, key: str) -> str | None:
        """A non-empty string, or ``None`` when the key is absent."""
        return None if key not in self.data else self.string(key)

    def choice(self, key: str, choices: Iterable[str]) -> str:
        """One of ``choices`` (required)."""
        choices = tuple(choices)
        value = self.data.get(key, _MISSING)
        if not isinstance(value, str) or value not in choices:
            raise self.error(key, f"one of {', '.join(map(repr, choices))}", value)
        return value

    def optional_choice(self, key: str, choices: Iterable[str]) -> str | None:
        """One of ``choices``, or ``None`` when the key is absent."""
        return None if key not in self.data else self.choice(key, choices)

    def string_list(self, key: str) -> tuple[str, ...]:
        """A list of non-empty strings (empty when absent)."""
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise self.error(key, "a list of strings", value)
        return tuple(v.strip() for v in value)

    def mapping(self, key: str) -> Doc:
        """The mapping under ``key`` as a :class:`Doc`."""
        value = self.data.get(key, _MISSING)
        if not isinstance(value, dict):
            raise self.error(key, "a mapping", value)
        return Doc(value, file=self.file, path=self.key(key), sources=self.sources, strict=self.strict)

    def items(self, key: str) -> list[Doc]:
        """A list of mappings (empty when absent)."""
        value = self.data.get(key, [])
        if not isinstance(value, list):
            raise self.error(key, "a list of mappings", value)
        docs = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.error(f"{key}[{i}]", "a mapping", item)
            docs.append(Doc(item, file=self.file, path=self.key(f"{key}[{i}]"), sources=self.sources,
                            strict=self.strict))
        return docs

    def quantity(self, key: str, parse: Callable[[Any], T], expected: str) -> T:
        """A required number, bare or as ``{value:, source:, note:}``, parsed by ``parse``.

        Args:
            key: the key.
            parse: turns the YAML value into the number; raises ``ValueError``/``TypeError`` when it cannot.
            expected: what a valid value looks like, for the message (``"a size like '80 GiB'"``).

        Raises:
            HardwareError: missing, unparsable, or (strict mode) without a known ``source``.
        """
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            raise self.error(key, expected, value)
        where = key
        if isinstance(value, dict):
            sub = Doc(value, file=self.file, path=self.key(key), sources=self.sources, strict=self.strict)
            sub.check_keys(["value"], ["source", "note"])
            if self.strict or "source" in value:
                self._check_source(sub)
            value, where = value["value"], f"{key}.value"
        elif self.strict:
            raise self.error(
                key,
                "{value: ..., source: ...} (every number in a shipped profile cites its source)",
                value,
            )
        try:
            return parse(value)
        except (ValueError, TypeError) as e:
            bare = isinstance(value, (int, float)) and not isinstance(value, bool) and "has no unit" in str(e)
            raise self.error(where, expected, value,
                             hint="A bare number has no unit: add one, as in '80 GiB'." if bare else None) from None

    def optional_quantity(self, key: str, parse: Callable[[Any], T], expected: str) -> T | None:
        """Like :meth:`quantity`, but ``None`` when the key is absent or null."""
        return None if self.data.get(key) is None else self.quantity(key, parse, expected)

    def _check_source(self, sub: Doc) -> None:
        source = sub.data.get("source", _MISSING)
        if self.strict and (not isinstance(source, str) or source not in self.sources):
            known = ", ".join(map(repr, self.sources)) or "none: add a 'sources:' mapping at the top"
            raise sub.error("source", f"one of the citation ids under 'sources:' ({known})", source)
        if not isinstance(source, str) or not source.strip():
            raise sub.error("source", "a citation id from 'sources:' or a citation string", source)


def positive_int(value: Any) -> int:
    """A positive ``int`` (``bool`` is not a number here).

    Raises:
        ValueError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(value)
    return value


def positive_float(value: Any) -> float:
    """A positive finite ``int`` or ``float``.

    Raises:
        ValueError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise ValueError(value)
    return float(value)


def compute_capability(value: Any) -> tuple[int, int]:
    """``"8.0"`` (or ``8.0``, or ``[8, 0]``) as ``(8, 0)``.

    Raises:
        ValueError: anything else.
    """
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v >= 0 for v in value):
        return (value[0], value[1])
    if isinstance(value, (str, float)) and not isinstance(value, bool):
        major, dot, minor = str(value).strip().partition(".")
        if dot and major.isdigit() and minor.isdigit():
            return (int(major), int(minor))
    raise ValueError(value)
