"""Storm's UI JSON out of nimbus's Thrift structs (:mod:`ui.shapes`, its numbers added up by :mod:`ui.stats`), and
the REST API's request parsing (:mod:`ui.app`), on plain values: the live API is tested in test_ui.py."""

from __future__ import annotations

import doctest
from typing import Any

import pytest

from squall.core.httpd import error_body
from squall.core.stats import to_executor_stats
from squall.core.thrift import storm
from squall.core.zk.records import TaskStats
import ui.params
from ui.params import BadRequest, rebalance_options, wait_secs
import ui.shapes
import ui.stats
from ui.shapes import (
    UnknownComponent, cluster_summary, component_page, nimbus_summary, pretty_uptime,
    logviewer_port_of, supervisor_page, supervisor_summary, topology_page, topology_summary, worker_log_link,
)

NOW = 1_700_000_000


def executor(task: int, component: str, stats: TaskStats | None, *, spout: bool = False, port: int = 6700,
             uptime: int = 100, windows: dict[str, TaskStats] | None = None) -> Any:
    return storm.ExecutorSummary(
        executor_info=storm.ExecutorInfo(task_start=task, task_end=task), component_id=component, host="h1",
        port=port, uptime_secs=uptime,
        stats=to_executor_stats(stats, spout=spout, windows=windows) if stats else None)


def spout(task: int, emitted: int, acked: int, latency: float, failed: int = 0, timed_out: int = 0, **kw: Any) -> Any:
    """A sentences task; of its ``failed`` trees, ``timed_out`` timed out and a bolt failed the rest."""
    return executor(task, "sentences", TaskStats(
        emitted={"default": emitted, "__ack_init": emitted}, transferred={"default": emitted, "__ack_init": emitted},
        acked={"default": acked}, failed={"default": failed}, latency_ms={"default": latency},
        failed_by_reason={"timeout": timed_out, "explicit": failed - timed_out}), spout=True, **kw)


def split(task: int, executed: int, latency: float, ticks: int = 0, **kw: Any) -> Any:
    return executor(task, "split", TaskStats(
        emitted={"default": 3 * executed, "__ack_ack": executed}, transferred={"default": 3 * executed},
        acked={"sentences:default": executed}, executed={"sentences:default": executed, "__system:__tick": ticks},
        latency_ms={"sentences:default": latency, "__system:__tick": 1000.0}), **kw)


def wordcount(*executors: Any, errors: dict[str, list[Any]] | None = None) -> tuple[Any, Any]:
    info = storm.TopologyInfo(id="wc-1-1", name="wc", uptime_secs=100, executors=list(executors), status="ACTIVE",
                              errors=errors or {})
    bolt = storm.Bolt(bolt_object=storm.ComponentObject(), common=storm.ComponentCommon(inputs={}, streams={}))
    topology = storm.StormTopology(
        spouts={"sentences": storm.SpoutSpec(spout_object=storm.ComponentObject(), common=bolt.common)},
        bolts={"split": bolt, "count": bolt, "__acker": bolt}, state_spouts={})
    return info, topology


def test_durations_read_as_storm_writes_them() -> None:
    assert [pretty_uptime(s) for s in (0, 59, 60, 3725, 86400, 90061)] == [
        "0s", "59s", "1m 0s", "1h 2m 5s", "1d 0h 0m 0s", "1d 1h 1m 1s"]


def test_errors_have_storms_shape() -> None:
    assert error_body(404, "no topology with id x") == {"error": "404 Not Found",
                                                        "errorMessage": "no topology with id x"}


