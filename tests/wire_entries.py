"""Tuples one at a time on the worker wire, for tests: :class:`Entry` is the per-tuple view of the batches a
worker sends and receives (a target task, a source task, a stream, values, an edge id and ``[root, edge]``
anchors), built into those batches and read back out of them. Workers themselves only move batches."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any, NamedTuple

from squall.api.tuple import ColumnBatch, Fields, Tuple, TupleBatch, split_edge
from worker.transport import Sender
from worker.wire import Decoder, WireError, encode


class Entry(NamedTuple):
    """One tuple on its way to another worker."""

    target_task: int
    source_task: int
    stream: str
    values: Sequence[Any]
    tuple_id: int
    anchors: Sequence[tuple[int, int]]


def batch(source: int, stream: str, rows: list[Any], ids: list[int] | None = None, roots: list[int] | None = None,
          anchors: list[dict[int, int]] | None = None) -> TupleBatch:
    """A batch of ``rows`` from task ``source`` (its component and fields play no part on the wire)."""
    width = len(rows[0]) if rows else 0
    return TupleBatch(rows, Fields([f"f{i}" for i in range(width)]), "source", stream, source, ids, roots, anchors)


def batches_of(entries: Iterable[Entry]) -> list[tuple[int, TupleBatch]]:
    """Entries → (target, batch) for each run of consecutive entries with equal (target, source, stream), in
    order; a run's rows must have one width (:class:`WireError` if not: no executor checked these)."""
    batches = []
    for (target, source, stream), run in groupby(entries, itemgetter(0, 1, 2)):
        run = list(run)
        rows = [e.values for e in run]
        if len(widths := set(map(len, rows))) > 1:
            raise WireError(f"rows of one stream must have one width, got widths {sorted(widths)}")
        if any(e.tuple_id or e.anchors for e in run):
            batches.append((target, batch(source, stream, rows, [e.tuple_id for e in run],
                                          anchors=[dict(e.anchors) for e in run])))
        else:
            batches.append((target, batch(source, stream, rows)))
    return batches


def batches_of_tuples(tuples: Sequence[Tuple]) -> list[TupleBatch]:
    """Tuples → one batch per run of consecutive tuples of one (task, stream), each row its tuple."""
    return [TupleBatch.of(list(run)) for _, run in groupby(tuples, lambda t: (t.task, t.stream))]


def send(sender: Sender, entries: Iterable[Entry]) -> None:
    for target, tuples in batches_of(entries):
        sender.queue.put(target, [tuples])


def encode_entries(entries: Iterable[Entry]) -> bytes:
    """Entries → bytes: one message per run of equal (target, source, stream)."""
    return b"".join(encode(target, tuples) for target, tuples in batches_of(entries))


def entries_of(target: int, tuples: TupleBatch) -> list[Entry]:
    """A batch for ``target`` → its entries (values and anchors as the lists msgpack decodes); a piece's rows
    each get a share of its edge."""
    head, n = (target, tuples.task, tuples.stream), len(tuples)
    if tuples.piece is not None:
        edges = split_edge(tuples.piece.edge, n)
        return [Entry(*head, list(values), edge, [[tuples.piece.root, edge]])
                for values, edge in zip(tuples.rows, edges)]
    if tuples.ids is None:
        return [Entry(*head, list(values), 0, []) for values in tuples.rows]
    if tuples.roots is not None:
        return [Entry(*head, list(values), i, [[r, i]] if r else [])
                for values, i, r in zip(tuples.rows, tuples.ids, tuples.roots)]
    return [Entry(*head, list(values), i, [list(p) for p in a.items()])
            for values, i, a in zip(tuples.rows, tuples.ids, tuples.anchors)]  # type: ignore[arg-type]


def decode(data: bytes, component: str = "source", fields: Fields | None = None) -> ColumnBatch:
    """One message → its batch, from ``component`` with ``fields`` (as a worker sets them once it checked them)."""
    ((_, got),) = Decoder().feed(data)
    got.component = component
    got.fields = fields if fields is not None else Fields([f"f{i}" for i in range(got.width or 0)])
    return got
