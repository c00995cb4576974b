"""Tuples: the values a bolt receives, where they came from, and what the acker needs to track them.

Inside a worker tuples travel as a :class:`TupleBatch`: the rows of one stream from one task, column
by column (values, and edge ids and roots only when some row is tracked), so emitting, routing and
handing over cost per batch, not per tuple. A :class:`Tuple` is a view of one row, made when user
code asks for it (``execute``, ``batch[i]``): a plain slots object with read-only properties (a frozen
dataclass's ``__init__`` costs about five times more). Field names and their positions live in a
per-stream :class:`Fields`, built once and shared by every tuple of the stream.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from squall.core.system_ids import SYSTEM_COMPONENT, SYSTEM_TASK, TICK_STREAM

NO_ANCHORS: Mapping[int, int] = MappingProxyType({})


class Fields(tuple[str, ...]):
    """A stream's field names, with ``positions`` (name → index) for access by name (Storm's Fields).

    Built once per stream and shared by all of its tuples. Compares equal to the plain tuple of names::

        fields = Fields(["word", "count"])
        fields.positions["count"]        # 1
        fields == ("word", "count")      # True
    """

    positions: Mapping[str, int]

    def __new__(cls, names: Iterable[str] = ()) -> Fields:
        self = super().__new__(cls, names)
        for name in self:
            if not isinstance(name, str):
                raise TypeError(f"field names must be strings, got {name!r} in {list(self)}")
        if len(set(self)) != len(self):
            dups = sorted({name for name in self if self.count(name) > 1})
            raise ValueError(f"duplicate field names {dups} in {list(self)}")
        self.positions = {name: i for i, name in enumerate(self)}
        return self


TICK_FIELDS = Fields(["rate_secs"])
NO_FIELDS = Fields()


class Piece(dict):
    """The rows of a batch tree (``emit_many(rows, msg_id=...)``) that travel in one message to one task:
    they share ONE random edge id in the tree of ``root``, instead of one per row, so the spout's init, the
    wire and a bolt that settles them all cost O(1) per message, not per row.

    The acker still sees Storm's XOR tree: the piece's ``edge`` is XORed into the root's init once, and
    back out once, by the ack of its last row (:meth:`settle` counts rows down in ``left`` and keeps what
    was anchored to them in ``fold``). A piece split in two (a wire message bound) becomes two pieces whose
    edges XOR to the old one (:func:`split_edge`). An unacked piece is just garbage: its tree times out at
    the acker, as in Storm::

        piece = Piece(root, edge, rows=3)
        piece.settle(0)            # None: 2 rows left
        piece.settle(child_edge)   # None: 1 left; what was anchored to that row is kept in the fold
        piece.settle(0)            # edge ^ child_edge: the value to ack for the root

    It is also its rows' ``anchors`` (the dict ``{root: 0}``: a row has no edge of its own), so a row's
    :class:`Tuple` needs no field to find its piece; once the row is acked or failed its anchors become
    :attr:`settled`, which tells a second ack apart.
    """

    __slots__ = ("root", "edge", "left", "fold", "settled")

    def __init__(self, root: int, edge: int, rows: int) -> None:
        self[root] = 0
        self.root = root
        self.edge = edge
        #: Rows not yet acked or failed; -1 once the piece failed (then nothing more is acked).
        self.left = rows
        #: XOR of the edges emitted anchored to its rows (their ``ackVal``), acked with the last row.
        self.fold = 0
        #: The anchors of its rows once settled (made when a first row is settled on its own).
        self.settled: Piece | None = None

    def settle(self, ack_val: int, rows: int = 1) -> int | None:
        """``rows`` rows acked, with ``ack_val`` the XOR of what was emitted anchored to them; the value to ack
        for the root once that was the last row (None before, and after a fail)."""
        self.fold ^= ack_val
        if self.left <= 0:
            return None
        self.left -= rows
        return None if self.left else self.edge ^ self.fold

    def fail(self) -> bool:
        """A row failed: True the first time (fail the root), False after (the root failed already)."""
        if self.left < 0:
            return False
        self.left = -1
        return True

    def ack_row(self, row: Tuple) -> int | None:
        """:meth:`settle` of one row, whose anchors become :attr:`settled` (a second ack is told apart)."""
        row._anchors = self.settled or self._settled()
        return self.settle(row._ack_val)

    def fail_row(self, row: Tuple) -> bool:
        """:meth:`fail` of one row, whose anchors become :attr:`settled`."""
        row._anchors = self.settled or self._settled()
        return self.fail()

    def _settled(self) -> Piece:
        settled = self.settled = _Settled(self.root)
        return settled

    def __repr__(self) -> str:
        return f"{type(self).__name__}(root={self.root}, left={self.left})"


class _Settled(Piece):
    """The anchors of a piece's row once it was acked or failed: acking it again XORs a fresh random value into
    its tree, so the tree times out as a double ack makes it in Storm, and never completes early; failing it
    fails the tree, as in Storm."""

    __slots__ = ()

    def __init__(self, root: int) -> None:
        super().__init__(root, 0, 0)
        self.settled = self

    def settle(self, ack_val: int, rows: int = 1) -> int | None:
        return random.getrandbits(64) | 1

    def fail(self) -> bool:
        return True


def split_edge(edge: int, parts: int) -> list[int]:
    """``parts`` random non-zero edges that XOR to ``edge``: a piece cut in ``parts`` messages, in O(parts)."""
    edges = [random.getrandbits(64) or 1 for _ in range(parts - 1)]
    last = edge
    for part in edges:
        last ^= part
    if not last:  # one in 2**64: draw again
        return split_edge(edge, parts)
    edges.append(last)
    return edges


class Tuple:
    """One tuple as a bolt sees it: its values, by index or field name, and where it came from.

        def execute(self, tup):
            if tup.is_tick:                          # from __system on __tick, every tick period
                return self.flush()
            word, count = tup["word"], tup[1]        # by name or by position
            if tup.stream == "corrections":          # which stream (and tup.component: which component)
                ...

    ``id`` and ``anchors`` are the acker's: ``anchors`` maps each root id (a spout tuple this one
    descends from) to this tuple's edge id in that tree (Storm's MessageId), and ``id`` is the edge id
    it was emitted under (its first anchor's); both are empty (0, {}) for untracked tuples. A row of a
    spout batch's :class:`Piece` has the piece as ``anchors`` (``{root: 0}``): its edge is the piece's.
    """

    __slots__ = ("_values", "_fields", "_component", "_stream", "_task", "_id", "_anchors", "_ack_val")

    def __init__(
        self,
        values: tuple[Any, ...],
        fields: Fields,
        component: str,
        stream: str,
        task: int,
        id: int = 0,
        anchors: Mapping[int, int] = NO_ANCHORS,
    ) -> None:
        self._values = values
        self._fields = fields
        self._component = component
        self._stream = stream
        self._task = task
        self._id = id
        self._anchors = anchors
        self._ack_val = 0  # XOR of the edge ids of tuples emitted anchored to this one (Storm's ackVal)

    @property
    def values(self) -> tuple[Any, ...]:
        """All values, in the order of the stream's fields."""
        return self._values

    @property
    def fields(self) -> Fields:
        """The field names of the stream the tuple came on."""
        return self._fields

    @property
    def component(self) -> str:
        """Id of the component that emitted it (``__system`` for ticks)."""
        return self._component

    @property
    def stream(self) -> str:
        """Id of the stream it came on (``default`` unless the emitter named one; ``__tick`` for ticks)."""
        return self._stream

    @property
    def task(self) -> int:
        """Task id that emitted it (-1 for ticks)."""
        return self._task

    @property
    def id(self) -> int:
        """The edge id the acker knows this tuple by; 0 when it is not tracked."""
        return self._id

    @property
    def anchors(self) -> Mapping[int, int]:
        """Root id (one per spout tuple it descends from) → its edge id in that tree; empty when untracked."""
        return self._anchors

    @property
    def is_tick(self) -> bool:
        """A tick tuple (``topology.tick.tuple.freq.secs`` in the component's conf): time to flush or report."""
        return self._stream == TICK_STREAM and self._component == SYSTEM_COMPONENT

    def __getitem__(self, key: int | str) -> Any:
        """``tup[0]`` or ``tup["word"]``; an unknown name raises KeyError listing the stream's fields."""
        if key.__class__ is str:
            try:
                return self._values[self._fields.positions[key]]
            except KeyError:
                raise KeyError(
                    f"no field {key!r} in stream {self._stream!r} of {self._component!r} (fields: {list(self._fields)})"
                ) from None
        return self._values[key]  # type: ignore[index]  # an int: the class check above is the hot path's narrowing

    def get(self, name: str, default: Any = None) -> Any:
        """The value of field ``name``, or ``default`` when the stream has no such field."""
        position = self._fields.positions.get(name)
        return default if position is None else self._values[position]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __repr__(self) -> str:
        return (
            f"Tuple({self._values!r}, component={self._component!r}, stream={self._stream!r}, "
            f"task={self._task}, id={self._id})"
        )


class TupleBatch:
    """Rows of one stream from one task, as a bolt's ``execute_batch`` receives them, column by column.

        def execute_batch(self, batch):
            words = [(w,) for (line,) in batch.values for w in line.split()]    # rows: value tuples
            self.emit_batch(words, anchors=batch)     # or emit_each(rows, inputs=batch, index=...)
            batch[0]["line"], len(batch), batch.column("line")                # views and columns

    ``batch[i]`` (and iteration) gives the row as a :class:`Tuple`, the same object each time, so it can be
    acked, failed or anchored to like any input. Tracking is kept per row only when some row is tracked:
    ``ids`` (each row's edge id, 0 for an untracked row) with either ``roots`` (each row's one root, whose
    edge is its id) or ``anchors`` (each row's root → edge map, when some row has several roots). A batch
    whose rows are one :class:`Piece` of a spout batch's tree has ``piece`` instead (and ``ids`` None).
    """

    __slots__ = (
        "rows",
        "fields",
        "component",
        "stream",
        "task",
        "ids",
        "roots",
        "anchors",
        "key",
        "_views",
        "_xor",
        "piece",
    )

    def __init__(
        self,
        rows: list[tuple[Any, ...]],
        fields: Fields,
        component: str,
        stream: str,
        task: int,
        ids: list[int] | None = None,
        roots: list[int] | None = None,
        anchors: list[Mapping[int, int]] | None = None,
        key: object = None,
        piece: Piece | None = None,
    ) -> None:
        self.rows = rows
        self.fields = fields
        self.component = component
        self.stream = stream
        self.task = task
        self.ids = ids
        self.roots = roots
        self.anchors = anchors
        self.piece = piece
        #: What the emitting executor extends this batch by (its stream and form); None: never extended.
        self.key = key
        self._views: dict[int, Tuple] | None = None
        #: Per row, the XOR of the edges emitted anchored to it before it had a view (the runtime's
        #: ``emit_each`` keeps it here instead of making a Tuple per input); a view starts from it.
        self._xor: list[int] | None = None

    @classmethod
    def of(cls, tuples: Sequence[Tuple]) -> TupleBatch:
        """A batch of these tuples (one stream from one task), ``batch[i]`` being ``tuples[i]`` itself::

        batch = TupleBatch.of([make_tuple(["a b"], ["line"]), make_tuple(["c"], ["line"])])
        """
        if not tuples:
            raise ValueError("a batch needs at least one tuple")
        first = tuples[0]
        if any((t.component, t.stream, t.task) != (first.component, first.stream, first.task) for t in tuples):
            raise ValueError("a batch holds tuples of one stream from one task")
        tracked = any(t.id or t.anchors for t in tuples)
        batch = cls(
            [t.values for t in tuples],
            first.fields,
            first.component,
            first.stream,
            first.task,
            [t.id for t in tuples] if tracked else None,
            None,
            [t.anchors for t in tuples] if tracked else None,
        )
        batch._views = dict(enumerate(tuples))
        return batch

    @property
    def values(self) -> list[tuple[Any, ...]]:
        """Every row's values, in order (no Tuple is made)."""
        return self.rows

    def column(self, name: str) -> list[Any]:
        """One field's values, row by row."""
        position = self._position(name)
        return [row[position] for row in self.rows]

    def _position(self, name: str) -> int:
        position = self.fields.positions.get(name)
        if position is None:
            raise KeyError(
                f"no field {name!r} in stream {self.stream!r} of {self.component!r} (fields: {list(self.fields)})"
            )
        return position

    @property
    def tracked(self) -> bool:
        """Whether some row is tracked by an acker."""
        return self.ids is not None or self.piece is not None

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Tuple:
        views = self._views
        if views is None:
            views = self._views = {}
        tup = views.get(i)
        if tup is None:
            tup = views[i] = self.view(i)
            if self._xor is not None:
                tup._ack_val = self._xor[i]
        return tup

    def __iter__(self) -> Iterator[Tuple]:
        return (self[i] for i in range(len(self.rows)))

    def view(self, i: int) -> Tuple:
        """Row ``i`` as a new :class:`Tuple` (``batch[i]`` caches it; the runtime's per-tuple loop does not)."""
        ids, piece = self.ids, self.piece
        if piece is not None:
            return Tuple(self.rows[i], self.fields, self.component, self.stream, self.task, piece.edge, piece)
        if ids is None or not ids[i]:
            return Tuple(self.rows[i], self.fields, self.component, self.stream, self.task)
        if self.roots is not None:
            return Tuple(
                self.rows[i], self.fields, self.component, self.stream, self.task, ids[i], {self.roots[i]: ids[i]}
            )
        return Tuple(self.rows[i], self.fields, self.component, self.stream, self.task, ids[i], self.anchors[i])  # type: ignore[index]  # ids without roots come with anchors

    def views(self) -> Iterator[Tuple]:
        """Every row as a new :class:`Tuple`, in order: the per-tuple ``execute`` loop."""
        rows, fields, component, stream, task, piece = (
            self.rows,
            self.fields,
            self.component,
            self.stream,
            self.task,
            self.piece,
        )
        if piece is not None:
            edge = piece.edge
            for values in rows:
                yield Tuple(values, fields, component, stream, task, edge, piece)
        elif self.ids is None:
            # The per-tuple hot path: each Tuple made as its __init__ would, without calling it (a Python
            # __init__ call costs more than its stores: 145 ns a view, not 220).
            new, no_anchors = object.__new__, NO_ANCHORS
            for values in rows:
                tup = new(Tuple)
                tup._values = values
                tup._fields = fields
                tup._component = component
                tup._stream = stream
                tup._task = task
                tup._id = 0
                tup._anchors = no_anchors
                tup._ack_val = 0
                yield tup
        elif self.roots is not None:
            new, no_anchors = object.__new__, NO_ANCHORS  # as above
            for values, edge, root in zip(rows, self.ids, self.roots):
                tup = new(Tuple)
                tup._values = values
                tup._fields = fields
                tup._component = component
                tup._stream = stream
                tup._task = task
                tup._id = edge
                tup._anchors = {root: edge} if edge else no_anchors
                tup._ack_val = 0
                yield tup
        else:
            for values, edge, anchors in zip(rows, self.ids, self.anchors):  # type: ignore[arg-type]  # ids without roots come with anchors
                yield (
                    Tuple(values, fields, component, stream, task, edge, anchors)
                    if edge
                    else Tuple(values, fields, component, stream, task)
                )

    def __repr__(self) -> str:
        return (
            f"TupleBatch({len(self)} rows, component={self.component!r}, stream={self.stream!r}, "
            f"task={self.task}, tracked={self.tracked})"
        )


class ColumnBatch(TupleBatch):
    """A :class:`TupleBatch` as it came from another worker: the columns the wire carried (one list per
    field, ``n`` rows), its rows (value tuples) built on first use of :attr:`rows` / :attr:`values`,
    ``batch[i]`` or iteration. A bolt that reads columns, or never reads the values, makes no tuple per
    row; ``len`` and :meth:`column` need no rows either::

        batch = ColumnBatch([["a", "b"], [1, 2]], 2, Fields(["word", "n"]), "split", "default", 3)
        batch.column("n"), len(batch)      # [1, 2], 2: no rows built
        batch.values                       # [('a', 1), ('b', 2)]

    Until then the ``rows`` slot is empty, so reading it falls through to ``__getattr__``, which builds
    it; once built it is a plain slot, as fast to read as a local batch's.
    """

    __slots__ = ("_columns", "_n")

    def __init__(
        self,
        columns: list[list[Any]],
        n: int,
        fields: Fields,
        component: str,
        stream: str,
        task: int,
        ids: list[int] | None = None,
        roots: list[int] | None = None,
        anchors: list[Mapping[int, int]] | None = None,
        piece: Piece | None = None,
    ) -> None:
        super().__init__([], fields, component, stream, task, ids, roots, anchors, piece=piece)
        del self.rows  # built from the columns when first read (__getattr__)
        self._columns: list[list[Any]] | None = columns  # None once the rows are built
        self._n = n

    def __getattr__(self, name: str) -> Any:
        """``rows``, built from the columns on first read (then a plain slot)."""
        if name != "rows" or self._columns is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.rows = rows = rows_of_columns(self._columns, self._n)
        self._columns = None
        return rows

    def __len__(self) -> int:
        return self._n if self._columns is not None else len(self.rows)

    @property
    def width(self) -> int | None:
        """How many values each row has (None for a batch without rows)."""
        if self._columns is not None:
            return len(self._columns) if self._n else None
        return len(self.rows[0]) if self.rows else None

    def column(self, name: str) -> list[Any]:
        position = self._position(name)
        if self._columns is not None:
            return list(self._columns[position])
        return [row[position] for row in self.rows]  # built, and maybe changed in place by the bolt


def rows_of_columns(columns: Sequence[Sequence[Any]], n: int) -> list[tuple[Any, ...]]:
    """``n`` rows from their columns (one sequence of ``n`` values per field; none for a stream without fields)."""
    return list(zip(*columns)) if columns else [()] * n


def tick_tuple(rate_secs: float) -> Tuple:
    """A tick tuple, as a worker sends every ``topology.tick.tuple.freq.secs`` (= ``rate_secs``)."""
    return Tuple((rate_secs,), TICK_FIELDS, SYSTEM_COMPONENT, TICK_STREAM, SYSTEM_TASK)


def stand_in(inputs: Iterable[Tuple | TupleBatch]) -> Tuple:
    """One tuple standing for all of ``inputs`` in their tuple trees: what is emitted anchored to it is
    anchored to every input, and acking (or failing) it acks (or fails) every input, with one entry per
    root instead of one per input. For a bolt that holds many inputs and settles them together::

        held = stand_in(self.batches)                   # TupleBatches (or Tuples) not yet acked or failed
        self.emit_batch(totals, anchors=[held])         # each row in every held input's tree
        self.ack(held)                                  # instead of acking each input: never both

    Why: a result anchored to 5,000 inputs of the same few spout trees (a batch tree's rows) would carry
    and ack every input's edge; XOR makes the edges of one root combine into one, so the result carries
    one edge per root. Exact as Storm's acking: for each root, acking the stand-in reports the XOR of what
    acking each input would (its edge in that tree XOR the edges emitted anchored to it). The runtime's
    stats count the stand-in's ack or fail as one. It has no values; an input of no tree adds nothing
    (all untracked: the stand-in is untracked too).
    """
    roots: dict[int, int] = {}
    first: Tuple | TupleBatch | None = None

    def add(anchors: Mapping[int, int], ack_val: int) -> None:
        for root, edge in anchors.items():
            roots[root] = roots.get(root, 0) ^ edge ^ ack_val

    for item in inputs:
        first = first or item
        if isinstance(item, Tuple):
            anchors = item._anchors
            if not isinstance(anchors, Piece):
                add(anchors, item._ack_val)
                continue
            add(dict.fromkeys(anchors, anchors.ack_row(item) or 0), 0)  # the row's share: the edge, with the last row
            continue
        piece = item.piece
        if piece is not None:  # the rows not yet settled, and the piece's edge with them (they are its last)
            ack_val = 0
            for view in (item._views or {}).values():
                if view._anchors is piece:
                    ack_val ^= view._ack_val
                    view._anchors = piece.settled or piece._settled()
            add(piece, piece.settle(ack_val, piece.left) or 0 if piece.left > 0 else 0)
            continue
        if item.ids is None:
            continue
        views, emitted = item._views or {}, item._xor
        if item.roots is not None and not views and emitted is None:  # the usual case: one root per row
            for root, edge in zip(item.roots, item.ids):
                if edge:
                    roots[root] = roots.get(root, 0) ^ edge
            continue
        for i, edge in enumerate(item.ids):
            seen = views.get(i)
            if seen is not None:
                add(seen._anchors, seen._ack_val)
            elif edge:
                add(
                    {item.roots[i]: edge} if item.roots is not None else item.anchors[i],  # type: ignore[index]  # ids without roots come with anchors
                    emitted[i] if emitted is not None else 0,
                )
    if first is None:
        raise ValueError("stand_in needs at least one input")
    edge = next(iter(roots.values()), 0) or (1 if roots else 0)  # any non-zero id: it is tracked
    return Tuple((), NO_FIELDS, first.component, first.stream, first.task, edge, roots or NO_ANCHORS)
