"""Stream groupings: which target tasks get a tuple. Pure, per (source task, target component, stream).

A grouper is built once per subscription and then called for every emitted tuple, so each keeps the
work per tuple to an index lookup. Fields grouping hashes with CRC-32 over msgpack, never Python's
``hash()`` (randomised per process): every worker must send the same key to the same task. Partial
key grouping (Storm's partialKeyGrouping) gives each key two tasks and balances between them with the
emitting task's own counts, so a hot key loads two tasks instead of one.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from squall.api.classcheck import resolve

#: A grouper: the values of an emitted tuple → the target task ids (empty for direct streams). One whose
#: answer does not depend on the values has it as its ``targets`` attribute too (see :func:`constant_targets`).
Grouper = Callable[[Sequence[Any]], Sequence[int]]


#: Keys a one-field fields grouping remembers the task of (str and int keys only), before it starts afresh.
FIELDS_CACHE_KEYS = 65_536


class GroupingError(ValueError):
    """A subscription that cannot be routed (unknown fields, a custom grouper that cannot load)."""


def make_grouper(
    grouping: Any,
    *,
    output_fields: Sequence[str],
    targets: Sequence[int],
    local: frozenset[int] = frozenset(),
    seed: int = 0,
) -> Grouper:
    """The grouper for one subscription; ``targets`` are the subscribing component's task ids.

    ``local`` are the target tasks living in this worker (for local-or-shuffle); ``seed`` (the source
    task id) varies the shuffle order between sources so they do not all start on the same target.
    """
    tasks = sorted(targets)
    if not tasks:
        raise GroupingError("a subscription needs at least one target task")
    if grouping.fields is not None:
        if not grouping.fields:
            return _constant([tasks[0]])  # Storm: an empty fields list is global grouping
        grouper = _fields(grouping.fields, output_fields, tasks)  # (checks the names)
        return _constant(tasks) if len(tasks) == 1 else grouper
    if grouping.partial_key is not None:
        return _partial_key(grouping.partial_key, output_fields, tasks)
    if grouping.all is not None:
        return _constant(tasks)
    if grouping.direct is not None:
        return _constant([])
    if grouping.local_or_shuffle is not None:
        near = [t for t in tasks if t in local]
        return _shuffle(near or tasks, seed)
    if grouping.shuffle is not None or grouping.none is not None:
        return _shuffle(tasks, seed)
    if grouping.custom_serialized is not None:
        return _custom(grouping.custom_serialized, output_fields, tasks)
    raise GroupingError("unsupported grouping (Java custom_object groupings cannot run in Squall)")


def _constant(result: list[int]) -> Grouper:
    frozen = tuple(result)
    grouper = lambda _values: frozen  # noqa: E731  (a lambda calls faster than an object's __call__)
    grouper.targets = frozen  # type: ignore[attr-defined]
    return grouper


def constant_targets(groupers: Sequence[Grouper]) -> tuple[int, ...] | None:
    """The targets of every tuple when no grouper looks at the values (global, all, one task), else None:
    emits then skip the grouper call, and a batch goes to its targets whole."""
    if not all(hasattr(g, "targets") for g in groupers):
        return None
    return tuple(t for g in groupers for t in g.targets)  # type: ignore[attr-defined]


def _shuffle(tasks: list[int], seed: int) -> Grouper:
    return _constant(tasks) if len(tasks) == 1 else _Shuffle(tasks, seed)


class _Shuffle:
    """Round robin over a shuffled order, reshuffled each pass: exactly fair, not predictable by key."""

    __slots__ = ("_choices", "_next", "_rng")

    def __init__(self, tasks: list[int], seed: int) -> None:
        self._rng = random.Random(seed)
        self._choices = [(t,) for t in tasks]
        self._rng.shuffle(self._choices)
        self._next = 0

    def __call__(self, _values: Sequence[Any]) -> tuple[int]:
        if self._next == len(self._choices):
            self._rng.shuffle(self._choices)
            self._next = 0
        self._next += 1
        return self._choices[self._next - 1]

    def split(self, rows: int) -> list[tuple[tuple[int], int]]:
        """How many of ``rows`` consecutive rows each target gets, as ``rows`` calls would deal them: whole
        passes (one each per target, which leave the order where it was), then single steps."""
        base, extra = divmod(rows, len(self._choices))
        counts = dict.fromkeys(self._choices, base) if base else {}
        for _ in range(extra):
            choice = self(())
            counts[choice] = counts.get(choice, 0) + 1
        return list(counts.items())


def _positions(kind: str, names: Sequence[str], output_fields: Sequence[str]) -> list[int]:
    """Where each of ``names`` sits in the stream's values, or a GroupingError naming the unknown ones."""
    if not names:
        raise GroupingError(f"{kind} grouping names no fields")
    try:
        return [list(output_fields).index(n) for n in names]
    except ValueError:
        raise GroupingError(f"{kind} grouping on {list(names)} but the stream declares {list(output_fields)}") from None


