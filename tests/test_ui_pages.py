"""The UI's HTML pages and the topology graph's layout, on nimbus's structs built here (the pages in a real
browser against a running word count are in test_ui_browser.py).

The pages are requested over Starlette's TestClient from the real app, whose nimbus is
:class:`StructSource`: it answers the UI's questions with fixed Thrift structs, as nimbus would."""

from __future__ import annotations

import doctest
import json
import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from squall import STORM_VERSION
from squall.core.stats import ALL_TIME, WINDOWS, to_executor_stats
from squall.core.thrift import storm
from squall.core.zk.records import TaskStats
import ui.graph
import ui.pages
from test_ui import valid
from ui.app import create_app
from ui.graph import Component, Flow, layers, layout, topology_drawing
from ui.shapes import UnknownSupervisor, component_page, supervisor_page, topology_page
from ui.source import TopologyParts

NOW = 1_700_000_000
UPTIME = 100
HOSTILE = "<script>alert(1)</script>"  # a component id from a Thrift client that never checked it


def stream(component: str, name: str = "default") -> Any:
    return storm.GlobalStreamId(componentId=component, streamId=name)


def common(*inputs: Any) -> Any:
    return storm.ComponentCommon(inputs={i: storm.Grouping(shuffle=storm.NullStruct()) for i in inputs}, streams={})


def bolt(*inputs: Any) -> Any:
    return storm.Bolt(bolt_object=storm.ComponentObject(), common=common(*inputs))


def running_topology() -> Any:
    """sentences → split → count, a hostile-named bolt on split, and the acker (a system component)."""
    return storm.StormTopology(
        spouts={"sentences": storm.SpoutSpec(spout_object=storm.ComponentObject(), common=common())},
        bolts={"split": bolt(stream("sentences")), "count": bolt(stream("split")), HOSTILE: bolt(stream("split")),
               "__acker": bolt(stream("sentences", "__ack_init"), stream("split", "__ack_ack"))},
        state_spouts={})


def executor(task: int, component: str, stats: TaskStats, *, spout: bool = False, port: int = 6700) -> Any:
    """An executor as old as the topology: all it did is in every window."""
    return storm.ExecutorSummary(
        executor_info=storm.ExecutorInfo(task_start=task, task_end=task), component_id=component, host="h1",
        port=port, uptime_secs=UPTIME,
        stats=to_executor_stats(stats, spout=spout, windows={w: stats for w in WINDOWS if w != ALL_TIME}))


def running_info(status: str = "ACTIVE") -> Any:
    """100 s in: 500 sentences, split into 3000 words (4 ms each: capacity 0.12), counted at 1 ms each."""
    return storm.TopologyInfo(
        id="wc-1-1", name="wc", uptime_secs=UPTIME, status=status, executors=[
            executor(1, "sentences", TaskStats(emitted={"default": 500}, transferred={"default": 500},
                                               acked={"default": 500}, latency_ms={"default": 9.0}), spout=True),
            executor(2, "split", TaskStats(emitted={"default": 3000}, transferred={"default": 3000},
                                           acked={"sentences:default": 500}, executed={"sentences:default": 500},
                                           latency_ms={"sentences:default": 24.0}), port=6701),
            executor(3, "count", TaskStats(executed={"split:default": 3000}, acked={"split:default": 2996},
                                           failed={"split:default": 4}, latency_ms={"split:default": 1.0},
                                           failed_by_reason={"explicit": 1, "exception": 3},
                                           user_counters={"words": 3000}, user_gauges={"cache.size": 12.5})),
            executor(4, HOSTILE, TaskStats(executed={"split:default": 10}, latency_ms={"split:default": 1.0})),
        ],
        errors={"count": [storm.ErrorInfo(error="ValueError: <b>not a word</b>\n  at count", error_time_secs=NOW - 30,
                                          host="h1", port=6700)]})


