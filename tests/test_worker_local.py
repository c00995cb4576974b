"""The worker runtime in local mode: groupings, Storm's acking semantics, activation, errors, ticks.

Local mode runs the same executors, groupings and acker as a cluster worker, with every task in this
process, so these tests read the components' own attributes. Waits are on conditions with deadlines;
"never happens" is checked over a window proven by the tasks' own heartbeats (their uptime grows).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from examples import wordcount
from squall.api.dsl import Topology
from squall.core.thrift import storm
from scenarios import expected_word_counts, word_counts
from support import two_workers, wait_until
from topologies import (GATES, BatchBoom, BatchForward, BatchOf, Blocked, Boom, Director, EmitTwice, EvenTwice, Forward, Gate, Holdout, Join, Keeper,
                        Metered, Mixed, Numbers, Paced, PacedBatch, Picky, Recorder, Reporter, RootsOf)
from squall.api.component import Spout
from squall.api.tuple import TupleBatch
from squall.core.system_ids import ACK_INIT_STREAM, ACKER
from squall.dev.local import LocalTopology, compile_topology
from worker.acker import Acker
from worker.executor.acking import ACK_INIT_FIELDS
from worker.executor.base import ExecutorEnv
from worker.executor.spout import SpoutExecutor
from worker.queues import Inbox, Outbox, Pressure, Routes, Wake
from worker.layout import place_all
from worker.runtime import TaskThread, WorkerFailed

FAST = {"task.heartbeat.frequency.secs": 0.05, "topology.message.timeout.secs": 30}


def run(topology: Topology, **conf: Any) -> LocalTopology:
    return LocalTopology(topology, {**FAST, **{k.replace("_", "."): v for k, v in conf.items()}})


def seen_by_task(local: LocalTopology, component: str) -> dict[int, list[tuple[Any, ...]]]:
    return {e.task: [values for _, _, values in e.bolt.seen] for e in local.tasks(component)}


def total_seen(local: LocalTopology, component: str) -> int:
    return sum(len(e.bolt.seen) for e in local.tasks(component))


def let_time_pass(local: LocalTopology, component: str, secs: int = 1) -> None:
    """Wait until ``component``'s first task has reported ``secs`` more seconds of uptime: a window in which
    its executor demonstrably kept running, to check that something did *not* happen."""
    task = local.layout.component_tasks[component][0]
    start = wait_until(lambda: local.beats.get(task), 10, f"a heartbeat from {component}").uptime_secs
    wait_until(lambda: local.beats[task].uptime_secs >= start + secs, 10 + secs, f"{secs}s of {component} uptime")


# -- word count ---------------------------------------------------------------------------------


def test_word_count_counts_are_exact() -> None:
    rounds = 40
    expected = expected_word_counts(rounds)

    sentences = rounds * len(wordcount.SENTENCES)
    with run(wordcount.topology(rounds=rounds)) as local:
        wait_until(lambda: word_counts(local) == expected, 20, "exact word counts")
        wait_until(lambda: sum(e.stats.acked for e in local.tasks("sentences")) == sentences, 20, "every sentence acked")
        assert sum(e.stats.failed for e in local.tasks("sentences")) == 0

        def total(component: str, stat: str) -> Counter[str]:
            result: Counter[str] = Counter()
            for executor in local.tasks(component):
                result.update(getattr(executor.task_stats(), stat))
            return result

        words = sum(expected.values())
        assert total("sentences", "emitted") == {"default": sentences}
        assert total("sentences", "acked") == {"default": sentences}
        assert total("split", "executed") == total("split", "acked") == {"sentences:default": sentences}
        assert total("split", "emitted") == total("split", "transferred") == {"default": words}
        assert total("count", "executed") == {"split:default": words}
        assert set(total("sentences", "latency_ms")) == {"default"}, "complete latency is sampled per stream"
        assert set(total("split", "latency_ms")) == {"sentences:default"}, "execute latency per input"


# -- groupings ----------------------------------------------------------------------------------


def test_fields_grouping_sends_each_key_to_one_task() -> None:
    t = Topology("fields")
    numbers = t.spout("numbers", Numbers, args=[2000, 50], parallelism=2)
    t.bolt("sink", Recorder, parallelism=4).fields(numbers, "key")
    with run(t) as local:
        wait_until(lambda: total_seen(local, "sink") == 2000, 20, "every tuple delivered")
        owner: dict[str, set[int]] = {}
        for task, values in seen_by_task(local, "sink").items():
            for key, _ in values:
                owner.setdefault(key, set()).add(task)
        assert len(owner) == 50 and all(len(tasks) == 1 for tasks in owner.values())
        assert len({next(iter(t)) for t in owner.values()}) == 4, "50 keys spread over all 4 tasks"


def test_partial_key_grouping_spreads_a_hot_key_over_two_tasks() -> None:
    t = Topology("partial-key")
    t.bolt("sink", Recorder, parallelism=4).partial_key(t.spout("numbers", Numbers, args=[200, 1]), "key")
    with run(t) as local:
        wait_until(lambda: total_seen(local, "sink") == 200, 10, "every tuple at the sink")
        loads = sorted(len(seen) for seen in seen_by_task(local, "sink").values())
        assert loads == [0, 0, 100, 100], "one key, one emitter: two tasks, exactly half each"


def test_all_grouping_reaches_every_task() -> None:
    t = Topology("all")
    t.bolt("sink", Recorder, parallelism=3).all(t.spout("numbers", Numbers, args=[100]))
    with run(t) as local:
        wait_until(lambda: total_seen(local, "sink") == 300, 20, "100 tuples at each of 3 tasks")
        assert all(sorted(n for _, n in v) == list(range(100)) for v in seen_by_task(local, "sink").values())
        stats = local.tasks("numbers")[0].task_stats()
        assert (stats.emitted, stats.transferred) == ({"default": 100}, {"default": 300}), "a copy per task"


def test_shuffle_over_two_tasks_is_even() -> None:
    t = Topology("shuffle", conf={"topology.acker.executors": 0})
    t.bolt("sink", Recorder, parallelism=2).shuffle(t.spout("numbers", Numbers, args=[100_000], kwargs={"reliable": False}))
    with run(t) as local:
        wait_until(lambda: total_seen(local, "sink") == 100_000, 60, "100,000 tuples")
        shares = [len(v) / 100_000 for v in seen_by_task(local, "sink").values()]
        assert all(0.49 <= share <= 0.51 for share in shares), shares


def test_direct_grouping_delivers_to_the_named_task() -> None:
    t = Topology("direct")
    director = t.bolt("director", Director, args=["sink", 1]).shuffle(t.spout("numbers", Numbers, args=[20]))
    t.bolt("sink", Recorder, parallelism=3).direct(director, stream="direct")
    with run(t) as local:
        named = local.layout.component_tasks["sink"][1]
        wait_until(lambda: total_seen(local, "sink") == 20, 20, "20 direct tuples")
        assert {task: len(v) for task, v in seen_by_task(local, "sink").items()} == {
            task: (20 if task == named else 0) for task in local.layout.component_tasks["sink"]}


def test_global_grouping_goes_to_the_lowest_task() -> None:
    t = Topology("global")
    t.bolt("sink", Recorder, parallelism=3).global_(t.spout("numbers", Numbers, args=[30], parallelism=2))
    with run(t) as local:
        lowest = min(local.layout.component_tasks["sink"])
        wait_until(lambda: total_seen(local, "sink") == 30, 20, "30 tuples")
        assert [task for task, v in seen_by_task(local, "sink").items() if v] == [lowest]


# -- acking -------------------------------------------------------------------------------------


def test_branch_and_join_is_acked_once_and_only_after_both_branches() -> None:
    GATES.pop("join", None)
    t = Topology("join")
    numbers = t.spout("numbers", Numbers, args=[1])
    a = t.bolt("a", Forward).shuffle(numbers)
    b = t.bolt("b", Gate, args=["join"], conf={"topology.tick.tuple.freq.secs": 0.05}).shuffle(numbers)
    join = t.bolt("join", Join).fields(a, "n").fields(b, "n")
    t.bolt("sink", Recorder).shuffle(join)
    with run(t) as local:
        spout, joiner = local.component("numbers"), local.component("join")
        wait_until(lambda: len(joiner.parts) == 1, 10, "the first branch at the join")
        let_time_pass(local, "numbers")
        assert spout.acked == [] and spout.failed == [], "one branch done is not the tree done"
        GATES["join"].set()
        wait_until(lambda: spout.acked == [0], 10, "the tree acked after both branches")
        let_time_pass(local, "numbers")
        assert spout.acked == [0] and spout.failed == [] and joiner.joined == [0]
        assert len(local.tasks("__acker")[0].state) == 0 and len(local.tasks("numbers")[0].pending) == 0
        stats = local.tasks("join")[0].task_stats()
        assert stats.executed == stats.acked == {"a:default": 1, "b:default": 1}, "a join's stats are per input"
        assert set(stats.latency_ms) == {"a:default", "b:default"} and stats.emitted == {"default": 1}


def test_rows_emitted_for_a_whole_batch_hold_every_tree_of_the_batch_until_they_are_acked() -> None:
    """emit_batch's shared edge (anchors with roots of their own) and per-anchor edges (two tuples of one
    tree in the batch), and the bulk acks of a 30-root tuple: no tree completes early, all complete."""
    GATES.pop("batch", None)
    t = Topology("batch")
    numbers = t.spout("numbers", Numbers, args=[20])
    twice = t.bolt("twice", EvenTwice).shuffle(numbers)
    batch = t.bolt("batch", BatchOf, args=[30, 3]).global_(twice)
    gate = t.bolt("gate", Gate, args=["batch"], conf={"topology.tick.tuple.freq.secs": 0.05}).shuffle(batch)
    t.bolt("sink", Recorder).shuffle(gate)
    with run(t) as local:
        spout = local.component("numbers")
        wait_until(lambda: len(local.component("gate").held) == 3, 10, "the batch's rows held at the gate")
        let_time_pass(local, "numbers")
        assert spout.acked == [] and spout.failed == [], "the batch acked, its rows not yet: no tree is done"
        GATES["batch"].set()
        wait_until(lambda: sorted(spout.acked) == list(range(20)), 10, "every tree acked once the rows are")
        assert spout.failed == [] and len(local.tasks("__acker")[0].state) == 0
        assert sorted(values for _, _, values in local.component("sink").seen) == [("b1", 0), ("b1", 1), ("b1", 2)]


def test_an_unacked_tuple_fails_after_the_timeout_while_its_siblings_are_acked() -> None:
    # 3 s: the siblings' acks (milliseconds) must come before it even when a busy host stalls this process a while
    t = Topology("timeout", conf={"topology.message.timeout.secs": 3})
    t.bolt("holdout", Holdout, args=[[3]]).shuffle(t.spout("numbers", Numbers, args=[10]))
    with run(t, topology_message_timeout_secs=3) as local:
        spout = local.component("numbers")
        wait_until(lambda: sorted(spout.acked) == [0, 1, 2, 4, 5, 6, 7, 8, 9], 10, "the siblings acked")
        assert 3 not in spout.failed, "not failed before the message timeout"
        wait_until(lambda: 3 in spout.failed, 20, "the held tuple to time out")
        assert 3 not in spout.acked and set(spout.failed) == {3}


def keeper_topology(reset: bool) -> Topology:
    """One reliable tuple held by a Keeper for 3 message timeouts (2 s each), with or without reset_timeout."""
    t = Topology("keeper")
    t.bolt("keeper", Keeper, args=[6.0, reset], conf={"topology.tick.tuple.freq.secs": 0.25}).shuffle(
        t.spout("numbers", Numbers, args=[1]))
    return t


def test_reset_timeout_keeps_a_held_tuple_alive_past_the_message_timeout() -> None:
    """Storm's resetTimeout: the acker and the spout both restart the tree's timer, so the tree held for three
    timeouts is acked, not failed (either timer alone would fail it after 2-3 s)."""
    with run(keeper_topology(reset=True), topology_message_timeout_secs=2) as local:
        spout, keeper = local.component("numbers"), local.component("keeper")
        wait_until(lambda: spout.acked == [0], 20, "the held tuple acked")
        assert spout.failed == [] and keeper.held_for[0][1] >= 6.0, "acked after 3 timeouts, never failed"
        assert len(local.tasks("__acker")[0].state) == 0 and len(local.tasks("numbers")[0].pending) == 0


def test_without_reset_timeout_the_same_hold_fails_the_tuple() -> None:
    with run(keeper_topology(reset=False), topology_message_timeout_secs=2) as local:
        spout = local.component("numbers")
        wait_until(lambda: spout.failed, 10, "the held tuple to time out")
        assert spout.failed == [0] and spout.acked == []


def test_process_latency_runs_from_execute_to_the_ack() -> None:
    """Storm's process latency: a bolt that holds each input 0.1 s before acking it shows at least that, while
    its execute latency stays small; an auto-ack bolt's process latency is its execute latency's order."""
    t = Topology("process-latency")
    numbers = t.spout("numbers", Paced, args=[200])
    t.bolt("keeper", Keeper, args=[0.1, False], conf={"topology.tick.tuple.freq.secs": 0.01}).shuffle(numbers)
    t.bolt("sink", Recorder).shuffle(numbers)
    with run(t, topology_stats_sample_rate=1.0) as local:
        keeper, sink = local.tasks("keeper")[0], local.tasks("sink")[0]
        wait_until(lambda: keeper.stats.processed >= 20 and sink.stats.processed >= 20, 20, "20 acks timed each")
        held, auto = keeper.task_stats(), sink.task_stats()
        assert held.process_ms["numbers:default"] >= 100 > 10 > held.latency_ms["numbers:default"]
        assert 0.1 < auto.process_ms["numbers:default"] / auto.latency_ms["numbers:default"] < 10
        assert held.processed["numbers:default"] <= held.acked["numbers:default"], "sampled: each ack at most once"


def test_a_batch_bolt_s_acked_rows_each_take_their_call_s_time_as_process_latency() -> None:
    t = Topology("batch-process-latency")
    t.bolt("forward", BatchForward).shuffle(t.spout("numbers", Numbers, args=[2000]))
    with run(t, topology_stats_sample_rate=1.0) as local:  # every batch sampled
        forward = local.tasks("forward")[0]
        wait_until(lambda: forward.stats.acked == 2000, 20, "every row acked")
        stats = forward.task_stats()
        assert stats.processed == stats.acked == {"numbers:default": 2000}, "every row auto-acked in its call"
        assert stats.process_ms["numbers:default"] >= stats.latency_ms["numbers:default"] > 0, "a call per batch"


def test_a_topology_started_inactive_never_calls_next_tuple_until_activated() -> None:
    t = Topology("inactive")
    t.bolt("sink", Recorder).shuffle(t.spout("numbers", Numbers, args=[10]))
    with LocalTopology(t, FAST, active=False) as local:
        spout = local.component("numbers")
        let_time_pass(local, "numbers")
        assert spout.calls == 0 and spout.events == []
        local.activate()
        wait_until(lambda: total_seen(local, "sink") == 10, 10, "tuples once active")
        assert spout.events == ["activate"]
        local.deactivate()
        wait_until(lambda: spout.events == ["activate", "deactivate"], 10, "deactivate called")
        calls = spout.calls
        let_time_pass(local, "numbers")
        assert spout.calls == calls, "no next_tuple while inactive"


def test_max_spout_pending_caps_tuples_in_flight() -> None:
    t = Topology("pending", conf={"topology.max.spout.pending": 5})
    t.bolt("holdout", Holdout, args=[list(range(100))]).shuffle(t.spout("numbers", Numbers, args=[100]))
    with run(t) as local:
        pending = local.tasks("numbers")[0].pending
        wait_until(lambda: len(pending) == 5, 10, "5 tuples in flight")
        let_time_pass(local, "numbers")
        assert len(pending) == 5 and local.tasks("holdout")[0].stats.executed == 5


def test_without_ackers_tuples_are_acked_as_they_are_emitted() -> None:
    t = Topology("no-ackers", conf={"topology.acker.executors": 0})
    t.bolt("sink", Holdout, args=[list(range(50))]).shuffle(t.spout("numbers", Numbers, args=[50]))
    with run(t) as local:
        assert "__acker" not in local.layout.components
        wait_until(lambda: sorted(local.component("numbers").acked) == list(range(50)), 10, "acked at emit")


def test_emitting_with_the_same_anchor_twice_still_acks_the_tree_once() -> None:
    t = Topology("twice")
    twice = t.bolt("twice", EmitTwice).shuffle(t.spout("numbers", Numbers, args=[20]))
    t.bolt("sink", Recorder).shuffle(twice)
    with run(t) as local:
        spout = local.component("numbers")
        wait_until(lambda: sorted(spout.acked) == list(range(20)), 10, "every tree acked")
        assert spout.failed == [] and len(local.tasks("__acker")[0].state) == 0


def test_emits_to_a_stream_nobody_subscribes_to_are_counted_and_their_trees_complete() -> None:
    t = Topology("dead-end")
    t.bolt("forward", Forward).shuffle(t.spout("numbers", Numbers, args=[50]))
    t.spout("unheard", Numbers, args=[30], kwargs={"reliable": False})
    with run(t) as local:
        wait_until(lambda: sorted(local.component("numbers").acked) == list(range(50)), 10, "every tree acked")
        unheard = local.tasks("unheard")[0]
        wait_until(lambda: unheard.stats.emitted == 30, 10, "the unheard spout's emits")
        assert local.component("numbers").failed == []
        for component, count in [("forward", 50), ("unheard", 30)]:
            stats = local.tasks(component)[0].task_stats()
            assert (stats.emitted, stats.transferred) == ({"default": count}, {}), component


def test_across_two_workers_each_spouts_roots_are_its_own_and_owned_by_the_acker_beside_it() -> None:
    """Two workers in this process over TCP, each with a spout task, a bolt task and an acker; shuffle sends
    tuples (and so acks) both ways. Every tree completes once, root ids never repeat across the spout tasks,
    and each root belongs (``root % ackers``) to the acker in its spout's worker: inits and completions stay
    local, only the bolts' acks cross."""
    t = Topology("two-workers", conf={"topology.acker.executors": 2})
    t.bolt("roots", RootsOf, parallelism=2).shuffle(t.spout("numbers", Numbers, args=[400], parallelism=2))
    layout, conf = compile_topology(t, FAST)
    ackers = layout.component_tasks["__acker"]
    halves = [{layout.component_tasks[c][i] for c in ("numbers", "roots", "__acker")} for i in (0, 1)]
    halves[0].update(layout.component_tasks["__topology_master"])
    with two_workers(layout, conf, halves) as runtimes:
        spouts = [runtimes[i].executors[task].spout for i, task in enumerate(layout.component_tasks["numbers"])]
        wait_until(lambda: sorted(spouts[0].acked + spouts[1].acked) == list(range(400)), 20, "every tree acked")
        assert spouts[0].failed == spouts[1].failed == []
        roots = {n: r for i, task in enumerate(layout.component_tasks["roots"])
                 for n, r in runtimes[i].executors[task].bolt.roots.items()}
        assert sorted(roots) == list(range(400)) and all(len(r) == 1 for r in roots.values())
        assert len({r[0] for r in roots.values()}) == 400, "no root id twice"
        crossed = [n for i, task in enumerate(layout.component_tasks["roots"])
                   for n in runtimes[i].executors[task].bolt.roots if n % 2 != i]
        assert crossed, "some trees were acked from the other worker"
        for n, (root,) in roots.items():
            owner = ackers[root % len(ackers)]
            assert owner in halves[n % 2], f"root of {n} (spout task {n % 2}) owned by acker {owner} elsewhere"