def _fields(names: Sequence[str], output_fields: Sequence[str], tasks: list[int]) -> Grouper:
    index = _positions("fields", names, output_fields)
    choices = [(t,) for t in tasks]
    n = len(choices)
    pack = msgpack.Packer(use_bin_type=True)

    if len(index) == 1:
        (only,) = index
        cache: dict[Any, tuple[int]] = {}

        def route(values: Sequence[Any]) -> Sequence[int]:
            key = values[only]
            if key.__class__ is str or key.__class__ is int:  # exact types: 1, 1.0 and True pack apart
                hit = cache.get(key)
                if hit is None:
                    if len(cache) >= FIELDS_CACHE_KEYS:
                        cache.clear()
                    hit = cache[key] = choices[zlib.crc32(pack.pack(key)) % n]
                return hit
            return choices[zlib.crc32(pack.pack(key)) % n]

        return route
    return lambda values: choices[zlib.crc32(pack.pack([values[i] for i in index])) % n]


def _partial_key(names: Sequence[str], output_fields: Sequence[str], tasks: list[int]) -> Grouper:
    """Two distinct candidate tasks per key: the fields grouping's (CRC-32 of the key) and a second one among
    the other tasks from a second hash (Knuth's multiplicative hash of the CRC: its high bits, independent of
    the CRC's low bits that pick the first). Each tuple goes to the candidate this emitter has sent fewer
    tuples so far (ties: the first); counts are this grouper's, so each emitting task balances its own output."""
    index = _positions("partial_key", names, output_fields)
    if len(tasks) == 1:
        return _constant(tasks)
    choices = [(t,) for t in tasks]
    n = len(choices)
    load = [0] * n
    pack = msgpack.Packer(use_bin_type=True).pack
    only = index[0] if len(index) == 1 else None

    def route(values: Sequence[Any]) -> Sequence[int]:
        h = zlib.crc32(pack(values[only] if only is not None else [values[i] for i in index]))
        first = h % n
        second = (first + 1 + ((h * 0x9E3779B1) >> 32) % (n - 1)) % n
        pick = first if load[first] <= load[second] else second
        load[pick] += 1
        return choices[pick]

    return route


def custom_grouping_spec(module: str, class_name: str, *args: Any) -> bytes:
    """What ``Grouping.custom_serialized`` holds for a Python grouper: JSON, never pickle."""
    return json.dumps({"module": module, "class": class_name, "args": list(args)}).encode()


def _custom(spec: bytes, output_fields: Sequence[str], tasks: list[int]) -> Grouper:
    """A user class with ``prepare(output_fields, target_tasks)`` and ``choose_tasks(values) -> list[int]``."""
    try:
        decoded = json.loads(spec)
        cls = resolve(decoded["module"], decoded["class"], "custom grouping", "the custom grouping")
        grouper = cls(*decoded.get("args", []))
    except Exception as exc:
        raise GroupingError(f"cannot load custom grouping from {spec[:200]!r}: {exc}") from None
    if hasattr(grouper, "prepare"):
        grouper.prepare(list(output_fields), list(tasks))
    allowed = set(tasks)

    def custom(values: Sequence[Any]) -> Sequence[int]:
        chosen = grouper.choose_tasks(values)
        if not allowed.issuperset(chosen):
            raise GroupingError(f"custom grouping chose {sorted(set(chosen) - allowed)}, not target tasks {tasks}")
        return chosen

    return custom