def cluster_summary() -> Any:
    return storm.ClusterSummary(
        supervisors=[storm.SupervisorSummary(host="h1", uptime_secs=300, num_workers=4, num_used_workers=2,
                                             supervisor_id="sup-1", version="0.1.0"),
                     storm.SupervisorSummary(host="h2", uptime_secs=300, num_workers=4, num_used_workers=0,
                                             supervisor_id="sup-2", version="0.1.0")],
        topologies=[storm.TopologySummary(id="wc-1-1", name="wc", num_tasks=4, num_executors=4, num_workers=2,
                                          uptime_secs=UPTIME, status="ACTIVE")],
        nimbuses=[storm.NimbusSummary(host="n1", port=6627, uptime_secs=400, isLeader=True, version="0.1.0")],
        nimbus_uptime_secs=400)


class StructSource:
    """The UI's nimbus, answering with the structs above (``NotAliveException`` for another topology id)."""

    def cluster(self) -> Any:
        return cluster_summary()

    def cluster_and_blacklist(self) -> tuple[Any, list[str]]:
        return cluster_summary(), []

    def cluster_with_topologies(self) -> tuple[Any, list[str], list[Any]]:
        return cluster_summary(), [], [running_info()]

    def topology(self, topology_id: str) -> TopologyParts:
        if topology_id != "wc-1-1":
            raise storm.NotAliveException(msg=topology_id)
        return TopologyParts(running_info(), running_topology(), {"topology.message.timeout.secs": 30})


class FixedClock:
    def time(self) -> float:
        return float(NOW)


@pytest.fixture
def browser() -> TestClient:
    app = create_app({"ui.nimbus.timeout.secs": 1}, source=StructSource(), clock=FixedClock())  # type: ignore[arg-type]
    return TestClient(app)


def rows(html: str, table_id: str) -> list[list[str]]:
    """The text of each cell of a table of the page, row by row (header row included)."""
    table = re.search(rf'<table[^>]*id="{table_id}".*?</table>', html, re.S)
    assert table, f"no table {table_id}"
    return [[re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", cell)).strip()
             for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(0), re.S)]


# -- the graph's layout -----------------------------------------------------------------------------------


def test_layers_put_each_bolt_right_of_its_furthest_input_and_survive_cycles() -> None:
    spout, a, b, c = Component("s", "spout"), Component("a", "bolt"), Component("b", "bolt"), Component("c", "bolt")
    diamond = [Flow("s", "a", "default", 1, 1), Flow("s", "b", "default", 1, 1), Flow("a", "c", "default", 1, 1),
               Flow("b", "c", "default", 1, 1), Flow("a", "b", "default", 1, 1)]
    assert layers([spout, a, b, c], diamond) == {"s": 0, "a": 1, "b": 2, "c": 3}
    cycle = [Flow("s", "a", "default", 1, 1), Flow("a", "b", "default", 1, 1), Flow("b", "a", "back", 1, 1),
             Flow("b", "b", "self", 1, 1)]
    assert layers([spout, a, b], cycle) == {"s": 0, "a": 1, "b": 2}


def test_layout_boxes_do_not_overlap_and_edges_run_between_them_labelled_with_their_rates() -> None:
    components = [Component("s", "spout"), *(Component(f"b{i}", "bolt", i / 4) for i in range(5))]
    flows = [Flow("s", f"b{i}", "default", 60 * i, 60.0) for i in range(4)] + [Flow("b1", "b4", "words", 3, 60.0),
                                                                              Flow("b4", "b1", "back", 0, 60.0)]
    drawing = layout(components, flows)
    boxes = {b.component.id: b for b in drawing.boxes}
    for one in drawing.boxes:
        assert 0 <= one.x and one.x + drawing.node_width <= drawing.width
        assert 0 <= one.y and one.y + drawing.node_height <= drawing.height
        for other in drawing.boxes:
            if other is not one:
                assert (abs(one.x - other.x) >= drawing.node_width or abs(one.y - other.y) >= drawing.node_height)
    assert boxes["s"].x < boxes["b0"].x < boxes["b4"].x
    labels = {(a.flow.source, a.flow.target): a.label for a in drawing.arrows}
    assert labels[("s", "b3")] == "3.0/s" and labels[("s", "b0")] == "0/s" and labels[("b1", "b4")] == "words 0.05/s"
    widths = {a.flow.target: a.width for a in drawing.arrows if a.flow.source == "s"}
    assert widths["b3"] == 6.0 and widths["b0"] == 1.5, "the busiest edge is the widest"
    assert boxes["b0"].fill == "hsl(120, 65%, 78%)" and boxes["b4"].fill == "hsl(0, 65%, 78%)"
    back = next(a for a in drawing.arrows if a.flow.stream == "back")
    assert back.label_y > boxes["b1"].y + drawing.node_height, "an edge back to an earlier column runs below"


