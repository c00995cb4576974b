"""What a config key is: its name, kind, default, bounds and doc, and which values it accepts.

The table of every key Squall reads is :mod:`squall.core.config.keys`; this module is the vocabulary it is
written in. Durations in seconds (``*.secs``, ``*.sec``) are kind "float" so tests can run with sub-second
timers; plain ints (what storm.yaml files carry) are accepted wherever a float is expected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["Key", "TYPES"]

# --- value types -----------------------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    # bool is an int subclass in Python; a YAML `true` for a worker count is a mistake, not 1.
    return isinstance(v, int) and not isinstance(v, bool)


def _is_float(v: Any) -> bool:
    # ints are fine where floats are expected (storm.yaml writes `30`, not `30.0`); NaN/inf are not.
    if _is_int(v):
        return True
    return isinstance(v, float) and math.isfinite(v)


def _is_list_of(pred: Any) -> Any:
    # tuples are accepted too: Python callers build confs by hand; JSON turns them into lists anyway.
    return lambda v: isinstance(v, (list, tuple)) and all(pred(x) for x in v)


TYPES: Mapping[str, tuple[str, Any]] = MappingProxyType(
    {
        # kind: (human description used in messages and describe_keys, checker)
        "int": ("int", _is_int),
        "float": ("number", _is_float),
        "bool": ("bool", lambda v: isinstance(v, bool)),
        "str": ("str", lambda v: isinstance(v, str)),
        "list": ("list", _is_list_of(lambda x: True)),
        "list[str]": ("list of str", _is_list_of(lambda x: isinstance(x, str))),
        "list[int]": ("list of int", _is_list_of(_is_int)),
        "map": ("map", lambda v: isinstance(v, Mapping)),
        "map[str,int]": (
            "map of str to int",
            lambda v: isinstance(v, Mapping) and all(isinstance(k, str) and _is_int(x) for k, x in v.items()),
        ),
        # Storm writes some maps as a JSON string (topology.state.provider.config); Python callers pass the map.
        "map|json": ("map, or a JSON object as a string", lambda v: isinstance(v, (Mapping, str))),
    }
)
"""The value kinds a key can declare."""


@dataclass(frozen=True)
class Key:
    """One documented config key.

    `origin` says where the key and its default come from: "both" (Storm and JStorm agree),
    "storm" (Storm's value; the doc names JStorm's when it differs), "jstorm" (JStorm-only key),
    "squall" (our own key or our own default), "spark" (Spark's own key name)::

        KEY_BY_NAME["topology.workers"].default      # 1
    """

    name: str
    kind: str
    default: Any
    doc: str
    origin: str
    nullable: bool = False
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    secret: bool = False

    def __post_init__(self) -> None:
        if self.kind not in TYPES:
            raise ValueError(f"config key {self.name!r}: unknown kind {self.kind!r}")
        if self.origin not in ("both", "storm", "jstorm", "squall", "spark"):
            raise ValueError(f"config key {self.name!r}: unknown origin {self.origin!r}")
        # Keep the table immutable: a caller mutating a default list must not change it for everyone.
        if isinstance(self.default, list):
            object.__setattr__(self, "default", tuple(self.default))

    @property
    def type_name(self) -> str:
        """Human description of the accepted values, e.g. "int >= 1 or null"."""
        if self.choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        else:
            text = TYPES[self.kind][0]
            if self.minimum is not None:
                text += f" {'>' if self.exclusive_minimum else '>='} {_num(self.minimum)}"
            if self.maximum is not None:
                text += f" <= {_num(self.maximum)}" if self.minimum is None else f" and <= {_num(self.maximum)}"
        return text + (" or null" if self.nullable else "")

    def default_value(self) -> Any:
        """A fresh, mutable copy of the default (lists come back as lists)."""
        return _thaw(self.default)

    def accepts(self, value: Any) -> bool:
        """Whether `value` has this key's type (and lies within its choices and bounds)."""
        if value is None:
            return self.nullable
        if not TYPES[self.kind][1](value):
            return False
        if self.choices is not None and value not in self.choices:
            return False
        if not _is_float(value):
            return True
        below = self.minimum is not None and (
            value < self.minimum or (self.exclusive_minimum and value == self.minimum)
        )
        above = self.maximum is not None and value > self.maximum
        return not (below or above)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _thaw(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_thaw(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _thaw(x) for k, x in v.items()}
    return v
