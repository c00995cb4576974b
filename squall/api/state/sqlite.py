"""State in SQLite files on the worker's host: survives a worker restart there (the supervisor restarts a
worker on its host), not a move to another host. Nothing to set up: the zero-setup durable choice for
``storm local`` and a one-host cluster.

One file per namespace (``<directory>/<namespace>.sqlite3``), so tasks never wait on each other's locks: a
``state`` table of committed entries, a ``prepared`` table of the writes a prepare saved (a NULL value is a
delete), and ``txids`` (``prepare`` while a set is prepared, ``commit``). Each prepare and commit is one
transaction written with ``synchronous=FULL`` in WAL mode, on disk when it returns.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from squall.api.state.keyvalue import StateError, Write

__all__ = ["SqliteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS state (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS prepared (key BLOB PRIMARY KEY, value BLOB) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS txids (name TEXT PRIMARY KEY, txid INTEGER NOT NULL) WITHOUT ROWID;
"""

#: How long a write waits for another process's lock on the same file (a task's old worker, still stopping).
BUSY_TIMEOUT_SECS = 30.0


class SqliteStore:
    """A :class:`~squall.api.state.keyvalue.StateStore` in the SQLite file ``path`` (created, with its
    directory, when missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECS, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StateError(
                f'cannot open the state file {path}: {exc} (topology.state.provider.config\'s "directory", or '
                "storm.local.dir, must be a writable directory)"
            ) from None

    def get(self, key: bytes) -> bytes | None:
        row = self._db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        yield from self._db.execute("SELECT key, value FROM state ORDER BY key")

    def txids(self) -> tuple[int | None, int | None]:
        ids = dict(self._db.execute("SELECT name, txid FROM txids").fetchall())
        return ids.get("prepare"), ids.get("commit")

    def prepared(self) -> dict[bytes, Write]:
        return dict(self._db.execute("SELECT key, value FROM prepared").fetchall())

    def prepare(self, txid: int, writes: Mapping[bytes, Write]) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM prepared")
            db.executemany("INSERT INTO prepared (key, value) VALUES (?, ?)", writes.items())
            db.execute("INSERT OR REPLACE INTO txids (name, txid) VALUES ('prepare', ?)", (txid,))

    def commit(self, txid: int) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO state SELECT key, value FROM prepared WHERE value IS NOT NULL")
            db.execute("DELETE FROM state WHERE key IN (SELECT key FROM prepared WHERE value IS NULL)")
            db.execute("DELETE FROM prepared")
            db.execute("DELETE FROM txids WHERE name = 'prepare'")
            db.execute("INSERT OR REPLACE INTO txids (name, txid) VALUES ('commit', ?)", (txid,))

    def rollback(self) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM prepared")
            db.execute("DELETE FROM txids WHERE name = 'prepare'")

    def write(self, writes: Mapping[bytes, Write]) -> None:
        with self._transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)",
                [(key, value) for key, value in writes.items() if value is not None],
            )
            db.executemany(
                "DELETE FROM state WHERE key = ?", [(key,) for key, value in writes.items() if value is None]
            )

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it or none of it, on disk when the block ends."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