# -- errors and ticks ---------------------------------------------------------------------------


def test_a_bolt_exception_fails_its_tuple_is_reported_and_the_worker_goes_on() -> None:
    t = Topology("boom")
    boom = t.bolt("boom", Boom, args=[5]).shuffle(t.spout("numbers", Numbers, args=[20]))
    t.bolt("sink", Recorder).shuffle(boom)
    with run(t) as local:
        spout = local.component("numbers")
        wait_until(lambda: {0, 5, 10, 15} <= set(spout.failed), 10, "the failing tuples failed")
        wait_until(lambda: sorted(spout.acked) == [n for n in range(20) if n % 5], 10, "the others acked")
        task = local.layout.component_tasks["boom"][0]
        assert any(t == task and "RuntimeError: boom on" in text for t, text in local.errors)
        assert local.runtime.failure is None


def test_failures_are_counted_by_reason_at_the_bolt_and_at_the_spout() -> None:
    """A bolt's failures split into exceptions and explicit fails; its spout sees both as trees a bolt failed,
    and a held tuple as a timeout. Each number fails once (replays are acked), so the counts are exact."""
    t = Topology("reasons")
    t.bolt("picky", Picky).shuffle(t.spout("numbers", Numbers, args=[30]))
    with run(t, topology_message_timeout_secs=2) as local:
        spout = local.component("numbers")
        wait_until(lambda: sorted(spout.acked) == list(range(30)), 20, "every number acked in the end")
        bolt, trees = local.tasks("picky")[0].task_stats(), local.tasks("numbers")[0].task_stats()
        assert bolt.failed_by_reason == {"exception": 3, "explicit": 3} and bolt.failed == {"numbers:default": 6}
        assert trees.failed_by_reason == {"explicit": 6, "timeout": 1} and trees.failed == {"default": 7}