def test_cluster_supervisor_nimbus_and_topology_summaries() -> None:
    cluster = storm.ClusterSummary(
        supervisors=[storm.SupervisorSummary(host="h1", uptime_secs=61, num_workers=4, num_used_workers=3,
                                             supervisor_id="s1", version="0.1.0"),
                     storm.SupervisorSummary(host="h2", uptime_secs=5, num_workers=2, num_used_workers=0,
                                             supervisor_id="s2")],
        topologies=[storm.TopologySummary(id="wc-1-1", name="wc", num_tasks=12, num_executors=12, num_workers=3,
                                          uptime_secs=3725, status="ACTIVE")],
        nimbuses=[storm.NimbusSummary(host="n1", port=6627, uptime_secs=90, isLeader=True, version="1.2.4"),
                  storm.NimbusSummary(host="n2", port=6627, uptime_secs=80, isLeader=False, version="1.2.4")],
        nimbus_uptime_secs=90)
    summary = cluster_summary(cluster)
    assert {k: summary[k] for k in ("supervisors", "topologies", "slotsTotal", "slotsUsed", "slotsFree",
                                    "executorsTotal", "tasksTotal", "nimbusUptime")} == {
        "supervisors": 2, "topologies": 1, "slotsTotal": 6, "slotsUsed": 3, "slotsFree": 3, "executorsTotal": 12,
        "tasksTotal": 12, "nimbusUptime": "1m 30s"}
    first, second = supervisor_summary(cluster, blacklist=["h2"])["supervisors"]
    assert (first["id"], first["uptime"], first["slotsFree"], first["blacklisted"]) == ("s1", "1m 1s", 1, False)
    assert (second["blacklisted"], second["version"]) == (True, "VERSION_NOT_PROVIDED")
    assert [(n["host"], n["status"]) for n in nimbus_summary(cluster)["nimbuses"]] == [("n1", "Leader"),
                                                                                       ("n2", "Not a Leader")]
    assert {n["nimbusLogLink"] for n in nimbus_summary(cluster)["nimbuses"]} == {""}, "no logviewer port: no link"
    assert {s["logLink"] for s in supervisor_summary(cluster)["supervisors"]} == {""}
    (topology,) = topology_summary(cluster)["topologies"]
    assert (topology["id"], topology["uptime"], topology["workersTotal"], topology["schedulerInfo"]) == (
        "wc-1-1", "1h 2m 5s", 3, None)


def test_topology_page_adds_up_executors_and_weights_latencies() -> None:
    info, topology = wordcount(
        spout(1, emitted=100, acked=90, latency=10.0, failed=2, timed_out=1),
        spout(2, emitted=300, acked=10, latency=110.0, port=6701, failed=3, timed_out=3),
        split(3, executed=40, latency=2.0, ticks=5, uptime=10),
        split(4, executed=60, latency=1.0, ticks=5, port=6701),
        executor(5, "count", None),  # no stats yet
        executor(6, "__acker", TaskStats(emitted={"__ack_ack": 7})))
    page = topology_page(info, topology, {"topology.message.timeout.secs": 30}, now_secs=NOW)
    assert [s["spoutId"] for s in page["spouts"]] == ["sentences"]
    assert [b["boltId"] for b in page["bolts"]] == ["count", "split"], "system components only with sys"
    (sentences,) = page["spouts"]
    assert {k: sentences[k] for k in ("executors", "tasks", "emitted", "transferred", "acked", "failed",
                                      "completeLatency")} == {
        "executors": 2, "tasks": 2, "emitted": 400, "transferred": 400, "acked": 100, "failed": 5,
        "completeLatency": "20.000"}, "latency weighted by acked trees: (90 * 10 + 10 * 110) / 100"
    count, split_row = page["bolts"]
    assert (count["executors"], count["emitted"], count["executed"], count["capacity"]) == (1, 0, 0, "0.000")
    assert {k: split_row[k] for k in ("emitted", "transferred", "acked", "executed", "executeLatency")} == {
        "emitted": 300, "transferred": 300, "acked": 100, "executed": 100, "executeLatency": "1.400"}, \
        "user inputs only: ticks and __ack_ack left out"
    assert split_row["capacity"] == "0.508", "task 3: (40 * 2 ms + 5 ticks * 1000 ms) / 10 s of uptime"
    *windows, stats = page["topologyStats"]
    assert stats == {"window": ":all-time", "windowPretty": "All time", "emitted": 700, "transferred": 700,
                     "acked": 100, "failed": 5, "completeLatency": "20.000", "failedTimeout": 4, "failedExplicit": 1,
                     "failedException": 0}, "failures by reason are the spouts' trees'"
    assert [(w["window"], w["windowPretty"], w["emitted"]) for w in windows] == [
        ("600", "10m 0s", 0), ("10800", "3h 0m 0s", 0), ("86400", "1d 0h 0m 0s", 0)], \
        "Storm's four windows, shortest first; executors that sent no window count nothing in it"
    assert (page["tasksTotal"], page["executorsTotal"], page["workersTotal"], page["msgTimeout"]) == (6, 6, 2, 30)
    assert page["workers"][0] == {
        "supervisorId": "", "host": "h1", "port": 6700, "topologyId": "wc-1-1", "topologyName": "wc", "executorsTotal": 4,
        "componentNumTasks": {"sentences": 1, "split": 1, "count": 1, "__acker": 1}, "uptime": "1m 40s",
        "uptimeSeconds": 100, "workerLogLink": ""}

    with_system = topology_page(info, topology, {}, now_secs=NOW, sys=True)
    assert [b["boltId"] for b in with_system["bolts"]] == ["__acker", "count", "split"]
    assert with_system["topologyStats"][-1]["emitted"] == 400 * 2 + 400 + 7


