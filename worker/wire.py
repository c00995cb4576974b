"""The worker-to-worker wire: runs of tuples as msgpack columns, never pickle, with a bounded buffer.

One message carries a *run*: tuples with the same target task, source task and stream, in order::

    [1, target_task, source_task, stream, row_count, columns, ids, roots, anchors]

``columns`` holds the values column by column (one list per field, each ``row_count`` long): cheaper
to pack, and to unpack into value tuples, than a list per row (measured in bench/bench_transfer.py),
and a byte less per row. Tracking travels only when some row has it: ``ids`` (each row's edge id, 0
for an untracked row) with either ``roots`` (each row's single root, whose edge is its id; 0 for an
untracked row) or, when some row has several roots, ``anchors`` (each row's flat ``[root, edge, ...]``);
the others are nil. So a message costs one header per run and no per-tuple array at all. The leading
1 is the format's version: every worker of a topology runs one Squall release, and a peer speaking
another format is refused by name, not misread.

Messages follow each other on a TCP stream with no extra framing: msgpack delimits them, and the
decoder refuses any message bigger than its buffer cap, so a peer cannot make a worker allocate
without bound; shapes are checked before anything reads them.

A connection opens with a handshake: the caller sends ``[HELLO, 1, topology_id]`` and waits for
``[HELLO, 1, refusal]`` (refusal nil: accepted) before any batch, so a worker serves only workers of
its own topology — a stale worker whose routes still name a port that another topology now uses is
refused by name instead of feeding its tuples to the wrong tasks. Fields after the topology id are
room for the credentials of authenticated transfer (a later release); this one ignores them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any, NamedTuple

import msgpack

from squall.tuple import ColumnBatch, Fields, Tuple, TupleBatch, rows_of_columns

VERSION = 1
#: The first element of a handshake (see :func:`hello`): what a Squall worker connection opens with.
HELLO = "squall-transfer"
#: Largest handshake message: a topology id and, later, credentials.
MAX_HELLO_BYTES = 4096
#: Largest message a worker accepts (a batch of ``topology.transfer.batch.size`` tuples fits easily).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Most rows in one message (a stream without fields has no columns to bound its row count).
MAX_ROWS = 1 << 20
#: Rows a sender puts in one message when more are waiting: the costs per message (a header, a decode call, an
#: inbox entry, a bolt's step) spread over many rows, and a bolt's step over one message stays short.
MESSAGE_ROWS = 1000


class WireError(ValueError):
    """Bytes that are not a valid batch: the connection is dropped, the worker keeps running."""


class Entry(NamedTuple):
    """One tuple on its way to another worker (the per-tuple view of a :class:`WireBatch`)."""

    target_task: int
    source_task: int
    stream: str
    values: Sequence[Any]
    tuple_id: int
    anchors: Sequence[tuple[int, int]]


class WireBatch:
    """A run of tuples for one target task from one source task on one stream, column by column.

    The sender merges runs with equal (target, source, stream) and ships each as messages of many rows;
    the receiver gets one per message. Iterating gives :class:`Entry` rows (values and anchors as the lists
    msgpack decodes); the runtime hands a bolt the run as a :class:`~squall.tuple.ColumnBatch`
    (:meth:`tuple_batch`): a decoded run keeps the columns it came as, and its rows (value tuples) are
    built only when something reads them. All of a run's rows have one width: an executor checks every
    emit, and so the encoder does not check again (a decoded run has it by construction).

        batch = WireBatch(7, 3, "default", [("a", 1), ("b", 2)])    # untracked rows
        [e.values for e in batch]                                   # [['a', 1], ['b', 2]]
        WireBatch.decode(batch.encode()).rows                       # [('a', 1), ('b', 2)]
    """

    __slots__ = ("target", "source", "stream", "rows", "_columns", "_n", "ids", "roots", "anchors")

    def __init__(self, target: int, source: int, stream: str, rows: list[Sequence[Any]],
                 ids: list[int] | None = None, roots: list[int] | None = None,
                 anchors: list[list[int]] | None = None) -> None:
        self.target = target
        self.source = source
        self.stream = stream
        self.rows = rows
        self._columns: list[list[Any]] | None = None  # a decoded run's values, until its rows are built
        self._n = 0                                    # with _columns: the row count
        self.ids = ids            # None: every row untracked
        self.roots = roots        # with ids: one root per row (0 = untracked row), its edge is the row's id
        self.anchors = anchors    # with ids, instead of roots: flat [root, edge, ...] per row

    @classmethod
    def of_columns(cls, target: int, source: int, stream: str, columns: list[list[Any]], n: int,
                   ids: list[int] | None = None, roots: list[int] | None = None,
                   anchors: list[list[int]] | None = None) -> WireBatch:
        """A run of ``n`` rows given as ``columns`` (one list of ``n`` values per field), as decoded: its
        ``rows`` slot stays empty until read, when ``__getattr__`` builds it (as :class:`ColumnBatch` does)."""
        run = cls(target, source, stream, [], ids, roots, anchors)
        del run.rows
        run._columns, run._n = columns, n
        return run

    def __getattr__(self, name: str) -> Any:
        if name != "rows" or self._columns is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.rows = rows = rows_of_columns(self._columns, self._n)
        self._columns = None
        return rows

    @property
    def width(self) -> int | None:
        """How many values each row has (None for a run without rows)."""
        if self._columns is not None:
            return len(self._columns) if self._n else None
        return len(self.rows[0]) if self.rows else None

    def __len__(self) -> int:
        return self._n if self._columns is not None else len(self.rows)

    def __iter__(self) -> Iterator[Entry]:
        head = (self.target, self.source, self.stream)
        if self.ids is None:
            return (Entry(*head, list(values), 0, []) for values in self.rows)
        if self.roots is not None:
            return (Entry(*head, list(values), i, [[r, i]] if r else [])
                    for values, i, r in zip(self.rows, self.ids, self.roots))
        return (Entry(*head, list(values), i, [list(p) for p in zip(a[::2], a[1::2])])
                for values, i, a in zip(self.rows, self.ids, self.anchors))  # type: ignore[arg-type]

    def tuple_batch(self, component: str, fields: Fields) -> TupleBatch:
        """The (decoded) run as the batch a bolt receives from ``component``: the columns as they are."""
        anchors = None if self.anchors is None else [dict(zip(a[::2], a[1::2])) for a in self.anchors]
        if self._columns is not None:
            return ColumnBatch(self._columns, self._n, fields, component, self.stream, self.source, self.ids,
                               self.roots, anchors)
        return TupleBatch(self.rows, fields, component, self.stream, self.source, self.ids, self.roots, anchors)

    def tuples(self, component: str, fields: Fields) -> list[Tuple]:
        """The (decoded) rows as the Tuples a bolt receives from ``component``."""
        return list(self.tuple_batch(component, fields).views())

    @classmethod
    def of(cls, target: int, batch: TupleBatch) -> WireBatch:
        """A task thread's batch for a remote ``target`` as a run (the rows shared, not copied)."""
        anchors = None if batch.anchors is None else [[n for pair in a.items() for n in pair] for a in batch.anchors]
        return cls(target, batch.task, batch.stream, batch.rows, batch.ids, batch.roots, anchors)

    def extend(self, other: "WireBatch") -> None:
        """Append ``other``'s rows (same target, source and stream), converting forms if they differ."""
        if self.ids is None and other.ids is None:
            self.rows.extend(other.rows)
            return
        if self.anchors is None and other.anchors is None:  # untracked and single-root rows: roots form
            self._to_roots()
            other._to_roots()
            self.ids.extend(other.ids)  # type: ignore[union-attr, arg-type]
            self.roots.extend(other.roots)  # type: ignore[union-attr, arg-type]
            self.rows.extend(other.rows)
            return
        self._to_anchors()
        other._to_anchors()
        self.ids.extend(other.ids)  # type: ignore[union-attr, arg-type]
        self.anchors.extend(other.anchors)  # type: ignore[union-attr, arg-type]
        self.rows.extend(other.rows)

    def _to_roots(self) -> None:
        if self.ids is None:
            self.ids, self.roots = [0] * len(self), [0] * len(self)

    def _to_anchors(self) -> None:
        if self.ids is None:
            self.ids, self.anchors = [0] * len(self), [[] for _ in range(len(self))]
        elif self.roots is not None:
            self.anchors = [[r, i] if r else [] for r, i in zip(self.roots, self.ids)]
            self.roots = None

    def encode(self, max_rows: int = 0, max_bytes: int = MAX_MESSAGE_BYTES) -> bytes:
        """The run as messages of at most ``max_rows`` rows each (0: as few as :data:`MAX_ROWS` allows)
        and at most ``max_bytes`` bytes each (what a receiver accepts): a message over it is sent as two
        halves, and a single row over it raises :class:`WireError`.

        Values must be msgpack types (None, bool, int, float, str, bytes, lists, maps)."""
        n = len(self)
        step = min(max_rows if 0 < max_rows < n else max(n, 1), MAX_ROWS)
        try:
            if step >= n:
                return self._pack(0, n, max_bytes)
            return b"".join(self._pack(i, min(i + step, n), max_bytes) for i in range(0, n, step))
        except WireError:
            raise
        except IndexError:  # a row shorter than the first
            raise WireError("rows of one stream must have one width") from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise WireError("tuple values must be msgpack-serialisable (str, bytes, numbers within 64 bits, "
                            f"lists, maps): {exc}") from None

    def _pack(self, start: int, stop: int, max_bytes: int) -> bytes:
        """Rows ``start`` to ``stop`` as messages of at most ``max_bytes`` each."""
        whole = start == 0 and stop == len(self)
        tracking = [None if column is None else column if whole else column[start:stop]
                    for column in (self.ids, self.roots, self.anchors)]
        data = _packer.pack([VERSION, self.target, self.source, self.stream, stop - start,
                             self._columns_of(start, stop, whole), *tracking])
        if len(data) <= max_bytes:
            return data
        if stop - start == 1:
            raise WireError(f"a tuple of {len(data):,} bytes is larger than a worker accepts in one message "
                            f"({max_bytes:,} bytes): send large data by reference (a path, a key), not as a value")
        middle = (start + stop) // 2
        return self._pack(start, middle, max_bytes) + self._pack(middle, stop, max_bytes)

    def _columns_of(self, start: int, stop: int, whole: bool) -> list[list[Any]]:
        """The values of rows ``start`` to ``stop``, one list per field (a C loop per field, no tuple per row)."""
        columns = self._columns
        if columns is not None:  # a decoded run, never read as rows
            return columns if whole else [column[start:stop] for column in columns]
        rows = self.rows if whole else self.rows[start:stop]
        if not rows:
            return []
        return [list(map(itemgetter(i), rows)) for i in range(len(rows[0]))]

    def __getitem__(self, i: int) -> "WireBatch":
        """Row ``i`` alone, as a one-row run (to find which row cannot travel)."""
        return WireBatch(self.target, self.source, self.stream, [self.rows[i]],
                         *(None if column is None else [column[i]] for column in (self.ids, self.roots, self.anchors)))

    @staticmethod
    def decode(data: bytes) -> "WireBatch":
        """One message → its run (a convenience over :class:`Decoder` for exactly one message)."""
        (batch,) = Decoder().feed(data)
        return batch