def test_the_topology_drawing_is_made_from_the_rest_apis_data() -> None:
    info, topology = running_info(), running_topology()
    page = topology_page(info, topology, {}, now_secs=NOW)
    inputs = {b["boltId"]: component_page(info, topology, b["boltId"], now_secs=NOW)["inputStats"]
              for b in page["bolts"]}
    drawing = topology_drawing(page, topology, inputs)
    assert sorted(b.component.id for b in drawing.boxes) == sorted([HOSTILE, "count", "sentences", "split"])
    assert {(a.flow.source, a.flow.target): a.flow.rate for a in drawing.arrows} == {
        ("sentences", "split"): 5.0, ("split", "count"): 30.0, ("split", HOSTILE): 0.1}, \
        "executed by the target per second of uptime; the acker's edges are left out"
    split = next(b for b in drawing.boxes if b.component.id == "split")
    assert split.component.capacity == 0.12, "500 executed × 24 ms over 100 s"
    with_system = topology_page(info, topology, {}, now_secs=NOW, sys=True)
    assert ("split", "__acker") in {(a.flow.source, a.flow.target) for a in topology_drawing(
        with_system, topology, {}, sys=True).arrows}


@pytest.mark.parametrize("module", [ui.graph, ui.pages], ids=lambda m: m.__name__)
def test_the_examples_in_the_docstrings_hold(module: Any) -> None:
    result = doctest.testmod(module)
    assert result.attempted and not result.failed


# -- the pages ----------------------------------------------------------------------------------------------


def test_the_cluster_page_lists_nimbuses_supervisors_and_topologies(browser: TestClient) -> None:
    page = browser.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert rows(page.text, "cluster-summary")[1] == [STORM_VERSION, "2", "2", "6", "8", "4", "4", "6m 40s"]
    assert rows(page.text, "topologies")[1][:6] == ["wc", "wc-1-1", "", "ACTIVE", "1m 40s", "2"]
    assert '<a href="/topology/wc-1-1">wc</a>' in page.text
    assert [r[:6] for r in rows(page.text, "supervisors")[1:]] == [["sup-1", "h1", "5m 0s", "4", "2", "2"],
                                                                   ["sup-2", "h2", "5m 0s", "4", "0", "4"]]
    assert rows(page.text, "nimbuses")[1][:3] == ["n1", "6627", "Leader"]


def test_the_cluster_page_says_which_version_is_which(browser: TestClient) -> None:
    """Nimbus reports the Storm release whose API it speaks (1.2.4, what Storm clients read), a supervisor the
    Squall release it runs (0.1.0): each column is named for what it shows."""
    page = browser.get("/").text
    assert rows(page, "cluster-summary")[0][0] == "Storm API version"
    assert rows(page, "nimbuses")[0][3] == "Storm API version"
    assert rows(page, "supervisors")[0][6] == "Squall version"
    assert rows(browser.get("/supervisor/sup-1").text, "supervisor-summary")[0][6] == "Squall version"