def test_a_per_tuple_bolt_s_automatic_acks_complete_each_tree_once_beside_its_own_acks_and_fails() -> None:
    """The runtime makes a per-tuple bolt's automatic acks all at once after each batch of inputs: each tree still
    completes once its every tuple is acked, what was emitted anchored to the input included (the sink holds every
    tenth number's copy: those trees stay open), beside the inputs the bolt acked or failed itself (a failed one is
    replayed, then acked), and each input is counted once."""
    held = list(range(5, 600, 10))
    t = Topology("mixed", conf={"topology.stats.sample.rate": 0.001})  # only the first batch timed: no ack per call
    mixed = t.bolt("mixed", Mixed).shuffle(t.spout("numbers", Numbers, args=[600]))
    t.bolt("sink", Holdout, args=[held]).shuffle(mixed)
    with run(t) as local:
        spout = local.component("numbers")
        done = sorted(set(range(600)) - set(held))
        wait_until(lambda: sorted(spout.acked) == done, 10, "every tree not held acked in the end")
        assert sorted(spout.failed) == list(range(1, 600, 3)), "each hand-failed input failed its tree once"
        stats = local.tasks("mixed")[0].task_stats()  # 600 inputs and 200 replays
        assert stats.acked == {"numbers:default": 600} and stats.failed == {"numbers:default": 200}
        let_time_pass(local, "mixed")
        assert sorted(spout.acked) == done, "a held copy's tree is never acked"