_packer = msgpack.Packer(use_bin_type=True)


def runs_of_tuples(target: int, tuples: Sequence[Tuple]) -> list[WireBatch]:
    """A task thread's tuples for a remote ``target`` → runs, in order, with no per-tuple object but the
    values (already built) and, for tracked rows, their ids and roots."""
    if len({t._task for t in tuples}) <= 1 and len({t._stream for t in tuples}) <= 1:
        return [_run(target, tuples)] if tuples else []
    runs, start = [], 0
    for i in range(1, len(tuples) + 1):
        if i == len(tuples) or (tuples[i]._task, tuples[i]._stream) != (tuples[start]._task, tuples[start]._stream):
            runs.append(_run(target, tuples[start:i]))
            start = i
    return runs


def _run(target: int, tuples: Sequence[Tuple]) -> WireBatch:
    source, stream = tuples[0]._task, tuples[0]._stream
    rows = [t._values for t in tuples]
    ids = [t._id for t in tuples]
    if not any(ids):
        return WireBatch(target, source, stream, rows)
    roots: list[int] = []
    for i, t in zip(ids, tuples):
        a = t._anchors
        if len(a) == 1:
            for root, edge in a.items():
                if edge == i and root:
                    roots.append(root)
                    break
            else:
                break
        elif not a and not i:
            roots.append(0)
        else:
            break
    else:
        return WireBatch(target, source, stream, rows, ids, roots)
    anchors = [[n for pair in t._anchors.items() for n in pair] for t in tuples]
    return WireBatch(target, source, stream, rows, ids, anchors=anchors)


