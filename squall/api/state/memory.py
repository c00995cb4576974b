"""State in the worker's memory (Storm's default ``InMemoryKeyValueStateProvider``): gone when the worker
stops, as Storm's; for tests and for state a topology can rebuild."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from squall.api.state.keyvalue import Write

__all__ = ["MemoryStore"]


class MemoryStore:
    """A :class:`~squall.api.state.keyvalue.StateStore` in dicts: one namespace's committed entries and its
    prepared set. Each task opens its own, empty."""

    def __init__(self) -> None:
        self._committed: dict[bytes, bytes] = {}
        self._prepared: dict[bytes, Write] = {}
        self._prepared_txid: int | None = None
        self._committed_txid: int | None = None

    def get(self, key: bytes) -> bytes | None:
        return self._committed.get(key)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(self._committed.items()))  # a copy: the bolt may write while it iterates

    def txids(self) -> tuple[int | None, int | None]:
        return self._prepared_txid, self._committed_txid

    def prepared(self) -> dict[bytes, Write]:
        return dict(self._prepared)

    def prepare(self, txid: int, writes: Mapping[bytes, Write]) -> None:
        self._prepared, self._prepared_txid = dict(writes), txid

    def commit(self, txid: int) -> None:
        self.write(self._prepared)
        self._prepared, self._prepared_txid, self._committed_txid = {}, None, txid

    def rollback(self) -> None:
        self._prepared, self._prepared_txid = {}, None

    def write(self, writes: Mapping[bytes, Write]) -> None:
        for key, value in writes.items():
            if value is None:
                self._committed.pop(key, None)
            else:
                self._committed[key] = value

    def close(self) -> None:
        pass