def test_an_execute_batch_exception_counts_its_rows_as_exception_failures() -> None:
    t = Topology("batch-reasons")
    t.bolt("boom", BatchBoom, args=[7]).shuffle(t.spout("numbers", Numbers, args=[50]))
    with run(t) as local:
        spout = local.component("numbers")
        wait_until(lambda: sorted(spout.acked) == list(range(50)), 20, "every number acked in the end")
        stats = local.tasks("boom")[0].task_stats()
        assert stats.failed_by_reason == {"exception": sum(stats.failed.values())} and stats.failed


def test_user_metrics_are_read_at_each_heartbeat() -> None:
    t = Topology("metered")
    t.bolt("metered", Metered).shuffle(t.spout("numbers", Numbers, args=[100]))
    with run(t) as local:
        wait_until(lambda: sorted(local.component("numbers").acked) == list(range(100)), 20, "every number acked")
        stats = local.tasks("metered")[0].task_stats()
        assert stats.user_counters == {"seen": 100, "n.sizes.count": 100}
        assert stats.user_gauges["n.sizes.max"] == 99 and stats.user_gauges["n.sizes.min"] == 0
        assert stats.user_gauges["last.n"] in range(100)


def test_report_error_is_recorded_for_the_task() -> None:
    t = Topology("report")
    t.bolt("reporter", Reporter).shuffle(t.spout("numbers", Numbers, args=[1]))
    with run(t) as local:
        task = local.layout.component_tasks["reporter"][0]
        wait_until(lambda: (task, "bad input 0") in local.errors, 10, "the reported error")