def test_errors_newest_on_the_topology_page_all_of_them_oldest_first_on_the_component_page() -> None:
    old = storm.ErrorInfo(error="ValueError: old", error_time_secs=NOW - 100, host="h1", port=6700)
    new = storm.ErrorInfo(error="x" * 300, error_time_secs=NOW - 5, host="h1", port=6701)
    info, topology = wordcount(split(3, executed=1, latency=1.0), errors={"split": [new, old]})
    split_row = next(b for b in topology_page(info, topology, {}, now_secs=NOW)["bolts"] if b["boltId"] == "split")
    assert (len(split_row["lastError"]), split_row["errorPort"], split_row["errorLapsedSecs"]) == (200, 6701, 5)
    count_row = next(b for b in topology_page(info, topology, {}, now_secs=NOW)["bolts"] if b["boltId"] == "count")
    assert (count_row["lastError"], count_row["errorPort"], count_row["errorTime"]) == ("", None, None)
    page = component_page(info, topology, "split", now_secs=NOW)
    assert [(e["error"], e["errorLapsedSecs"]) for e in page["componentErrors"]] == [("ValueError: old", 100),
                                                                                    ("x" * 300, 5)]


def test_an_error_is_summed_up_by_its_exception_however_long_its_traceback() -> None:
    """Storm's ``lastError`` is the first 200 characters: a traceback's first frames. Its exception, the line
    people read an error by, is ``lastErrorSummary`` (and ``errorSummary`` on the component page)."""
    traceback = ('Traceback (most recent call last):\n  File "/srv/storm-local/dev-cluster/supervisor/stormdist/'
                 'wc-1-1/resources/split.py", line 12, in process\n' * 3 + "ValueError: not a sentence: ''")
    error = storm.ErrorInfo(error=traceback, error_time_secs=NOW - 5, host="h1", port=6701)
    info, topology = wordcount(split(3, executed=1, latency=1.0), errors={"split": [error]})
    split_row = next(b for b in topology_page(info, topology, {}, now_secs=NOW)["bolts"] if b["boltId"] == "split")
    assert split_row["lastError"] == traceback[:200]
    assert split_row["lastErrorSummary"] == "ValueError: not a sentence: ''"
    count_row = next(b for b in topology_page(info, topology, {}, now_secs=NOW)["bolts"] if b["boltId"] == "count")
    assert count_row["lastErrorSummary"] == ""
    (shown,) = component_page(info, topology, "split", now_secs=NOW)["componentErrors"]
    assert (shown["error"], shown["errorSummary"]) == (traceback, "ValueError: not a sentence: ''")