def test_the_topology_page_shows_stats_graph_errors_and_actions_with_names_escaped(browser: TestClient) -> None:
    page = browser.get("/topology/wc-1-1").text
    assert rows(page, "topology-summary")[1][:6] == ["wc", "wc-1-1", "", "ACTIVE", "1m 40s", "2"]
    assert rows(page, "topology-stats")[1:] == [[window, "3500", "3500", "9.000", "500", "0"] for window in (
        "10m 0s", "3h 0m 0s", "1d 0h 0m 0s", "All time")]
    bolts = {r[0]: r for r in rows(page, "bolts")[1:]}
    assert bolts["split"][5:8] == ["0.120", "24.000", "500"], "capacity, execute latency, executed"
    assert "__acker" not in bolts, "system components only with ?sys=1"
    assert "__acker" in {r[0] for r in rows(browser.get("/topology/wc-1-1?sys=1").text, "bolts")[1:]}

    edges = re.findall(r'<g class="edge" data-source="([^"]*)" data-target="([^"]*)" data-stream="default" '
                       r'data-rate="([^"]*)">', page)
    assert sorted(edges) == sorted([("sentences", "split", "5.0"), ("split", "count", "30.0"),
                                    ("split", "&lt;script&gt;alert(1)&lt;/script&gt;", "0.1")])
    assert '<text class="rate"' in page and ">30/s</text>" in page
    assert 'data-component="count" href="/topology/wc-1-1/component/count"' in page

    assert HOSTILE not in page and "<b>not a word</b>" not in page, "user input is escaped everywhere"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "/component/%3Cscript%3Ealert%281%29%3C%2Fscript%3E" in page, "and its links are one encoded segment"
    (error,) = rows(page, "errors")[1:]
    assert error[:3] == ["count", "2023-11-14 22:12:50 UTC (30 s ago)", "h1:6700"]
    assert error[3].startswith("ValueError: &lt;b&gt;not a word&lt;/b&gt;")

    buttons = {name: "disabled" in tag for tag, name in re.findall(r'(<button type="button" id="(\w+)"[^>]*>)', page)}
    assert buttons == {"activate": True, "deactivate": False, "rebalance": False, "kill": False}, \
        "activate is off while the topology is active"
    assert 'data-topology-id="wc-1-1" data-topology-name="wc" data-wait-default="30"' in page


def test_the_component_page_shows_executors_with_host_port_and_errors_with_time(browser: TestClient) -> None:
    page = browser.get("/topology/wc-1-1/component/count").text
    assert rows(page, "component-summary")[1] == ["count", "wc", "ACTIVE", "1", "1"]
    assert rows(page, "input-stats")[1][:3] == ["split", "default", "3000"]
    (executor_row,) = rows(page, "executors")[1:]
    assert executor_row[:3] == ["[3-3]", "h1:6700", "1m 40s"]
    assert '<a href="">' not in page, "no log link until the logviewer gives one (Storm's empty workerLogLink)"
    (error,) = rows(page, "component-errors")[1:]
    assert error[:2] == ["2023-11-14 22:12:50 UTC 30 s ago", "h1:6700"]
    spout = browser.get("/topology/wc-1-1/component/sentences").text
    assert rows(spout, "component-stats")[-1] == ["All time", "500", "500", "9.000", "500", "0"]
    hostile = browser.get("/topology/wc-1-1/component/%3Cscript%3Ealert%281%29%3C%2Fscript%3E")
    assert hostile.status_code == 200 and HOSTILE not in hostile.text


def test_the_component_page_shows_failures_by_reason_and_user_metrics(browser: TestClient) -> None:
    page = browser.get("/topology/wc-1-1/component/count").text
    assert rows(page, "failures-by-reason")[0] == ["Window", "Failed", "Failed by the bolt (fail)",
                                                   "Exception in execute"]
    assert rows(page, "failures-by-reason")[-1] == ["All time", "4", "1", "3"]
    assert rows(page, "user-metrics")[1:] == [["3", "h1:6700", "cache.size", "gauge", "12.5"],
                                              ["3", "h1:6700", "words", "counter", "3000"]]
    spout = browser.get("/topology/wc-1-1/component/sentences").text
    assert rows(spout, "failures-by-reason")[0][2:] == ["Timed out", "Failed by a bolt"]
    assert "No user metrics" in spout


def test_the_rest_api_answers_jsonp_with_a_callback_and_refuses_a_callback_that_is_not_a_name(
        browser: TestClient) -> None:
    plain = browser.get("/api/v1/topology/wc-1-1/component/count").json()
    jsonp = browser.get("/api/v1/topology/wc-1-1/component/count", params={"callback": "jQuery.cb_1"})
    assert jsonp.status_code == 200 and jsonp.headers["content-type"].startswith("application/javascript")
    assert jsonp.headers["x-content-type-options"] == "nosniff"
    assert jsonp.text.startswith("/**/jQuery.cb_1(") and jsonp.text.endswith(");")
    assert json.loads(jsonp.text[len("/**/jQuery.cb_1("):-2]) == plain
    for bad in ("alert(1);x", "1abc", "a..b", "a" * 65, "cb<script>"):
        refused = browser.get("/api/v1/topology/wc-1-1", params={"callback": bad})
        assert refused.status_code == 400 and "callback must be a JavaScript function name" in refused.json()[
            "errorMessage"], bad


