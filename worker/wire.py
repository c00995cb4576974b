"""The worker-to-worker wire: batches of tuples as msgpack, never pickle, with a bounded buffer.

One message is a msgpack array ``[version, [entry, ...]]``; an entry is
``[target_task, source_task, stream, values, tuple_id, anchors]`` where anchors is a list of
``[root_id, edge_id]`` pairs (empty for unreliable tuples). Messages follow each other on a TCP
stream with no extra framing: msgpack delimits them, and the decoder refuses any message bigger than
its buffer cap, so a peer cannot make a worker allocate without bound.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import msgpack

VERSION = 1
#: Largest message a worker accepts (a batch of ``topology.transfer.batch.size`` tuples fits easily).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class WireError(ValueError):
    """Bytes that are not a valid batch: the connection is dropped, the worker keeps running."""


class Entry(NamedTuple):
    target_task: int
    source_task: int
    stream: str
    values: Sequence[Any]
    tuple_id: int
    anchors: Sequence[tuple[int, int]]


_packer = msgpack.Packer(use_bin_type=True)


def encode(entries: Sequence[Entry]) -> bytes:
    """One batch → bytes. Values must be msgpack types (None, bool, int, float, str, bytes, lists, maps)."""
    try:
        return _packer.pack([VERSION, entries])
    except (TypeError, ValueError) as exc:
        raise WireError(f"tuple values must be msgpack-serialisable (str, bytes, numbers, lists, maps): {exc}") from None


class Decoder:
    """Feed received bytes, get whole batches back; keeps partial messages between reads."""

    def __init__(self, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        # Lists stay lists (a bolt sees the list it was sent); the runtime makes each entry's values a tuple.
        self._unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max_message_bytes, strict_map_key=False)

    def feed(self, data: bytes) -> Iterator[list[Entry]]:
        try:
            self._unpacker.feed(data)
        except msgpack.BufferFull:
            raise WireError("message larger than the worker's buffer cap") from None
        try:
            for message in self._unpacker:
                yield _batch(message)
        except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
            raise WireError(f"malformed batch: {exc}") from None


def _batch(message: Any) -> list[Entry]:
    if not (isinstance(message, list) and len(message) == 2 and message[0] == VERSION
            and isinstance(message[1], list)):
        raise WireError(f"not a version-{VERSION} batch")
    try:
        return [Entry(*entry) for entry in message[1]]
    except TypeError:
        raise WireError("malformed batch entry") from None
