"""Stateful bolts in local mode: the checkpoint spout and stream a topology gets, exact counts, a failed
checkpoint rolled back and replayed, state kept by SQLite across a restart, and what submit refuses."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from squall.api.component import Bolt
from squall.api.dsl import Topology, TopologyError
from squall.api.windowing import WindowedBolt
from squall.core.system_ids import ACKER, CHECKPOINT_SPOUT, CHECKPOINT_STREAM, TOPOLOGY_MASTER
from squall.core.thrift import storm
from squall.dev.local import LocalTopology, compile_topology
from support import wait_until
from topologies import Forward, Numbers, StatefulCount, UnanchoredCount, stateful_count

FAST = {"task.heartbeat.frequency.secs": 0.05, "topology.state.checkpoint.interval.ms": 100}


def counts(local: LocalTopology) -> dict[str, int]:
    """Every key's count in the state of the ``count`` tasks."""
    merged: Counter[str] = Counter()
    for executor in local.tasks("count"):
        merged.update(dict(executor.state.items()))  # type: ignore[attr-defined]
    return dict(merged)


def all_acked(local: LocalTopology, count: int) -> None:
    numbers = local.component("numbers")
    wait_until(lambda: len(set(numbers.acked)) == count, 30, f"{count} numbers acked")


def test_a_topology_with_a_stateful_bolt_gets_the_checkpoint_spout_and_its_stream() -> None:
    layout, conf = compile_topology(stateful_count("wc", 10))
    assert layout.component_tasks == {CHECKPOINT_SPOUT: (1,), "numbers": (2,), "count": (3, 4), ACKER: (5,),
                                      TOPOLOGY_MASTER: (6,)}, "the checkpoint spout's task is 1, as in Storm"
    assert layout.fields(CHECKPOINT_SPOUT, CHECKPOINT_STREAM) == ("txid", "action")
    wider, _ = compile_topology(stateful_count("wc", 10, counters=5))
    assert wider.component_tasks[CHECKPOINT_SPOUT] == (1,), "so its state's namespace stays $checkpointspout-1"
    (subscription,) = layout.subscribers[(CHECKPOINT_SPOUT, CHECKPOINT_STREAM)]
    assert subscription.component == "count" and subscription.grouping.all is not None
    assert json.loads(json.dumps(layout.components["count"].conf))["squall.stateful"] is True
    assert conf["topology.state.provider"] == "memory", "Storm's default"

    plain = Topology("plain")
    numbers = plain.spout("numbers", Numbers, args=[10])
    plain.bolt("forward", Forward).shuffle(numbers)
    assert CHECKPOINT_SPOUT not in compile_topology(plain)[0].components


def test_a_stateful_word_count_counts_every_input_exactly_once_without_failures() -> None:
    with LocalTopology(stateful_count("wc", 3000), FAST) as local:
        all_acked(local, 3000)
        assert counts(local) == {f"k{i}": 300 for i in range(10)}
        assert local.component("numbers").failed == []
        for executor in local.tasks("count"):
            hooks = executor.bolt.hooks  # type: ignore[attr-defined]
            assert hooks[0] == ("init_state", None), "init_state before anything else"
            steps = hooks[1:]
            assert [name for name, _ in steps[: len(steps) // 2 * 2]] == ["pre_prepare", "pre_commit"] * (len(steps) // 2)
            assert [txid for _, txid in steps[::2]] == list(range(len(steps[::2]))), "txids 0, 1, 2..."
        assert local.errors == []


@pytest.mark.parametrize("batches", [False, True], ids=["execute", "execute_batch"])
def test_a_failed_checkpoint_rolls_every_task_back_and_the_replays_restore_exact_counts(batches: bool) -> None:
    with LocalTopology(stateful_count("wc", 3000, fail_prepares=1, batches=batches), FAST) as local:
        all_acked(local, 3000)
        assert counts(local) == {f"k{i}": 300 for i in range(10)}, "no input lost, none counted twice"
        assert local.component("numbers").failed, "the inputs whose changes were rolled back were failed, and replayed"
        for executor in local.tasks("count"):
            assert ("pre_rollback", None) in executor.bolt.hooks, "the rollback reached every task"  # type: ignore[attr-defined]
        assert any("pre_prepare of txid" in text for _, text in local.errors), "the failure is reported"


def test_a_stateful_bolt_may_not_emit_unanchored() -> None:
    t = Topology("wc")
    numbers = t.spout("numbers", Numbers, args=[10])
    t.bolt("count", UnanchoredCount).fields(numbers, "key")
    with LocalTopology(t, FAST) as local:
        wait_until(lambda: local.errors, 10, "the emit refused")
        assert "bolt 'count' is stateful, so it must emit anchored tuples" in local.errors[0][1]


def test_sqlite_state_is_recovered_when_the_topology_starts_again(tmp_path: Path) -> None:
    conf = {**FAST, "storm.local.dir": str(tmp_path), "topology.state.provider": "sqlite"}
    for run in (1, 2):
        with LocalTopology(stateful_count("wc", 1000), conf) as local:
            all_acked(local, 1000)
            assert counts(local) == {f"k{i}": 100 * run for i in range(10)}
    assert sorted(p.name for p in (tmp_path / "state" / "wc").glob("*.sqlite3")) == [
        "$checkpointspout-1.sqlite3", "count-3.sqlite3", "count-4.sqlite3"]


@pytest.mark.parametrize(("conf", "message"), [
    ({"topology.acker.executors": 0},
     "bolt \"count\" is stateful, and topology.acker.executors is 0: checkpoints and the acks a stateful bolt holds "
     "until its state commits need ackers"),
    ({"topology.state.checkpoint.interval.ms": 5000, "topology.message.timeout.secs": 5},
     "topology.state.checkpoint.interval.ms (5000) is not below topology.message.timeout.secs (5 s)"),
    ({"topology.state.provider.config": "[1]"}, "topology.state.provider.config must be a JSON object"),
    ({"topology.state.provider": "redis"}, "topology.state.provider"),
])
def test_submit_refuses_what_a_stateful_topology_cannot_run_with(conf: dict[str, Any], message: str) -> None:
    with pytest.raises((storm.InvalidTopologyException, TopologyError)) as refused:
        compile_topology(stateful_count("wc", 10, conf=conf))
    assert message in str(refused.value.msg if isinstance(refused.value, storm.InvalidTopologyException)
                          else refused.value)


def test_only_a_stateful_bolt_is_marked_stateful() -> None:
    t = Topology("wc")
    numbers = t.spout("numbers", Numbers, args=[10])
    with pytest.raises(TopologyError, match="Forward is not a StatefulBolt, so its conf cannot set squall.stateful"):
        t.bolt("forward", Forward, conf={"squall.stateful": True}).shuffle(numbers)
    both = type("WindowedCount", (StatefulCount, WindowedBolt), {"execute": StatefulCount.execute})
    with pytest.raises(TopologyError, match="is both a StatefulBolt and a WindowedBolt"):
        t.bolt("both", both).shuffle(numbers)
    topology, _ = stateful_count("wc", 10).build()
    assert json.loads(topology.bolts["count"].common.json_conf)["squall.stateful"] is True
    assert issubclass(StatefulCount, Bolt)