def test_a_window_selector_links_each_window_keeping_the_sys_flag(browser: TestClient) -> None:
    def selector(html: str) -> list[tuple[str, str]]:
        part = re.search(r'<p class="windows" id="window-selector">.*?</p>', html, re.S)
        assert part, "no window selector"
        return re.findall(r'<(?:a href="([^"]*)"|strong class="current") data-window="[^"]*">([^<]*)<', part.group())

    page = browser.get("/topology/wc-1-1?window=10800").text
    assert selector(page) == [("?window=600&amp;sys=0", "10 minutes"), ("", "3 hours"),
                              ("?window=86400&amp;sys=0", "1 day"), ("?sys=0", "All time")]
    assert re.search(r'<tr class="current"><td>3h 0m 0s</td>', page), "the window shown is marked in the stats"
    assert "<h2>Spouts <span class=\"window\">(3h 0m 0s)</span></h2>" in page
    assert '<a href="?window=10800&amp;sys=1">Show system components' in page, "sys keeps the window"
    component = browser.get("/topology/wc-1-1/component/split?window=600&sys=1").text
    assert selector(component)[0] == ("", "10 minutes") and selector(component)[1] == ("?window=10800&amp;sys=1",
                                                                                      "3 hours")
    assert "<h2>Executors <span class=\"window\">(10m 0s)</span></h2>" in component


def test_nimbus_and_supervisor_hosts_link_to_their_daemon_logs_on_the_logviewer() -> None:
    app = create_app({"ui.nimbus.timeout.secs": 1, "logviewer.port": 8000},
                     source=StructSource(), clock=FixedClock())  # type: ignore[arg-type]
    with TestClient(app) as linked:
        cluster = linked.get("/").text
        assert '<a class="log-link" href="http://n1:8000/daemonlog?file=nimbus.log">n1</a>' in cluster
        assert '<a class="log-link" href="http://h2:8000/daemonlog?file=supervisor.log">h2</a>' in cluster
        assert '<a class="log-link" href="http://h1:8000/daemonlog?file=supervisor.log">h1</a>' in \
            linked.get("/supervisor/sup-1").text
        api = "/api/v1/nimbus/summary"
        assert valid(linked.get(api), api)["nimbuses"][0]["nimbusLogLink"] == \
            "http://n1:8000/daemonlog?file=nimbus.log"
        api = "/api/v1/supervisor/summary"
        assert [s["logLink"] for s in valid(linked.get(api), api)["supervisors"]] == [
            "http://h1:8000/daemonlog?file=supervisor.log", "http://h2:8000/daemonlog?file=supervisor.log"]
    assert 'class="log-link"' not in TestClient(create_app(  # type: ignore[arg-type]
        {"ui.nimbus.timeout.secs": 1}, source=StructSource(), clock=FixedClock())).get("/").text, \
        "no logviewer port: no link (Storm's empty link)"


def test_the_supervisor_page_lists_the_workers_on_its_host(browser: TestClient) -> None:
    page = browser.get("/supervisor/sup-1").text
    assert rows(page, "supervisor-summary")[1][:2] == ["sup-1", "h1"]
    assert [r[:4] for r in rows(page, "supervisor-workers")[1:]] == [["wc", "6700", "1m 40s", "3"],
                                                                     ["wc", "6701", "1m 40s", "1"]]
    assert "This supervisor runs no worker." in browser.get("/supervisor/sup-2").text
    api = "/api/v1/supervisor"
    assert [w["port"] for w in valid(browser.get(api, params={"id": "sup-1"}), api)["workers"]] == [6700, 6701]
    assert valid(browser.get(api, params={"host": "h2"}), api)["supervisors"][0]["id"] == "sup-2"
    assert "give the supervisor's id" in valid(browser.get(api), api)["errorMessage"]
    assert valid(browser.get(api, params={"id": "sup-9"}), api)["error"] == "404 Not Found"


