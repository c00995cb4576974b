"""The key-value state of stateful bolts over each store: the bolt's view, Storm's two phases, what survives a
reopen (SQLite), msgpack keys and values, and the providers chosen by ``topology.state.provider``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from squall.api.state.keyvalue import KeyValueState, StateError, StateStore
from squall.api.state.memory import MemoryStore
from squall.api.state.providers import open_state
from squall.api.state.sqlite import SqliteStore


@pytest.fixture(params=["memory", "sqlite"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], StateStore]:
    if request.param == "memory":
        return MemoryStore
    return lambda: SqliteStore(tmp_path / "count-3.sqlite3")


def test_the_bolt_sees_its_writes_then_the_prepared_then_the_committed(new_store: Callable[[], StateStore]) -> None:
    state = KeyValueState("count-3", new_store())
    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(0)
    state.commit(0)
    state.put("a", 10)
    state.prepare_commit(1)
    state.put("c", [1, {"x": None}])
    assert state.delete("b") == 2
    assert (state.get("a"), state.get("b"), state.get("b", 0), state.get("c")) == (10, None, 0, [1, {"x": None}])
    assert "a" in state and "b" not in state
    assert sorted(state) == ["a", "c"]
    assert sorted(state.items()) == [("a", 10), ("c", [1, {"x": None}])]


def test_a_rollback_returns_to_the_last_commit(new_store: Callable[[], StateStore]) -> None:
    state = KeyValueState("count-3", new_store())
    state.put("a", 1)
    state.prepare_commit(0)
    state.commit(0)
    state.put("a", 2)
    state.delete("a")
    state.prepare_commit(1)
    state.put("b", 3)
    state.rollback()
    assert dict(state.items()) == {"a": 1}
    state.put("a", 5)
    state.prepare_commit(1)  # the rolled-back txid prepared again
    state.commit(1)
    assert dict(state.items()) == {"a": 5}


def test_transactions_go_in_order(new_store: Callable[[], StateStore]) -> None:
    state = KeyValueState("count-3", new_store())
    state.prepare_commit(4)
    with pytest.raises(StateError, match="txid 5 cannot be prepared while 4 is prepared"):
        state.prepare_commit(5)
    with pytest.raises(StateError, match="txid 3 cannot be committed, 4 is the one prepared"):
        state.commit(3)
    state.commit(4)
    with pytest.raises(StateError, match="txid 4 cannot be prepared, 4 is committed"):
        state.prepare_commit(4)
    state.commit(4)  # a commit sent again (a recovery rolling forward) changes nothing
    state.commit(6)  # nothing prepared (a task whose state was lost): nothing to commit, no stall
    with pytest.raises(StateError, match="older than 6"):
        state.commit(5)


def test_keys_and_values_are_msgpack_values_never_pickled(new_store: Callable[[], StateStore]) -> None:
    state = KeyValueState("count-3", new_store())
    state.put(("device", 7), b"\x00\xff")
    assert state.get(["device", 7]) == b"\x00\xff", "a list and a tuple are one key"
    assert list(state) == [("device", 7)], "array keys come back as tuples"
    state.put(1, "int")
    state.put(1.0, "float")
    assert (state.get(1), state.get(1.0)) == ("int", "float")
    with pytest.raises(TypeError, match="state values must be msgpack values .* got set"):
        state.put("k", {1, 2})
    with pytest.raises(TypeError, match="state keys must be msgpack values .* got object"):
        state.get(object())


def test_sqlite_keeps_what_was_committed_and_prepared_across_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "count-3.sqlite3"
    state = KeyValueState("count-3", SqliteStore(path))
    state.put("a", 1)
    state.prepare_commit(0)
    state.commit(0)
    state.put("a", 2)
    state.put("b", 1)
    state.prepare_commit(1)
    state.put("c", 1)  # never prepared: lost with the process
    state.close()

    reopened = KeyValueState("count-3", SqliteStore(path))
    assert dict(reopened.items()) == {"a": 2, "b": 1}, "the prepared writes are read back with the committed"
    reopened.commit(1)  # a recovery rolling the commit forward
    reopened.close()
    assert dict(KeyValueState("count-3", SqliteStore(path)).items()) == {"a": 2, "b": 1}

    again = KeyValueState("count-3", SqliteStore(path))
    again.put("a", 3)
    again.prepare_commit(2)
    again.close()
    rolled = KeyValueState("count-3", SqliteStore(path))
    rolled.rollback()  # a recovery rolling the prepare back
    assert dict(rolled.items()) == {"a": 2, "b": 1}


def test_commit_without_txid_saves_at_once(tmp_path: Path) -> None:
    path = tmp_path / "$checkpointspout-9.sqlite3"
    state = KeyValueState("$checkpointspout-9", SqliteStore(path))
    state.put("__state", {"txid": -1, "phase": "COMMITTED"})
    state.commit()
    state.close()
    assert KeyValueState("x", SqliteStore(path)).get("__state") == {"txid": -1, "phase": "COMMITTED"}


def test_the_provider_is_chosen_by_name_or_by_storms_class_name(tmp_path: Path) -> None:
    base = {"storm.local.dir": str(tmp_path), "topology.name": "wc"}
    for name in (None, "memory", "org.apache.storm.state.InMemoryKeyValueStateProvider"):
        state = open_state("count-3", {**base, "topology.state.provider": name})
        assert isinstance(state._store, MemoryStore)
    sqlite = open_state("count-3", {**base, "topology.state.provider": "sqlite"})
    assert isinstance(sqlite._store, SqliteStore)
    assert sqlite._store.path == tmp_path / "state" / "wc" / "count-3.sqlite3", "under storm.local.dir by default"
    settings = json.dumps({"directory": str(tmp_path / "elsewhere")})  # Storm writes the config as a JSON string
    moved = open_state("count-3", {**base, "topology.state.provider": "sqlite", "topology.state.provider.config": settings})
    assert moved._store.path == tmp_path / "elsewhere" / "count-3.sqlite3"  # type: ignore[attr-defined]


def test_a_provider_misconfigured_says_what_to_fix(tmp_path: Path) -> None:
    base = {"storm.local.dir": str(tmp_path), "topology.name": "wc"}
    with pytest.raises(StateError, match="'redis' is not a state provider: use one of 'memory', 'sqlite'"):
        open_state("count-3", {**base, "topology.state.provider": "redis"})
    with pytest.raises(StateError, match='takes only "directory"'):
        open_state("c-1", {**base, "topology.state.provider": "sqlite", "topology.state.provider.config": {"dir": "x"}})
    with pytest.raises(StateError, match="not valid JSON"):
        open_state("c-1", {**base, "topology.state.provider": "sqlite", "topology.state.provider.config": "{dir"})
    (tmp_path / "file").write_text("")
    with pytest.raises(StateError, match="cannot open the state file .* must be a writable directory"):
        open_state("c-1", {**base, "topology.state.provider": "sqlite",
                           "topology.state.provider.config": {"directory": str(tmp_path / "file")}})
