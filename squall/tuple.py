"""Tuples as user code sees them: values with field names, where they came from, and their tree ids.

Field names live once per stream in :class:`Fields` (a name → index map), so a tuple is a slotted
object holding a reference to it: no per-tuple dict on the hot path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

SYSTEM_COMPONENT = "__system"
TICK_STREAM = "__tick"


class Fields:
    """The field names of one stream, with O(1) lookup by name; shared by every tuple of the stream."""

    __slots__ = ("names", "_index")

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(names)
        self._index = {name: i for i, name in enumerate(self.names)}
        if len(self._index) != len(self.names):
            raise ValueError(f"duplicate field names in {list(self.names)}")

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no field {name!r}; the stream has {list(self.names)}") from None

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fields) and other.names == self.names

    def __hash__(self) -> int:
        return hash(self.names)

    def __repr__(self) -> str:
        return f"Fields({list(self.names)})"


class Tuple:
    """One tuple: ``t[0]`` or ``t["word"]`` for values; ``component``, ``stream``, ``task`` for its origin.

    ``id`` is the edge id the acker tracks and ``anchors`` maps each root id of the trees it belongs
    to onto that edge (empty when unreliable); user code only passes tuples back to ack/fail/emit.
    """

    __slots__ = ("values", "fields", "component", "stream", "task", "id", "anchors")

    def __init__(self, values: Sequence[Any], fields: Fields, component: str, stream: str, task: int,
                 id: int = 0, anchors: tuple[int, ...] = ()) -> None:
        if len(values) != len(fields):
            raise ValueError(f"{len(values)} values for fields {list(fields.names)} of stream {stream!r} "
                             f"of {component!r}")
        self.values = tuple(values)
        self.fields = fields
        self.component = component
        self.stream = stream
        self.task = task
        self.id = id
        self.anchors = anchors  # root ids of the trees this tuple belongs to

    def __getitem__(self, key: int | str) -> Any:
        return self.values[self.fields.index(key) if isinstance(key, str) else key]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values[self.fields.index(name)] if name in self.fields else default

    def __len__(self) -> int:
        return len(self.values)

    @property
    def is_tick(self) -> bool:
        return self.component == SYSTEM_COMPONENT and self.stream == TICK_STREAM

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Tuple) and other.values == self.values and other.stream == self.stream
                and other.component == self.component and other.task == self.task and other.id == self.id)

    def __hash__(self) -> int:
        return hash((self.component, self.task, self.stream, self.id))

    def __repr__(self) -> str:
        return f"Tuple({self.component}:{self.stream}@{self.task} {dict(zip(self.fields.names, self.values))})"