def test_errors_are_throttled_per_task() -> None:
    t = Topology("throttle")
    t.bolt("reporter", Reporter).shuffle(t.spout("numbers", Numbers, args=[50]))
    with run(t, topology_max_error_report_per_interval=3) as local:
        wait_until(lambda: sorted(local.component("numbers").acked) == list(range(50)), 10, "all processed")
        assert len(local.errors) == 3, "3 errors per 10 s interval reach the error store"


def test_exit_on_error_stops_the_worker() -> None:
    t = Topology("fatal")
    t.bolt("boom", Boom, args=[1]).shuffle(t.spout("numbers", Numbers, args=[1]))
    with run(t, topology_worker_exit_on_error=True) as local:
        wait_until(lambda: local.runtime.failed.is_set(), 10, "the worker to fail")
        assert "boom on 0" in repr(local.runtime.failure)


def test_tick_tuples_arrive_at_the_configured_rate() -> None:
    t = Topology("ticks")
    t.bolt("sink", Recorder, conf={"topology.tick.tuple.freq.secs": 0.1}).shuffle(
        t.spout("numbers", Numbers, args=[0]))
    with run(t) as local:
        sink = local.component("sink")
        wait_until(lambda: sum(1 for s in sink.seen if s[0] == "__tick") >= 3, 10, "three ticks")
        assert all(values == (0.1,) for c, _, values in sink.seen if c == "__tick")


def test_ticks_are_an_input_stream_of_their_own_in_the_stats() -> None:
    # Storm: a tick goes through execute and is counted, executed and acked, under __system:__tick; the
    # ordinary inputs' executed and acked agree, and the UI leaves the system stream out of its totals.
    t = Topology("tick-stats")
    t.bolt("sink", Recorder, conf={"topology.tick.tuple.freq.secs": 0.05}).shuffle(
        t.spout("numbers", Numbers, args=[100]))
    with run(t) as local:
        sink = local.component("sink")
        wait_until(lambda: len(local.component("numbers").acked) == 100 and len(sink.tick_times) >= 3, 10,
                   "every number acked, three ticks")
        stats = local.tasks("sink")[0].task_stats()
        ticks = stats.executed["__system:__tick"]
        assert ticks >= 3
        assert stats.executed == {"numbers:default": 100, "__system:__tick": ticks}
        assert stats.acked in ({"numbers:default": 100, "__system:__tick": ticks},
                               {"numbers:default": 100, "__system:__tick": ticks + 1})  # a tick between the reads