def runs_of_entries(entries: Iterable[Entry]) -> list[WireBatch]:
    """Entries → runs of consecutive entries with equal (target, source, stream), in order; a run's rows
    must have one width (:class:`WireError` if not: no executor checked these)."""
    runs = []
    for (target, source, stream), run in groupby(entries, _entry_key):
        run = list(run)
        rows = [e[3] for e in run]
        if len(widths := set(map(len, rows))) > 1:
            raise WireError(f"rows of one stream must have one width, got widths {sorted(widths)}")
        ids = [e[4] for e in run]
        anchors = [[n for pair in e[5] for n in pair] for e in run]
        if any(ids) or any(anchors):
            runs.append(WireBatch(target, source, stream, rows, ids, anchors=anchors))
        else:
            runs.append(WireBatch(target, source, stream, rows))
    return runs


_entry_key = itemgetter(0, 1, 2)


def encode(entries: Sequence[Entry]) -> bytes:
    """Entries → bytes: one message per run of equal (target, source, stream)."""
    return b"".join(run.encode() for run in runs_of_entries(entries))


def hello(topology_id: str) -> bytes:
    """The message that opens a connection to another worker: which topology's worker is calling.

        >>> Greeting().feed(hello("words-1-1700000000"))
        ['squall-transfer', 1, 'words-1-1700000000']
    """
    return _packer.pack([HELLO, VERSION, topology_id])