def test_workers_and_their_errors_link_to_their_logs_on_the_logviewer_of_their_host() -> None:
    crash = storm.ErrorInfo(error="ValueError: boom", error_time_secs=NOW - 5, host="h1", port=6701)
    died = storm.ErrorInfo(error="worker died", error_time_secs=NOW - 1, host="h1")  # the supervisor's: no port
    info, topology = wordcount(spout(1, emitted=1, acked=1, latency=1.0),
                               split(3, executed=1, latency=1.0, port=6701), errors={"split": [crash, died]})
    log = "http://h1:8000/api/v1/log?file=wc-1-1-worker-{}.log"
    page = topology_page(info, topology, {}, now_secs=NOW, logviewer_port=8000)
    assert [(w["port"], w["workerLogLink"]) for w in page["workers"]] == [(6700, log.format(6700)),
                                                                        (6701, log.format(6701))]
    split_row = next(b for b in page["bolts"] if b["boltId"] == "split")
    assert (split_row["lastError"], split_row["errorWorkerLogLink"]) == ("worker died", ""), "no worker, no link"
    component = component_page(info, topology, "split", now_secs=NOW, logviewer_port=8000)
    assert [e["workerLogLink"] for e in component["executorStats"]] == [log.format(6701)]
    assert [e["errorWorkerLogLink"] for e in component["componentErrors"]] == [log.format(6701), ""]
    without = topology_page(info, topology, {}, now_secs=NOW)
    assert {w["workerLogLink"] for w in without["workers"]} == {""}, "no logviewer port: Storm's no-link"
    assert worker_log_link(8000, "fe80::1", 6700, "wc-1-1") == "http://[fe80::1]:8000/api/v1/log?file=" \
                                                                "wc-1-1-worker-6700.log"


def test_nimbuses_and_supervisors_link_to_their_own_logs_on_the_logviewer_of_their_host() -> None:
    """Storm's nimbusLogLink and logLink: /daemonlog?file=nimbus.log (supervisor.log) on the logviewer of the
    daemon's host, at the UI's logviewer port (https:// at logviewer.https.port)."""
    cluster = storm.ClusterSummary(
        supervisors=[storm.SupervisorSummary(host="h1", uptime_secs=1, num_workers=2, num_used_workers=0,
                                             supervisor_id="s1"),
                     storm.SupervisorSummary(host="fe80::2", uptime_secs=1, num_workers=2, num_used_workers=0,
                                             supervisor_id="s2")],
        topologies=[], nimbuses=[storm.NimbusSummary(host="n1", port=6627, uptime_secs=1, isLeader=True,
                                                     version="1.2.4")])
    assert [n["nimbusLogLink"] for n in nimbus_summary(cluster, 8000)["nimbuses"]] == [
        "http://n1:8000/daemonlog?file=nimbus.log"]
    assert [s["logLink"] for s in supervisor_summary(cluster, (), 8000)["supervisors"]] == [
        "http://h1:8000/daemonlog?file=supervisor.log", "http://[fe80::2]:8000/daemonlog?file=supervisor.log"]
    https = logviewer_port_of({"logviewer.port": 8000, "logviewer.https.port": 8443})
    assert nimbus_summary(cluster, https)["nimbuses"][0]["nimbusLogLink"] == \
        "https://n1:8443/daemonlog?file=nimbus.log"
    page = supervisor_page(cluster, (), [], supervisor_id="s1", logviewer_port=8000)
    assert page["supervisors"][0]["logLink"] == "http://h1:8000/daemonlog?file=supervisor.log"


