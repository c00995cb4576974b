"""The worker-to-worker wire: a :class:`~squall.api.tuple.TupleBatch` for a task of another worker as msgpack
columns, never pickle, with a bounded buffer; decoded, the same batch in its column encoding
(:class:`~squall.api.tuple.ColumnBatch`).

One message carries rows with the same target task, source task and stream, in order::

    [1, target_task, source_task, stream, row_count, columns, ids, roots, anchors]

``columns`` holds the values column by column (one list per field, each ``row_count`` long): cheaper
to pack, and to unpack into value tuples, than a list per row (measured in bench/bench_transfer.py),
and a byte less per row. A column whose every row holds one str or bytes value (a constant field) travels as
that value once, a msgpack extension (:data:`REPEATED`), and arrives as a list of that one object: neither
side pays per row for it. Tracking travels only when some row has it: ``ids`` (each row's edge id, 0
for an untracked row) with either ``roots`` (each row's single root, whose edge is its id; 0 for an
untracked row) or, when some row has several roots, ``anchors`` (each row's flat ``[root, edge, ...]``);
the others are nil. A batch that is one piece of a spout batch's tree (:class:`~squall.api.tuple.Piece`: every row
in one tree under one edge) carries just that edge as ``ids`` and that root as ``roots``, two integers for
the whole message; a piece cut in several messages gets edges that XOR to its own
(:func:`~squall.api.tuple.split_edge`). So a message costs one header per batch and no per-tuple array at all.
The leading 1 is the format's version: every worker of a topology runs one Squall release, and a peer speaking
another format is refused by name, not misread.

Messages follow each other on a TCP stream with no extra framing: msgpack delimits them, and the
decoder refuses any message bigger than its buffer cap, so a peer cannot make a worker allocate
without bound; shapes are checked before anything reads them.

After the handshake (:mod:`worker.handshake`) the receiver writes one byte back whenever it starts or stops
holding the connections because its worker is backpressured: :data:`THROTTLE_ON`, then :data:`THROTTLE_OFF`
(Storm 2's backpressure status, in band). The caller's spouts hold while any peer says on, so a full queue
downstream paces them at once instead of after the kernel's socket buffers (megabytes of tuples) have filled.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import Any

import msgpack

from squall.api.tuple import ColumnBatch, Fields, Piece, TupleBatch, split_edge

#: The format's version, the first element of every message (and of the handshake): one Squall release per topology.
VERSION = 1
#: What a receiver writes back after the handshake: its worker is backpressured (hold your spouts), or no longer.
THROTTLE_ON, THROTTLE_OFF = b"\x01", b"\x00"
#: Largest message a worker accepts (a batch of ``topology.transfer.batch.size`` tuples fits easily).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Most rows in one message (a stream without fields has no columns to bound its row count).
MAX_ROWS = 1 << 20
#: Rows a sender puts in one message when more are waiting: the costs per message (a header, a decode call, an
#: inbox entry, a bolt's step) spread over many rows, and a bolt's step over one message stays short.
MESSAGE_ROWS = 1000


class WireError(ValueError):
    """Bytes that are not a valid batch: the connection is dropped, the worker keeps running."""


def encode(target: int, batch: TupleBatch, max_rows: int = 0, max_bytes: int = MAX_MESSAGE_BYTES) -> bytes:
    """``batch`` for ``target`` (a task of another worker) as messages of at most ``max_rows`` rows each (0: as few
    as :data:`MAX_ROWS` allows) and at most ``max_bytes`` bytes each (what a receiver accepts): a message over it is
    sent as two halves, and a single row over it raises :class:`WireError`. The rows become columns here, once.

    Values must be msgpack types (None, bool, int, float, str, bytes, lists, maps).

        data = encode(7, TupleBatch([("a", 1), ("b", 2)], Fields(["word", "n"]), "split", "default", 3))
    """
    n = len(batch)
    step = min(max_rows if 0 < max_rows < n else max(n, 1), MAX_ROWS)
    piece = None if batch.piece is None else (batch.piece.root, batch.piece.edge)
    anchors = None if batch.anchors is None else [[n for pair in a.items() for n in pair] for a in batch.anchors]
    message = _Message(target, batch.task, batch.stream, batch.rows, batch.ids, batch.roots, anchors)
    try:
        if step >= n:
            return message.pack(0, n, max_bytes, piece)
        starts = range(0, n, step)
        pieces: list[tuple[int, int] | None] = [None] * len(starts)
        if piece is not None:  # a piece in several messages: edges that XOR to its own
            pieces = [(piece[0], part) for part in split_edge(piece[1], len(starts))]
        return b"".join(message.pack(i, min(i + step, n), max_bytes, part) for i, part in zip(starts, pieces))
    except WireError:
        raise
    except IndexError:  # a row shorter than the first
        raise WireError("rows of one stream must have one width") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(
            f"tuple values must be msgpack-serialisable (str, bytes, numbers within 64 bits, lists, maps): {exc}"
        ) from None


def encode_batches(
    batches: list[tuple[int, TupleBatch]], max_rows: int = 0, max_bytes: int = MAX_MESSAGE_BYTES
) -> tuple[bytes, list[tuple[TupleBatch, WireError]]]:
    """Every ``(target, batch)`` as wire messages (:func:`encode`), and the rows left out with their errors: a row
    whose values msgpack cannot carry, or too large for one message, stays behind, not its batch."""
    try:
        return b"".join([encode(target, batch, max_rows, max_bytes) for target, batch in batches]), []
    except WireError:
        pass
    good: list[bytes] = []
    refused: list[tuple[TupleBatch, WireError]] = []
    for target, batch in batches:
        try:
            good.append(encode(target, batch, max_rows, max_bytes))
            continue
        except WireError:
            pass
        for message in encode_each(target, batch, max_bytes):
            if isinstance(message, WireError):
                refused.append((batch, message))
            else:
                good.append(message)
    return b"".join(good), refused


def encode_each(target: int, batch: TupleBatch, max_bytes: int = MAX_MESSAGE_BYTES) -> list[bytes | WireError]:
    """Every row of ``batch`` as a message of its own, or the :class:`WireError` it raises: to find the rows that
    cannot travel and send the rest. The rows of a piece get edges that XOR to its own, so its tree completes only
    if every row arrives."""
    piece, n = batch.piece, len(batch)
    ids, roots = batch.ids, batch.roots
    if piece is not None:
        ids, roots = split_edge(piece.edge, n), [piece.root] * n
    messages: list[bytes | WireError] = []
    for i in range(n):
        anchors = batch.anchors
        row = TupleBatch(
            [batch.rows[i]],
            batch.fields,
            batch.component,
            batch.stream,
            batch.task,
            None if ids is None else [ids[i]],
            None if roots is None else [roots[i]],
            None if anchors is None else [anchors[i]],
        )
        try:
            messages.append(encode(target, row, 1, max_bytes))
        except WireError as exc:
            messages.append(exc)
    return messages


class _Message:
    """The rows of one batch for one target with their tracking as the wire carries it, packed a slice at a time."""

    __slots__ = ("head", "rows", "tracking")

    def __init__(
        self,
        target: int,
        source: int,
        stream: str,
        rows: list[Any],
        ids: list[int] | None,
        roots: list[int] | None,
        anchors: list[list[int]] | None,
    ) -> None:
        self.head = (VERSION, target, source, stream)
        self.rows = rows
        self.tracking = (ids, roots, anchors)

    def pack(self, start: int, stop: int, max_bytes: int, piece: tuple[int, int] | None) -> bytes:
        """Rows ``start`` to ``stop`` as messages of at most ``max_bytes`` each (``piece``: their root and edge,
        when the batch is a piece)."""
        whole = start == 0 and stop == len(self.rows)
        if piece is not None:
            tracking: list[Any] = [piece[1], piece[0], None]
        else:
            tracking = [None if column is None else column if whole else column[start:stop] for column in self.tracking]
        data = _packer.pack(
            [*self.head, stop - start, _columns_of(self.rows if whole else self.rows[start:stop]), *tracking]
        )
        if len(data) <= max_bytes:
            return data
        if stop - start == 1:
            raise WireError(
                f"a tuple of {len(data):,} bytes is larger than a worker accepts in one message "
                f"({max_bytes:,} bytes): send large data by reference (a path, a key), not as a value"
            )
        middle = (start + stop) // 2
        if piece is None:
            return self.pack(start, middle, max_bytes, None) + self.pack(middle, stop, max_bytes, None)
        first, second = split_edge(piece[1], 2)
        return self.pack(start, middle, max_bytes, (piece[0], first)) + self.pack(
            middle, stop, max_bytes, (piece[0], second)
        )


def _columns_of(rows: list[Any]) -> list[list[Any] | msgpack.ExtType]:
    """The values of ``rows``, one list per field (a C loop per field, no tuple per row), a column that holds one
    str or bytes value in every row as that value once (:func:`_repeated`)."""
    if not rows:
        return []
    first = rows[0]
    if len(rows) > 1 and rows[-1] == first and rows.count(first) == len(rows):  # every row alike: no columns to cut
        return [
            msgpack.ExtType(REPEATED, _packer.pack(value))
            if type(value) in _REPEATABLE
            else list(map(itemgetter(i), rows))
            for i, value in enumerate(first)
        ]
    return [_repeated(list(map(itemgetter(i), rows))) for i in range(len(first))]


_packer = msgpack.Packer(use_bin_type=True)
#: msgpack extension code of a repeated column: one value (packed) that every row of the message holds.
REPEATED = 1
#: The types a column may be sent once for: immutable, so rows sharing one decoded object cannot tell; a value
#: equal to one of these is one (or a subclass, packed as one) — unlike 1, 1.0 and True, which compare equal and
#: would arrive as the first — unless its own ``__eq__`` claims it, and msgpack could not pack such an object.
_REPEATABLE = (str, bytes)


def _repeated(column: list[Any]) -> list[Any] | msgpack.ExtType:
    """``column`` as it travels: when every value is one str or bytes value (a constant field: a source name, a
    tag; storm-perf's constant spout) that value once, as a :data:`REPEATED` extension, so neither side pays per
    row; else the list. Cheap to refuse: a column whose ends differ costs two comparisons."""
    first = column[0] if column else None
    if type(first) in _REPEATABLE and column[-1] == first and len(column) > 1 and column.count(first) == len(column):
        return msgpack.ExtType(REPEATED, _packer.pack(first))
    return column


class Decoder:
    """Feed received bytes, get whole batches back, each with its target task; keeps partial messages between reads.

    Each batch comes as a :class:`~squall.api.tuple.ColumnBatch` (the columns the wire carried; its rows are built
    when first read) that names its source task and stream; its source component and fields are the worker's to
    set once it has checked them against the topology (:meth:`worker.queues.Routes.receive`): until then they are
    empty.

    Its buffer holds at most ``max_message_bytes``: a read of several messages is taken a piece at a time
    (whole messages out before the next piece goes in), so only a message bigger than that is refused.
    """

    def __init__(self, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        # Lists stay lists (a bolt sees the list it was sent); a batch's rows become tuples when first read.
        self._unpacker = msgpack.Unpacker(
            raw=False, max_buffer_size=max_message_bytes, strict_map_key=False, ext_hook=_Repeated.of
        )
        self._max = max_message_bytes
        self._fed = 0

    def feed(self, data: bytes | memoryview) -> Iterator[tuple[int, ColumnBatch]]:
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


#: The fields of a decoded batch until the worker has checked it (see :class:`Decoder`).
UNCHECKED = Fields(())
_LIST, _INT = {list}, {int}


class _Repeated:
    """A decoded :data:`REPEATED` column: its one value, made a list of the message's row count by :func:`_batch`."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    @classmethod
    def of(cls, code: int, data: bytes) -> _Repeated:
        value = msgpack.unpackb(data, raw=False) if code == REPEATED else None
        if type(value) not in _REPEATABLE:
            raise WireError(f"malformed batch: extension {code} is no repeated str or bytes column")
        return cls(value)


def _batch(message: Any) -> tuple[int, ColumnBatch]:
    """A message's target and batch; :class:`WireError` if it is no batch."""
    if not (type(message) is list and len(message) == 9 and message[0] == VERSION):
        if type(message) is list and len(message) == 2 and message[0] == VERSION:
            raise WireError(
                "a batch in the entry-list format of an older Squall release: "
                "run one Squall release on every worker of a topology"
            )
        raise WireError(f"not a version-{VERSION} batch")
    _, target, source, stream, n, columns, ids, roots, anchors = message
    if type(columns) is list and type(n) is int and 0 < n <= MAX_ROWS and _Repeated in set(map(type, columns)):
        if n * sum(type(column) is _Repeated for column in columns) > MAX_ROWS:
            raise WireError("malformed batch: more repeated cells than a message may have")  # a few bytes, 8 MB each
        columns = [[column.value] * n if type(column) is _Repeated else column for column in columns]
    if not (
        type(target) is int
        and type(source) is int
        and type(stream) is str
        and type(n) is int
        and 0 <= n <= MAX_ROWS
        and type(columns) is list
        and set(map(type, columns)) <= _LIST
        and all(len(column) == n for column in columns)
    ):
        raise WireError("malformed batch: target, source, stream, row count or columns")
    if type(ids) is int:  # a piece: (root, edge) for every row
        if not (type(roots) is int and anchors is None and ids and roots and n):
            raise WireError("malformed batch: a piece needs a non-zero root and edge and some rows")
        return target, ColumnBatch(columns, n, UNCHECKED, "", stream, source, piece=Piece(roots, ids, n))
    if ids is None:
        tracking_ok = roots is None and anchors is None
    elif type(ids) is not list or len(ids) != n or not set(map(type, ids)) <= _INT:
        tracking_ok = False
    elif roots is not None:
        tracking_ok = anchors is None and type(roots) is list and len(roots) == n and set(map(type, roots)) <= _INT
    else:
        tracking_ok = (
            type(anchors) is list
            and len(anchors) == n
            and set(map(type, anchors)) <= _LIST
            and all(len(a) % 2 == 0 and set(map(type, a)) <= _INT for a in anchors)
        )
    if not tracking_ok:
        raise WireError("malformed batch: ids, roots or anchors do not match the rows")
    return target, ColumnBatch(
        columns,
        n,
        UNCHECKED,
        "",
        stream,
        source,
        ids,
        roots,
        None if anchors is None else [dict(zip(a[::2], a[1::2])) for a in anchors],
    )