def answer(refusal: str | None) -> bytes:
    """The receiver's reply to :func:`hello`: None accepts the connection, a string says why it is refused."""
    return _packer.pack([HELLO, VERSION, refusal])


class Greeting:
    """Reads the one small message that opens a connection (a :func:`hello`, or its :func:`answer`).

    Nothing may follow it until it is answered, so bytes after it are refused, not kept for later.

        greeting = Greeting()
        greeting.feed(data[:3])     # None: not whole yet
        greeting.feed(data[3:])     # ['squall-transfer', 1, topology_id]
    """

    def __init__(self) -> None:
        self._unpacker = msgpack.Unpacker(raw=False, max_buffer_size=MAX_HELLO_BYTES)
        self._fed = 0

    def feed(self, data: bytes) -> list[Any] | None:
        """The message once it is whole (None until then); :class:`WireError` if it is not a greeting."""
        try:
            self._unpacker.feed(data)
        except msgpack.BufferFull:
            raise WireError(f"not a Squall worker handshake: more than {MAX_HELLO_BYTES} bytes") from None
        self._fed += len(data)
        try:
            message = self._unpacker.unpack()
        except msgpack.OutOfData:
            return None
        except (ValueError, msgpack.UnpackException) as exc:
            raise WireError(f"not a Squall worker handshake: {exc}") from None
        if not (type(message) is list and len(message) >= 3 and message[0] == HELLO):
            raise WireError("not a Squall worker handshake: a worker connection opens with "
                            f"[{HELLO!r}, version, topology id]")
        if message[1] != VERSION:
            raise WireError(f"a peer speaking transfer version {message[1]!r}, this worker speaks {VERSION}: "
                            "run one Squall release on every worker of a topology")
        if self._unpacker.tell() != self._fed:
            raise WireError("data sent before the handshake was answered")
        return message


class Decoder:
    """Feed received bytes, get whole runs back; keeps partial messages between reads.

    Its buffer holds at most ``max_message_bytes``: a read of several messages is taken a piece at a time
    (whole messages out before the next piece goes in), so only a message bigger than that is refused.
    """

    def __init__(self, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        # Lists stay lists (a bolt sees the list it was sent); a run's rows become tuples when first read.
        self._unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max_message_bytes, strict_map_key=False)
        self._max = max_message_bytes
        self._fed = 0

    def feed(self, data: bytes | memoryview) -> Iterator[WireBatch]:
        unpacker, rest = self._unpacker, memoryview(data)
        while rest:
            room = self._max - (self._fed - unpacker.tell())  # what the part of a message held leaves
            if room <= 0:
                raise WireError("message larger than the worker's buffer cap")
            unpacker.feed(rest[:room])
            self._fed += min(room, len(rest))
            rest = rest[room:]
            try:
                for message in unpacker:
                    yield _batch(message)
            except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
                if isinstance(exc, WireError):
                    raise
                raise WireError(f"malformed batch: {exc}") from None


_LIST, _INT = {list}, {int}


def _batch(message: Any) -> WireBatch:
    if not (type(message) is list and len(message) == 9 and message[0] == VERSION):
        if type(message) is list and len(message) == 2 and message[0] == VERSION:
            raise WireError("a batch in the entry-list format of an older Squall release: "
                            "run one Squall release on every worker of a topology")
        raise WireError(f"not a version-{VERSION} batch")
    _, target, source, stream, n, columns, ids, roots, anchors = message
    if not (type(target) is int and type(source) is int and type(stream) is str
            and type(n) is int and 0 <= n <= MAX_ROWS and type(columns) is list
            and set(map(type, columns)) <= _LIST and all(len(column) == n for column in columns)):
        raise WireError("malformed batch: target, source, stream, row count or columns")
    if ids is None:
        tracking_ok = roots is None and anchors is None
    elif type(ids) is not list or len(ids) != n or not set(map(type, ids)) <= _INT:
        tracking_ok = False
    elif roots is not None:
        tracking_ok = (anchors is None and type(roots) is list and len(roots) == n
                       and set(map(type, roots)) <= _INT)
    else:
        tracking_ok = (type(anchors) is list and len(anchors) == n and set(map(type, anchors)) <= _LIST
                       and all(len(a) % 2 == 0 and set(map(type, a)) <= _INT for a in anchors))
    if not tracking_ok:
        raise WireError("malformed batch: ids, roots or anchors do not match the rows")
    return WireBatch.of_columns(target, source, stream, columns, n, ids, roots, anchors)