def test_a_page_that_cannot_be_made_is_an_html_error_page_and_the_api_keeps_json(browser: TestClient) -> None:
    for path, status, message in (
            ("/topology/nosuch-1-1", 404, "no topology with id nosuch-1-1"),
            ("/topology/wc-1-1/component/nope", 404, "its components are &lt;script&gt;"),
            ("/topology/wc-1-1?window=60", 400, "window &#39;60&#39; is not kept; give one of 600, 10800, 86400"),
            ("/supervisor/sup-9", 404, "no supervisor has id &#39;sup-9&#39;; the supervisors are sup-1 (h1), sup-2"),
            ("/nowhere", 404, "/nowhere is not part of the UI; the cluster&#39;s page is /")):
        page = browser.get(path)
        assert (page.status_code, page.headers["content-type"]) == (status, "text/html; charset=utf-8"), path
        assert message in page.text, page.text
    api = browser.get("/api/v1/topology/nosuch-1-1")
    assert (api.status_code, api.json()["error"]) == (404, "404 Not Found")
    assert browser.get("/api/v1/nowhere").json()["errorMessage"] == "/api/v1/nowhere is not part of the UI; see " \
                                                                    "/api/v1/openapi.json"


def test_the_static_script_and_style_are_served(browser: TestClient) -> None:
    script = browser.get("/static/ui.js")
    assert script.status_code == 200 and "window.confirm" in script.text and "textContent" in script.text
    assert browser.get("/static/ui.css").status_code == 200


# -- the supervisor page's JSON -----------------------------------------------------------------------------


def test_the_supervisor_api_matches_workers_by_host_and_says_when_the_host_is_shared() -> None:
    cluster = cluster_summary()
    cluster.supervisors.append(storm.SupervisorSummary(host="h1", uptime_secs=1, num_workers=1, num_used_workers=0,
                                                       supervisor_id="sup-3"))
    page = supervisor_page(cluster, ["h1"], [running_info()], supervisor_id="sup-1")
    assert ([s["id"] for s in page["supervisors"]], page["sharedHost"]) == (["sup-1"], True)
    assert page["supervisors"][0]["blacklisted"] is True
    assert [(w["port"], w["topologyName"]) for w in page["workers"]] == [(6700, "wc"), (6701, "wc")]
    by_host = supervisor_page(cluster, [], [running_info()], host="h1")
    assert ([s["id"] for s in by_host["supervisors"]], by_host["sharedHost"]) == (["sup-1", "sup-3"], False)
    with pytest.raises(UnknownSupervisor, match="no supervisor has host 'h9'"):
        supervisor_page(cluster, [], [], host="h9")


def test_workers_name_their_supervisor_and_a_supervisors_page_lists_only_its_own() -> None:
    """Nimbus names each worker's supervisor (``ExecutorSummary.supervisor_id``): two supervisors on one host
    each list their own workers; a worker reported without one (an older nimbus) is matched by host."""
    cluster = cluster_summary()
    cluster.supervisors.append(storm.SupervisorSummary(host="h1", uptime_secs=1, num_workers=1, num_used_workers=1,
                                                       supervisor_id="sup-3"))
    info = running_info()
    for e in info.executors:
        e.supervisor_id = "sup-1" if e.port == 6700 else "sup-3"
    assert [(w["supervisorId"], w["port"]) for w in topology_page(info, running_topology(), {}, now_secs=NOW)[
        "workers"]] == [("sup-1", 6700), ("sup-3", 6701)]
    assert [w["port"] for w in supervisor_page(cluster, [], [info], supervisor_id="sup-3")["workers"]] == [6701]
    assert [w["port"] for w in supervisor_page(cluster, [], [info], supervisor_id="sup-1")["workers"]] == [6700]
    older = running_info()
    assert [w["port"] for w in supervisor_page(cluster, [], [older], supervisor_id="sup-3")["workers"]] == [
        6700, 6701], "no supervisor id: matched by host"


TRACEBACK = ('Traceback (most recent call last):\n'
             '  File "/srv/storm-local/dev-cluster/supervisor/stormdist/wc/count.py", line 9, in process\n'
             '    counts[word] += 1  # ' + 'x' * 200 + '\nKeyError: <b>the</b>')
RESTARTED = ("worker h1:6701 restarted by nimbus: no heartbeat from its tasks [2] for over 30 s "
             "(nimbus.task.timeout.secs)")