def test_component_pages_of_a_spout_and_a_bolt() -> None:
    info, topology = wordcount(spout(1, emitted=100, acked=90, latency=10.0),
                               split(3, executed=40, latency=2.0, ticks=5), split(4, executed=60, latency=1.0))
    sentences = component_page(info, topology, "sentences", now_secs=NOW)
    assert (sentences["componentType"], sentences["executors"], sentences["topologyId"]) == ("spout", 1, "wc-1-1")
    assert sentences["outputStats"] == [{"stream": "default", "emitted": 100, "transferred": 100, "acked": 90,
                                         "failed": 0, "completeLatency": "10.000"}]
    assert sentences["spoutSummary"][-1]["acked"] == 90 and "boltStats" not in sentences
    assert [w["window"] for w in sentences["spoutSummary"]] == ["600", "10800", "86400", ":all-time"]
    (only,) = sentences["executorStats"]
    assert (only["id"], only["host"], only["port"], only["uptime"], only["completeLatency"]) == (
        "[1-1]", "h1", 6700, "1m 40s", "10.000")

    bolt = component_page(info, topology, "split", now_secs=NOW)
    assert bolt["inputStats"] == [{"component": "sentences", "encodedComponentId": "sentences", "stream": "default",
                                   "executed": 100, "acked": 100, "failed": 0, "executeLatency": "1.400",
                                   "processLatency": "0.000"}]
    assert bolt["outputStats"] == [{"stream": "default", "emitted": 300, "transferred": 300}]
    assert [e["executed"] for e in bolt["executorStats"]] == [40, 60]
    with_ticks = component_page(info, topology, "split", now_secs=NOW, sys=True)
    assert [(i["component"], i["stream"]) for i in with_ticks["inputStats"]] == [("__system", "__tick"),
                                                                                ("sentences", "default")]


def test_a_components_failures_by_reason_in_each_window_and_its_user_metrics_per_task() -> None:
    picky = TaskStats(executed={"sentences:default": 10}, acked={"sentences:default": 6},
                      failed={"sentences:default": 4}, failed_by_reason={"explicit": 1, "exception": 3},
                      user_counters={"seen": 10}, user_gauges={"last.n": 9.0})
    info, topology = wordcount(
        executor(3, "split", picky, windows={"600": TaskStats(failed_by_reason={"exception": 1})}),
        executor(4, "split", TaskStats(user_counters={"seen": 2}), port=6701))
    page = component_page(info, topology, "split", now_secs=NOW)
    ten_minutes, *_, all_time = page["boltStats"]
    assert [(w["failedExplicit"], w["failedException"], w["failedTimeout"]) for w in (ten_minutes, all_time)] == [
        (0, 1, 0), (1, 3, 0)]
    assert [(e["id"], e["failedException"]) for e in page["executorStats"]] == [("[3-3]", 3), ("[4-4]", 0)]
    assert page["userMetrics"] == [
        {"task": "3", "host": "h1", "port": 6700, "name": "last.n", "type": "gauge", "value": 9.0},
        {"task": "3", "host": "h1", "port": 6700, "name": "seen", "type": "counter", "value": 10},
        {"task": "4", "host": "h1", "port": 6701, "name": "seen", "type": "counter", "value": 2}]


