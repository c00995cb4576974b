"""Where a task's emits go: its declared output streams (:class:`StreamOut`: fields, groupers, counters), built
from the layout for one task (:func:`build_outputs`), and the random edge ids every tracked copy gets.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Any

from squall.api.tuple import Fields
from worker.grouping import constant_targets, make_grouper
from worker.layout import Placement, TopologyLayout

#: Forms of an outgoing batch (see :class:`~squall.api.tuple.TupleBatch`): rows only, one root per row, root maps.
PLAIN, ROOTS, ANCHORS = 0, 1, 2

_rand = random.Random()
#: ``random_bits(64) or 1`` is a fresh edge id (0 would vanish in the XOR); a module global for the hot loops.
random_bits = _rand.getrandbits


def new_edges(n: int) -> list[int]:
    """``n`` random non-zero 64-bit edge ids, made in C (one big random int cut in words)."""
    edges = list(struct.unpack(f"<{n}Q", random_bits(64 * n).to_bytes(8 * n, "little"))) if n else []
    while 0 in edges:  # one in 2**64 per edge
        edges[edges.index(0)] = random_bits(64) or 1
    return edges


class StreamOut:
    """One declared output stream of a task: its fields, how to pick target tasks, and its counters.

    ``constant`` holds the targets when they do not depend on the values (then no grouper is called);
    ``keys`` tell this stream's outgoing batches apart per form (:data:`PLAIN`, :data:`ROOTS`,
    :data:`ANCHORS`). Emits are counted; copies sent (Storm's "transferred") are derived from the fixed
    number of targets per emit (``fanout``) without touching the hot path, except behind a custom
    grouping, whose route counts them as it goes.
    """

    __slots__ = (
        "fields",
        "width",
        "direct",
        "route",
        "constant",
        "split",
        "direct_targets",
        "fanout",
        "keys",
        "emitted",
        "_base_emitted",
        "_base_transferred",
    )

    def __init__(
        self,
        fields: Fields,
        direct: bool,
        route: Callable[[Sequence[Any]], Sequence[int]],
        direct_targets: frozenset[int],
        fanout: int | None,
        constant: tuple[int, ...] | None = None,
        split: Callable[[int], list[tuple[tuple[int], int]]] | None = None,
    ) -> None:
        self.fields = fields
        self.width = len(fields)
        self.direct = direct
        self.direct_targets = direct_targets
        self.fanout = 1 if direct else fanout
        self.constant = None if direct else constant
        #: A shuffle's bulk form: how many of n consecutive rows go to each target (see ``_Shuffle.split``).
        self.split = None if direct else split
        self.keys = (object(), object(), object())
        self.emitted = 0
        self._base_emitted = self._base_transferred = 0
        self.route = route if self.fanout is not None else self._counting(route)

    def _counting(self, route: Callable[[Sequence[Any]], Sequence[int]]) -> Callable[[Sequence[Any]], Sequence[int]]:
        def counted(values: Sequence[Any]) -> Sequence[int]:
            targets = route(values)
            self._base_transferred += len(targets)
            return targets

        return counted

    @property
    def transferred(self) -> int:
        if self.fanout is None:
            return self._base_transferred
        return self._base_transferred + (self.emitted - self._base_emitted) * self.fanout

    def carry_counts(self, old: StreamOut) -> None:
        """Keep the counts of the stream this one replaces (a refresh may change the fanout)."""
        self.emitted = self._base_emitted = old.emitted
        self._base_transferred = old.transferred


def _no_targets(_values: Sequence[Any]) -> Sequence[int]:
    return ()


def build_outputs(layout: TopologyLayout, placement: Placement, component: str, task: int) -> dict[str, StreamOut]:
    """Every stream ``component`` declares, with groupers for its subscribers as seen from ``task``."""
    outs = {}
    for stream, spec in layout.components[component].streams.items():
        subs = layout.subscribers.get((component, stream), ())
        groupers = [
            make_grouper(s.grouping, output_fields=spec.fields, targets=s.tasks, local=placement.local, seed=task)
            for s in subs
            if s.tasks and s.grouping.direct is None
        ]
        direct = frozenset(t for s in subs if s.grouping.direct is not None for t in s.tasks)
        routed = [s for s in subs if s.tasks and s.grouping.direct is None]
        fanout = (
            None
            if any(s.grouping.custom_serialized is not None for s in routed)
            else sum(len(s.tasks) if s.grouping.all is not None else 1 for s in routed)
        )
        route: Callable[[Sequence[Any]], Sequence[int]]
        if not groupers:
            route = _no_targets
        elif len(groupers) == 1:
            route = groupers[0]
        else:
            route = _fan_out(groupers)
        split = getattr(groupers[0], "split", None) if len(groupers) == 1 else None
        outs[stream] = StreamOut(spec.fields, spec.direct, route, direct, fanout, constant_targets(groupers), split)
    return outs


def _fan_out(groupers: list[Callable[[Sequence[Any]], Sequence[int]]]) -> Callable[[Sequence[Any]], Sequence[int]]:
    return lambda values: [t for grouper in groupers for t in grouper(values)]