def test_ticks_come_on_time_when_nothing_else_wakes_the_task_thread() -> None:
    # Inactive, with rare heartbeats: the bolt has no input, and only its tick is due this often.
    t = Topology("quiet-ticks")
    t.bolt("sink", Recorder, conf={"topology.tick.tuple.freq.secs": 0.04}).shuffle(
        t.spout("numbers", Numbers, args=[0]))
    with LocalTopology(t, {**FAST, "task.heartbeat.frequency.secs": 10}, active=False) as local:
        sink = local.component("sink")
        ticks = wait_until(lambda: len(sink.tick_times) >= 11 and sink.tick_times[:11], 10, "eleven ticks")
        mean_gap = (ticks[10] - ticks[0]) / 10
        assert 0.039 <= mean_gap < 0.07, f"a tick every {mean_gap:.3f}s, configured 0.04s"


# -- idle means idle ----------------------------------------------------------------------------


@pytest.mark.parametrize("wait_ms", [1, 5])
def test_a_spout_ahead_of_its_rate_is_called_once_per_idle_wait_while_acks_flow(wait_ms: int) -> None:
    # Storm's sleep wait strategy: after a next_tuple that emits nothing the spout waits
    # topology.sleep.spout.wait.strategy.time.ms, even though the acks of what it emitted keep its task thread busy.
    t = Topology("paced")
    t.bolt("sink", Recorder).shuffle(t.spout("paced", Paced, args=[5000]))
    with run(t, **{"topology.sleep.spout.wait.strategy.time.ms": wait_ms}) as local:
        spout, executor = local.component("paced"), local.tasks("paced")[0]
        wait_until(lambda: executor.stats.acked > 1000, 10, "acks flowing")
        calls, emitted, acked, started = spout.calls, spout.emitted, executor.stats.acked, time.monotonic()
        let_time_pass(local, "paced")
        idle_calls = (spout.calls - calls) - (spout.emitted - emitted)
        waits = (time.monotonic() - started) / (wait_ms / 1000)
        assert executor.stats.acked - acked > 1000, "acks flowed during the window"
        assert idle_calls <= 1.2 * waits, f"{idle_calls} calls that emitted nothing in {waits:.0f} idle waits"


def test_a_round_whose_tuples_went_to_executors_after_their_emitter_is_not_repeated() -> None:
    # The spout's tuples reach its bolt (stepped after it) in the same round; the thread then sleeps out the spout's
    # wait. It used to run a second, empty round first whenever its own tasks got tuples: twice the rounds.
    t = Topology("paced-rounds")
    t.bolt("sink", Recorder).shuffle(t.spout("paced", Paced, args=[5000]))
    with run(t, **{"topology.acker.executors": 0}) as local:
        spout, pressure = local.component("paced"), local.runtime.pressure
        rounds = [0]
        fill = pressure._fill  # every round asks it once (Pressure.update)

        def counted() -> float:
            rounds[0] += 1
            return fill()

        pressure._fill = counted
        wait_until(lambda: rounds[0] > 100, 10, "rounds counted")
        calls, emitted, before = spout.calls, spout.emitted, rounds[0]
        let_time_pass(local, "paced")
        steps = (spout.calls - calls) - (spout.emitted - emitted)  # each step ends with a call that emits nothing
        assert spout.emitted - emitted > 1000, "the spout kept emitting"
        assert rounds[0] - before <= 1.2 * steps + 100, f"{rounds[0] - before} rounds for {steps} spout steps"


def test_a_batch_spout_that_emits_all_it_has_is_called_once_per_idle_wait() -> None:
    # A short batch (fewer rows than asked for) is all the spout had: it backs off as after an empty next_tuple,
    # and does not spin on a row or two at a time (a paced batch spout kept a whole core busy).
    t = Topology("paced-batch")
    t.bolt("sink", Recorder).shuffle(t.spout("paced", PacedBatch, args=[20_000]))
    with run(t) as local:
        spout, executor = local.component("paced"), local.tasks("paced")[0]
        wait_until(lambda: executor.stats.acked > 1000, 10, "acks flowing")
        calls, emitted, started = spout.calls, spout.emitted, time.monotonic()
        let_time_pass(local, "paced")
        waits = (time.monotonic() - started) / (local.conf["topology.sleep.spout.wait.strategy.time.ms"] / 1000)
        full = (spout.emitted - emitted) / local.conf["topology.transfer.batch.size"]
        assert spout.emitted - emitted > 10_000, "the spout kept its rate"
        assert spout.calls - calls <= 1.2 * (waits + full), f"{spout.calls - calls} calls in {waits:.0f} idle waits"


class Tap(Spout):
    """Emits ``(n,)`` once per call while ``open_rows`` says so (a queue with messages), nothing otherwise."""

    outputs = ["n"]

    def __init__(self) -> None:
        self.calls, self.open_rows = 0, False

    def next_tuple(self) -> None:
        self.calls += 1
        if self.open_rows:
            self.emit([self.calls])


def spout_alone(topology: Topology, **conf: Any) -> SpoutExecutor:
    """The topology's spout task as an executor this test steps itself, at the times it chooses (``step(now)``)."""
    layout, full = compile_topology(topology, {**FAST, "topology.acker.executors": 0, **conf})
    (task,) = layout.component_tasks["tap"]
    wake = Wake()
    pressure = Pressure(lambda: 0.0, enabled=False, high=0.9, low=0.4)
    env = ExecutorEnv(layout.topology_id, lambda *_: None, pressure, lambda exc: None, lambda beats: None)
    executor = SpoutExecutor(task, layout, place_all(layout), Outbox(Routes({}), wake), Inbox(100, wake), env)
    executor.start()
    executor.set_active(True)
    return executor