def test_a_window_asked_for_shows_its_counts_and_capacity_over_its_length() -> None:
    """The tables show the window asked for; ``topologyStats``, ``spoutSummary`` and ``boltStats`` list all four;
    capacity is the busy share of the window (of the uptime, when the executor is younger)."""
    last_10m = TaskStats(emitted={"default": 60}, transferred={"default": 60}, acked={"default": 50},
                         latency_ms={"default": 4.0})
    old_spout = executor(1, "sentences", TaskStats(emitted={"default": 900}, transferred={"default": 900},
                                                   acked={"default": 800}, latency_ms={"default": 10.0}),
                         spout=True, uptime=5000, windows={"600": last_10m, "10800": last_10m, "86400": last_10m})
    bolt_10m = TaskStats(executed={"sentences:default": 60_000}, latency_ms={"sentences:default": 5.0})
    old_bolt = executor(3, "split", TaskStats(executed={"sentences:default": 100_000},
                                              latency_ms={"sentences:default": 5.0}),
                        uptime=5000, windows={"600": bolt_10m, "10800": bolt_10m, "86400": bolt_10m})
    young_bolt = executor(4, "split", TaskStats(executed={"sentences:default": 120},
                                                latency_ms={"sentences:default": 5.0}), uptime=60,
                          windows={w: TaskStats(executed={"sentences:default": 120}, latency_ms={"sentences:default": 5.0})
                                   for w in ("600", "10800", "86400")})
    info, topology = wordcount(old_spout, old_bolt, young_bolt)

    page = topology_page(info, topology, {}, now_secs=NOW, window="600")
    assert (page["window"], page["windowHint"]) == ("600", "10m 0s")
    assert [(w["window"], w["acked"], w["completeLatency"]) for w in page["topologyStats"]] == [
        ("600", 50, "4.000"), ("10800", 50, "4.000"), ("86400", 50, "4.000"), (":all-time", 800, "10.000")]
    (sentences,) = page["spouts"]
    assert (sentences["emitted"], sentences["acked"], sentences["completeLatency"]) == (60, 50, "4.000")
    split_row = next(b for b in page["bolts"] if b["boltId"] == "split")
    assert (split_row["executed"], split_row["capacity"]) == (60_120, "0.500"), \
        "the old executor's 60,000 * 5 ms over the window's 600 s (the young one's 120 * 5 ms over its 60 s: 0.01)"
    all_time = next(b for b in topology_page(info, topology, {}, now_secs=NOW)["bolts"] if b["boltId"] == "split")
    assert (all_time["executed"], all_time["capacity"]) == (100_120, "0.100"), "100,000 * 5 ms over 5,000 s"

    component = component_page(info, topology, "split", now_secs=NOW, window="600")
    assert [(w["window"], w["executed"]) for w in component["boltStats"]] == [
        ("600", 60_120), ("10800", 60_120), ("86400", 60_120), (":all-time", 100_120)]
    assert [(e["executed"], e["capacity"]) for e in component["executorStats"]] == [(60_000, "0.500"),
                                                                                    (120, "0.010")]
    assert [i["executed"] for i in component["inputStats"]] == [60_120]


def test_an_unknown_component_names_the_topology_s_components() -> None:
    info, topology = wordcount()
    with pytest.raises(UnknownComponent, match="wc-1-1 has no component 'nope'; its components are count, "
                                               "sentences, split"):
        component_page(info, topology, "nope", now_secs=NOW)


def test_rebalance_bodies_and_wait_times() -> None:
    options = rebalance_options(7, b'{"rebalanceOptions": {"numWorkers": 2, "executors": {"spout": "4", "count": 10}},'
                                   b' "callback": "foo"}')
    assert (options.wait_secs, options.num_workers, options.num_executors) == (7, 2, {"spout": 4, "count": 10})
    assert rebalance_options(0, b"").num_workers is None
    for body, message in ((b"{", "not JSON"), (b'{"rebalanceOptions": {"workers": 2}}', "unknown rebalanceOptions"),
                          (b'{"rebalanceOptions": {"numWorkers": 0}}', "numWorkers must be a whole number from 1 to 2147483647"),
                          (b'{"rebalanceOptions": {"executors": {"c": 2147483648}}}', "executors.c must be a whole "
                                                                                     "number from 1 to 2147483647"),
                          (b'{"rebalanceOptions": {"executors": {"c": true}}}', "executors.c must be"),
                          (b'[1]', "expected")):
        with pytest.raises(BadRequest, match=message):
            rebalance_options(0, body)
    assert wait_secs("30") == 30
    with pytest.raises(BadRequest, match="wait-time must be whole seconds from 0 to 2147483647, got '-1'"):
        wait_secs("-1")
    with pytest.raises(BadRequest, match="got '2147483648'"):
        wait_secs("2147483648")


@pytest.mark.parametrize("module", [ui.shapes, ui.stats, ui.params], ids=lambda m: m.__name__)
def test_the_examples_in_the_docstrings_hold(module: Any) -> None:
    result = doctest.testmod(module)
    assert result.attempted and not result.failed