TROUBLE = ("failing: 40 of 50 trees timed out in 10 min; 1 worker restarted by nimbus in 10 min: no heartbeat; "
           "errors: count (30 s ago): KeyError: <b>the</b>")


class TroubledSource(StructSource):
    """A word count whose trees time out and whose count bolt raised: Health and errors as nimbus says them."""

    def cluster(self) -> Any:
        summary = cluster_summary()
        summary.topologies[0].sched_status = TROUBLE
        return summary

    def cluster_and_blacklist(self) -> tuple[Any, list[str]]:
        return self.cluster(), []

    def topology(self, topology_id: str) -> TopologyParts:
        parts = super().topology(topology_id)
        parts.info.sched_status = TROUBLE
        parts.info.errors = {"count": [storm.ErrorInfo(error=TRACEBACK, error_time_secs=NOW - 30, host="h1",
                                                       port=6700)],
                             "__topology_master": [storm.ErrorInfo(error=RESTARTED, error_time_secs=NOW - 50)]}
        return parts


def test_health_and_errors_have_their_own_columns_and_an_error_shows_by_its_exception() -> None:
    """The cluster page: Health, then the errors apart; the topology page: its Health, each last error by its
    exception (the traceback's last line, not its first 200 characters) linking to the component page, and the
    traceback itself one click away."""
    troubled = TestClient(create_app({"ui.nimbus.timeout.secs": 1}, source=TroubledSource(),  # type: ignore[arg-type]
                                     clock=FixedClock()))
    cluster = troubled.get("/").text
    header, row = rows(cluster, "topologies")
    assert header[-2:] == ["Health", "Errors"] and "Scheduler info" not in cluster
    assert row[-2:] == ["failing: 40 of 50 trees timed out in 10 min; 1 worker restarted by nimbus in 10 min: "
                        "no heartbeat", "errors: count (30 s ago): KeyError: &lt;b&gt;the&lt;/b&gt;"]
    healthy = rows(TestClient(create_app({"ui.nimbus.timeout.secs": 1}, source=StructSource(),  # type: ignore[arg-type]
                                         clock=FixedClock())).get("/").text, "topologies")[1]
    assert healthy[-2:] == ["ok", ""]

    page = troubled.get("/topology/wc-1-1").text
    summary_header, summary = rows(page, "topology-summary")
    assert (summary_header[-1], summary[-1]) == ("Health", TROUBLE.split("; errors")[0])
    count = next(r for r in rows(page, "bolts")[1:] if r[0] == "count")
    assert count[-1].startswith("KeyError: &lt;b&gt;the&lt;/b&gt;")
    assert 'href="/topology/wc-1-1/component/count#component-errors" title="KeyError: &lt;b&gt;the&lt;/b&gt;"' in page
    topology_error, error = rows(page, "errors")[1:]
    assert topology_error[0] == "__topology_master" and topology_error[3].startswith(RESTARTED), \
        "the topology's own errors (nimbus files them under its topology master) without ?sys=1"
    _, (line, traceback) = re.findall(r'<details class="traceback"><summary>(.*?)</summary><pre>(.*?)</pre></details>',
                                      page, re.S)
    assert line == "KeyError: &lt;b&gt;the&lt;/b&gt;"
    assert traceback.startswith("Traceback (most recent call last):") and traceback.endswith(
        "KeyError: &lt;b&gt;the&lt;/b&gt;"), "the whole traceback, folded under its exception"
    assert error[3].startswith("KeyError: &lt;b&gt;the&lt;/b&gt; Traceback")
    api = valid(troubled.get("/api/v1/topology/wc-1-1"), "/api/v1/topology/{id}")
    row = next(b for b in api["bolts"] if b["boltId"] == "count")
    assert (row["lastErrorSummary"], len(row["lastError"])) == ("KeyError: <b>the</b>", 200), \
        "Storm's lastError as it was; its exception beside it"
    assert api["schedulerInfo"] == TROUBLE, "Storm's field holds the whole Health"
    (listed,) = valid(troubled.get("/api/v1/topology/summary"), "/api/v1/topology/summary")["topologies"]
    assert listed["schedulerInfo"] == TROUBLE