def test_a_wake_set_by_another_thread_while_its_waiter_returns_does_not_raise() -> None:
    """A task thread died of "release unlocked lock" in a CI run (under load): another thread's ``set`` landed
    between the waiter's acquire and release. Thread switches every microsecond make that window common."""
    wake, stop, errors = Wake(), threading.Event(), []

    def setter() -> None:
        while not stop.is_set():
            wake.set()

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=setter)
    thread.start()
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not errors:
            try:
                assert wake.wait(1.0), "set all the time: a wait returns set"
            except RuntimeError as exc:
                errors.append(exc)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(switch)
    assert errors == []


def test_a_task_thread_that_dies_fails_its_worker() -> None:
    """A dead task thread used to leave its worker a zombie (alive, beating locally, its tasks silent)."""
    failures: list[BaseException] = []
    thread = TaskThread("tasks", Pressure(lambda: 0.0, enabled=False, high=0.9, low=0.4),
                        Routes({}), failures.append)
    thread.start()
    thread.call(lambda: 1 // 0)
    thread.join(10)
    assert not thread.is_alive()
    (failure,) = failures
    assert isinstance(failure, WorkerFailed) and "task thread tasks died: ZeroDivisionError" in str(failure)


@pytest.mark.parametrize("max_ms, waits", [(8, [1, 2, 4, 8, 8, 8]), (1, [1, 1, 1, 1, 1, 1])])
def test_a_spout_with_nothing_to_emit_waits_twice_as_long_each_time_up_to_the_max_and_from_the_start_once_it_emits(
        max_ms: int, waits: list[int]) -> None:
    t = Topology("quiet")
    t.bolt("sink", Recorder).shuffle(t.spout("tap", Tap))
    executor = spout_alone(t, **{"topology.sleep.spout.wait.strategy.max.time.ms": max_ms})
    tap, now, seen = executor.spout, 1000.0, []
    for _ in waits:
        calls = tap.calls
        wait = executor.step(now)
        assert tap.calls == calls + 1, "one call, which emitted nothing"
        assert executor.step(now + wait / 2) == pytest.approx(wait / 2) and tap.calls == calls + 1, \
            "not called again before its wait is over"
        seen.append(round(wait * 1000))
        now += wait
    assert seen == waits
    tap.open_rows = True
    assert executor.step(now) == 0.0 and executor.stats.emitted > 0, "rows again: no wait"
    tap.open_rows = False
    assert round(executor.step(now) * 1000) == 1, "the next quiet spell starts from the shortest wait"


def test_spouts_pause_while_a_receive_queue_is_over_the_high_water_mark_and_resume_once_it_drains() -> None:
    GATES.pop("pressure", None)
    t = Topology("pressure")
    t.bolt("slow", Blocked, args=["pressure"], conf={"squall.own.thread": True}).shuffle(
        t.spout("numbers", Numbers, args=[10**9], kwargs={"reliable": False}))
    with run(t, **{"topology.executor.receive.buffer.size": 1000, "topology.transfer.batch.size": 10}) as local:
        spout, slow = local.tasks("numbers")[0], local.tasks("slow")[0]
        try:
            wait_until(lambda: spout.stats.emitted >= 800, 10, "the blocked bolt's queue at the high water mark (0.8)")
            let_time_pass(local, "numbers")  # the spout's task keeps running (heartbeats), emitting nothing
            held = spout.stats.emitted
            let_time_pass(local, "numbers")
            assert spout.stats.emitted == held, "the spout emitted while the worker was backpressured"
            assert held <= 1000, f"{held} emitted: past the queue's capacity (a spout's step is at most 80 here)"
        finally:
            GATES["pressure"].set()
        wait_until(lambda: slow.bolt.executed > held + 10_000, 10, "the spout resumed once the queue drained")


def test_activation_reaches_a_spout_at_once_when_nothing_is_due() -> None:
    # Heartbeats every 10 s: an inactive spout's task has nothing due for up to a second.
    t = Topology("wake-on-activate")
    t.bolt("sink", Recorder).shuffle(t.spout("numbers", Numbers, args=[0]))
    with LocalTopology(t, {**FAST, "task.heartbeat.frequency.secs": 10}, active=False) as local:
        spout = local.component("numbers")
        for cycle in range(3):
            calls, started = spout.calls, time.monotonic()
            local.activate()
            wait_until(lambda: spout.calls > calls, 10, "next_tuple once active")
            assert time.monotonic() - started < 0.25, f"cycle {cycle}: next_tuple came late"
            local.deactivate()
            wait_until(lambda: spout.events.count("deactivate") == cycle + 1, 10, "deactivate called")


def test_a_bad_topology_is_refused_with_nimbus_words() -> None:
    t = Topology("bad")
    t.bolt("sink", Recorder).fields(t.spout("numbers", Numbers, args=[1]), "key")
    thrift, conf = t.build()
    thrift.bolts["sink"].common.inputs = {storm.GlobalStreamId("nope", "default"): storm.Grouping(shuffle=storm.NullStruct())}
    with pytest.raises(storm.InvalidTopologyException, match='unknown component "nope"'):
        LocalTopology((thrift, {**conf, "topology.name": "bad"}))


def test_a_component_that_cannot_start_fails_the_worker() -> None:
    t = Topology("no-start")
    t.bolt("sink", Holdout, args=[[]]).shuffle(t.spout("numbers", Numbers, args=[1]))
    thrift, conf = t.build()
    thrift.bolts["sink"].bolt_object.python_object.args_json = "[1, 2, 3]"  # Holdout takes one argument
    with LocalTopology((thrift, {**conf, "topology.name": "no-start"}), FAST) as local:
        assert local.runtime.failure is not None and "did not start" in str(local.runtime.failure)


# -- storm local --------------------------------------------------------------------------------

LOCAL_FILE = '''
from pathlib import Path
from squall.api.component import Bolt, Spout
from squall.dev.zookeeper import free_port
from squall.api.dsl import Topology

class Once(Spout):
    outputs = ["n"]
    def open(self, conf, context):
        self.sent = False
    def next_tuple(self):
        if not self.sent:
            self.sent = True
            self.emit([41], msg_id=1)

class Mark(Bolt):
    def __init__(self, path):
        self.path = path
    def execute(self, tup):
        Path(self.path).write_text(str(tup["n"] + 1))

def topology():
    t = Topology("marker")
    t.bolt("mark", Mark, args=[MARK]).shuffle(t.spout("once", Once))
    return t
'''


def test_storm_local_runs_a_topology_file_for_its_ttl(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    (tmp_path / "marker_topology.py").write_text(f"MARK = {str(mark)!r}\n" + LOCAL_FILE)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "squall.cli", "local", str(tmp_path / "marker_topology.py"),
                           "--local-ttl", "1"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert mark.read_text() == "42", "components defined in the topology file ran"
    assert time.monotonic() - started >= 1


def test_storm_local_says_what_is_wrong_with_a_file(tmp_path: Path) -> None:
    (tmp_path / "empty_topology.py").write_text("topology = 3\n")
    done = subprocess.run([sys.executable, "-m", "squall.cli", "local", str(tmp_path / "empty_topology.py")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1
    assert "topology must be a squall.Topology or a function returning one, got int" in done.stderr


def test_a_worker_never_calls_a_named_callable_that_is_not_a_component_class(tmp_path: Path) -> None:
    """A topology struct that reaches a worker without nimbus's check (written to ZooKeeper and the code store
    by hand) names ``os.system`` with a command as a spout, and ``examples.wordcount.SentenceSpout`` (a spout)
    as a bolt: the worker refuses both before building anything (the spout is never constructed, the command
    never runs) and reports why, naming the component."""
    proof = tmp_path / "proof"
    thrift, conf = wordcount.topology(rounds=1, workers=1, spouts=1, bolts=1).build()
    thrift.spouts["sentences"].spout_object = storm.ComponentObject(python_object=storm.PythonComponent(
        module_name="os", class_name="system", args_json=json.dumps([f"touch {proof}"])))
    local = LocalTopology((thrift, conf))
    local.start()
    try:
        assert not proof.exists(), "os.system ran"
        assert local.runtime.failed.is_set()
        failure = str(local.runtime.failure)
        assert "spout 'sentences' names os.system, a builtin function, not a Spout subclass" in failure
        assert any("names os.system" in text for _, text in local.errors), local.errors
    finally:
        local.stop()

    thrift, conf = wordcount.topology(rounds=1, workers=1, spouts=1, bolts=1).build()
    thrift.bolts["count"].bolt_object = thrift.spouts["sentences"].spout_object
    with LocalTopology((thrift, conf)) as local:
        assert "bolt 'count' names examples.wordcount.SentenceSpout, the class examples.wordcount.SentenceSpout, " \
               "not a Bolt subclass" in str(local.runtime.failure)


class FailCounter(Tap):
    """A :class:`Tap` that counts the ``fail`` calls it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.fails = 0

    def fail(self, msg_id: Any) -> None:
        self.fails += 1


def test_a_backlog_timing_out_at_once_is_failed_over_bounded_steps_without_waiting_a_second_between() -> None:
    """Twelve thousand trees timing out together (a rebalance) are failed a bounded number per step, so a round
    stays short and the task thread's other tasks and heartbeats keep their turns; the rest follow in the next
    steps, not a second later."""
    t = Topology("backlog")
    t.bolt("sink", Recorder).shuffle(t.spout("tap", FailCounter))
    executor = spout_alone(t)
    most = executor.EXPIRED_PER_STEP
    for root in range(2 * most + 2000):
        executor.pending.sent(root, root, now=0.0)
    spout, now, per_step = executor.spout, 100.0, []
    while spout.fails < 2 * most + 2000:
        fails = spout.fails
        executor.step(now)
        per_step.append(spout.fails - fails)
        now += 0.001
    assert per_step == [most, most, 2000] and len(executor.pending) == 0


def test_an_acker_takes_a_message_from_every_task_of_a_busy_topology_in_one_round() -> None:
    """Every tracking task of every worker sends its acker one message per step: an acker that took 8 a round fell
    behind its thread's bolts after a rebalance (15,000 messages queued) and its trees timed out waiting."""
    t = Topology("acked")
    t.bolt("sink", Recorder).shuffle(t.spout("tap", Tap))
    layout, _ = compile_topology(t, {**FAST, "topology.acker.executors": 1})
    (task,) = layout.component_tasks[ACKER]
    (spout_task,) = layout.component_tasks["tap"]
    wake = Wake()
    env = ExecutorEnv(layout.topology_id, lambda *_: None, Pressure(lambda: 0.0, enabled=False, high=0.9, low=0.4),
                      lambda exc: None, lambda beats: None)
    acker = Acker(task, layout, place_all(layout), Outbox(Routes({}), wake), Inbox(100_000, wake), env)
    senders = 48  # tasks' steps, each one message of its roots
    acker.inbox.put([TupleBatch([([root * senders + i for root in range(10)], [7] * 10, spout_task)], ACK_INIT_FIELDS,
                                "tap", ACK_INIT_STREAM, spout_task) for i in range(senders)])
    acker.step(1.0)
    assert acker.inbox.size == 0 and len(acker.state) == senders * 10
