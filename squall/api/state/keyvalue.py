"""The key-value state of a stateful bolt (Storm's ``KeyValueState``), and what a store must do to hold it.

The bolt's writes stay in memory until a checkpoint; then Storm's two phases run over the store:
``prepare_commit(txid)`` saves them apart from the committed entries (durably, in a durable store), and
``commit(txid)`` moves them in; ``rollback()`` drops what was not committed. Reads see the writes not yet
prepared, then the prepared ones, then the committed entries. This is Storm's Redis layout (one hash per
namespace, the prepared writes in a second, the txids in a third) in terms any store can offer.

Keys and values are msgpack values (None, bool, int, float, str, bytes, lists, maps), never pickle: a key is
its msgpack bytes, so ``("a", 1)`` and ``["a", 1]`` are one key (and come back as a tuple), while ``1`` and
``1.0`` are two.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import msgpack

__all__ = ["KeyValueState", "StateError", "StateStore", "decode_key", "decode_value", "encode"]

#: A pending write: the value's bytes, or None for a delete.
Write = bytes | None


class StateError(RuntimeError):
    """State cannot do what was asked: a transaction out of order, or a store that failed; the message says
    which namespace and why. In a stateful bolt it fails the checkpoint, and the topology recovers::

        state.prepare_commit(5)
        state.prepare_commit(6)   # StateError: state count-3: txid 6 cannot be prepared while 5 is prepared ...
    """


class StateStore(Protocol):
    """Where one namespace's state lives: committed entries, at most one prepared set of writes kept apart,
    and the last prepared and committed txids. Each method that writes is atomic, and returns once what it
    wrote is as durable as the store can make it (a file's store: on disk). A provider is a store::

        store.prepare(7, {b"\\xa3cat": b"\\x02", b"\\xa3dog": None})   # put cat=2, delete dog: kept apart
        store.commit(7)                                            # both applied, 7 recorded, the set dropped
    """

    def get(self, key: bytes) -> bytes | None:
        """The committed value of ``key``, or None."""

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every committed entry."""

    def txids(self) -> tuple[int | None, int | None]:
        """(the txid of the prepared set, None when there is none; the last committed txid, or None)."""

    def prepared(self) -> dict[bytes, Write]:
        """The prepared set: writes saved by :meth:`prepare` and not yet committed or rolled back."""

    def prepare(self, txid: int, writes: Mapping[bytes, Write]) -> None:
        """Make ``writes`` the prepared set of ``txid``, replacing any prepared before."""

    def commit(self, txid: int) -> None:
        """Apply the prepared set (if any) to the committed entries, record ``txid`` as committed, drop the set."""

    def rollback(self) -> None:
        """Drop the prepared set."""

    def write(self, writes: Mapping[bytes, Write]) -> None:
        """Apply ``writes`` to the committed entries at once, outside any transaction."""

    def close(self) -> None:
        """Release the store (a file, a connection); its state stays where it is."""


def encode(value: Any, what: str) -> bytes:
    """``value`` as msgpack bytes, or a TypeError saying which values state takes."""
    try:
        return msgpack.packb(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(
            f"state {what}s must be msgpack values (None, bool, int within 64 bits, float, str, bytes, lists, "
            f"maps), got {type(value).__name__}: {exc}"
        ) from None


def decode_key(raw: bytes) -> Any:
    """A key from its bytes: arrays come back as tuples, so every key can go in a set or a dict."""
    return msgpack.unpackb(raw, use_list=False, strict_map_key=False)


def decode_value(raw: bytes) -> Any:
    """A value from its bytes (maps may have keys of any msgpack type)."""
    return msgpack.unpackb(raw, strict_map_key=False)


class KeyValueState:
    """A bolt's state (Storm's ``KeyValueState``), given to ``init_state`` and kept by the bolt::

        def init_state(self, state):
            self.counts = state

        def execute(self, tup):
            word = tup["word"]
            self.counts.put(word, self.counts.get(word, 0) + 1)

    ``put``, ``get`` and ``delete`` work on the bolt's view (its writes first); iterating gives the keys, and
    ``items()`` the pairs, of the whole state. The checkpoint protocol calls the transaction methods
    (``prepare_commit``, ``commit``, ``rollback``); a bolt never needs to.
    """

    def __init__(self, namespace: str, store: StateStore) -> None:
        self.namespace = namespace
        self._store = store
        self._pending: dict[bytes, Write] = {}
        self._prepared = store.prepared()
        self._prepared_txid, self._committed_txid = store.txids()

    # -- what the bolt calls ---------------------------------------------------------------------

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value`` (both msgpack values); saved at the next checkpoint."""
        self._pending[encode(key, "key")] = encode(value, "value")

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` when it has none."""
        raw = self._raw(encode(key, "key"))
        return default if raw is None else decode_value(raw)

    def delete(self, key: Any) -> Any:
        """Remove ``key``; returns the value it had (None when it had none)."""
        raw_key = encode(key, "key")
        raw = self._raw(raw_key)
        self._pending[raw_key] = None
        return None if raw is None else decode_value(raw)

    def __contains__(self, key: Any) -> bool:
        return self._raw(encode(key, "key")) is not None

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _ in self.items())

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every (key, value) of the state, the bolt's writes included."""
        newer = {**self._prepared, **self._pending}
        for raw_key, raw in self._store.items():
            if raw_key not in newer:
                yield decode_key(raw_key), decode_value(raw)
        for raw_key, raw_value in newer.items():
            if raw_value is not None:
                yield decode_key(raw_key), decode_value(raw_value)

    def _raw(self, key: bytes) -> bytes | None:
        if key in self._pending:
            return self._pending[key]
        if key in self._prepared:
            return self._prepared[key]
        return self._store.get(key)

    # -- the transaction (Storm's State) ---------------------------------------------------------

    def prepare_commit(self, txid: int) -> None:
        """Save the writes so far as ``txid``'s, apart from the committed state (Storm's ``prepareCommit``).
        Preparing the prepared txid again adds the writes since; another txid while one is prepared is an error."""
        if self._committed_txid is not None and txid <= self._committed_txid:
            raise StateError(
                f"state {self.namespace}: txid {txid} cannot be prepared, {self._committed_txid} is committed"
            )
        if self._prepared_txid is not None and txid != self._prepared_txid:
            raise StateError(
                f"state {self.namespace}: txid {txid} cannot be prepared while {self._prepared_txid} is prepared "
                "and not committed"
            )
        writes = {**self._prepared, **self._pending}
        self._store.prepare(txid, writes)
        self._prepared, self._prepared_txid, self._pending = writes, txid, {}

    def commit(self, txid: int | None = None) -> None:
        """Make the prepared writes of ``txid`` the committed state (Storm's ``commit(txid)``). Without a txid,
        save every write at once, outside the protocol (Storm's ``commit()``: the checkpoint spout's own state).

        A txid with nothing prepared commits nothing: the writes it had were lost with the store (a restarted
        task's state in memory), and refusing would stall the recovery that sends it."""
        if txid is None:
            self._store.write(self._pending)
            self._pending = {}
            return
        if self._prepared_txid is not None and txid != self._prepared_txid:
            raise StateError(
                f"state {self.namespace}: txid {txid} cannot be committed, {self._prepared_txid} is the one prepared"
            )
        if self._committed_txid is not None and txid < self._committed_txid:
            raise StateError(f"state {self.namespace}: txid {txid} is older than {self._committed_txid}, committed")
        self._store.commit(txid)
        self._prepared, self._prepared_txid, self._committed_txid = {}, None, txid

    def rollback(self) -> None:
        """Back to the committed state: the writes prepared or made since are dropped (Storm's ``rollback``)."""
        self._store.rollback()
        self._prepared, self._prepared_txid, self._pending = {}, None, {}

    def close(self) -> None:
        """Release the store (the task is stopping); what was committed stays in it."""
        self._store.close()
