"""Prometheus ``/metrics`` on the UI daemon (:mod:`ui.metrics`): against nimbus's structs (test_ui_pages's
``StructSource``), with nimbus gone, through the sample Grafana dashboard, and scraped twice during a running
word count whose sink records what it received."""

from __future__ import annotations

import doctest
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

import ui.metrics
from examples import wordcount
from minicluster import REPO, MiniCluster
from squall.api.dsl import Topology
from squall.core.config.loading import load_config
from squall.dev.zookeeper import free_port
from support import wait_until
from test_ui import cluster, ui_in_front_of  # noqa: F401  (cluster is a fixture)
from test_ui_pages import HOSTILE, FixedClock, StructSource
from topologies import Arrivals, Metered, Numbers, Picky, read_records
from ui.app import create_app

DASHBOARD = REPO / "deploy" / "grafana" / "squall-dashboard.json"

#: (sample name, labels as a sorted tuple of pairs) → value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, as prometheus_client's own parser reads it."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(scraped: Samples, name: str, **labels: str) -> float:
    return scraped[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def struct_ui() -> TestClient:
    app = create_app({"ui.nimbus.timeout.secs": 1}, source=StructSource(), clock=FixedClock())  # type: ignore[arg-type]
    return TestClient(app)


def test_metrics_say_what_the_rest_api_says(struct_ui: TestClient) -> None:
    response = struct_ui.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain; version=0.0.4")
    scraped = samples(response.text)
    assert value(scraped, "squall_up") == 1
    assert (value(scraped, "squall_supervisors"), value(scraped, "squall_slots", state="used"),
            value(scraped, "squall_slots", state="free")) == (2, 2, 6)
    assert value(scraped, "squall_supervisor_slots", supervisor="sup-1", host="h1", state="used") == 2
    assert value(scraped, "squall_topologies", status="ACTIVE") == 1
    assert value(scraped, "squall_topology_info", topology="wc", topology_id="wc-1-1", status="ACTIVE", owner="") == 1

    api = struct_ui.get("/api/v1/topology/wc-1-1").json()
    rows = {row.get("spoutId", row.get("boltId")): row for row in (*api["spouts"], *api["bolts"])}
    assert set(rows) == {"sentences", "split", "count", HOSTILE}
    for component, row in rows.items():
        for stat in ("emitted", "transferred", "acked", "failed", *(("executed",) if "boltId" in row else ())):
            assert value(scraped, f"squall_component_{stat}_total", topology="wc", component=component) == row[stat]
    assert value(scraped, "squall_component_complete_latency_seconds", topology="wc", component="sentences") == \
        pytest.approx(float(rows["sentences"]["completeLatency"]) / 1000)
    assert value(scraped, "squall_component_capacity", topology="wc", component="split") == \
        pytest.approx(float(rows["split"]["capacity"])) == pytest.approx(0.12)
    assert value(scraped, "squall_component_execute_latency_seconds", topology="wc", component="count") == 0.001
    stats = api["topologyStats"][-1]
    assert stats["window"] == ":all-time", "/metrics counts since each task started"
    assert [value(scraped, f"squall_topology_{stat}_total", topology="wc") for stat in ("emitted", "acked")] == [
        stats["emitted"], stats["acked"]]
    task = {"topology": "wc", "component": "split", "task": "2", "host": "h1", "port": "6701"}
    assert value(scraped, "squall_task_executed_total", **task) == 500
    assert value(scraped, "squall_task_capacity", **task) == pytest.approx(0.12)
    assert not [key for key in scraped if "__acker" in str(key) or "__ack" in str(key)], "system parts left out"


def test_an_openmetrics_scraper_gets_openmetrics(struct_ui: TestClient) -> None:
    response = struct_ui.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    parsed = {f.name: f for f in openmetrics_families(response.text)}
    assert parsed["squall_component_emitted"].type == "counter"


def test_without_nimbus_the_scrape_answers_up_0_within_the_timeout() -> None:
    conf = {**load_config(env={}), "nimbus.seeds": [f"127.0.0.1:{free_port()}"], "ui.nimbus.timeout.secs": 0.5}
    started = time.monotonic()
    response = TestClient(create_app(conf)).get("/metrics")
    assert time.monotonic() - started < 10
    assert response.status_code == 200 and samples(response.text) == {("squall_up", ()): 0}


def test_the_grafana_dashboard_asks_only_for_metrics_that_metrics_exposes(struct_ui: TestClient) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exposed = {name for name, _labels in samples(struct_ui.get("/metrics").text)}
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queries += [variable["definition"] for variable in dashboard["templating"]["list"]]
    asked = {name for query in queries for name in re.findall(r"\bsquall_[a-z_]+", query)}
    assert {"squall_component_emitted_total", "squall_topology_acked_total", "squall_topology_failed_total",
            "squall_component_complete_latency_seconds"} <= asked, "rates per component, acked/failed, latency"
    assert asked <= exposed, f"not exposed: {asked - exposed}"
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
    assert {panel["datasource"]["uid"] for panel in dashboard["panels"]} == {"${DS_PROMETHEUS}"}
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"], "Grafana's import asks for a Prometheus"


def test_the_examples_in_the_docstrings_hold() -> None:
    result = doctest.testmod(ui.metrics)
    assert result.attempted and not result.failed


@pytest.mark.slow
def test_rates_scraped_during_a_word_count_agree_with_what_its_sink_received(
        cluster: MiniCluster, tmp_path: Path) -> None:  # noqa: F811
    """Per-component rates from two scrapes agree within 5 % with the sink's own count of
    what arrived between them. The spouts are paced (2 tasks × 10 sentences/s), so the flow is steady and the
    second or so that stats take to reach nimbus shifts both scrapes alike."""
    records = tmp_path / "records"
    records.mkdir()
    t = Topology("wordcount", conf={"topology.workers": 2})
    sentences = t.spout("sentences", wordcount.SentenceSpout, args=[None, 10], parallelism=2)
    split = t.bolt("split", wordcount.SplitSentence, parallelism=4).shuffle(sentences)
    count = t.bolt("count", wordcount.WordCount, parallelism=4).fields(split, "word")
    t.bolt("sink", Arrivals, args=[str(records)], parallelism=2).shuffle(count)
    topology_id = cluster.submit(t)
    cluster.start_workers(topology_id)
    words_per_sentence = sum(len(s.split()) for s in wordcount.SENTENCES) / len(wordcount.SENTENCES)

    def arrived(since: float, until: float = float("inf")) -> int:
        return sum(since <= at < until for at in read_records(records, "arrived"))

    with ui_in_front_of(cluster.conf, cluster.nimbus.port) as ui:
        def scrape() -> tuple[float, Samples]:
            at = time.time()
            return at, samples(ui.get("/metrics").text)

        def reported() -> bool:
            return ("squall_component_executed_total", (("component", "sink"), ("topology", "wordcount"))) in \
                scrape()[1]

        wait_until(reported, 90, "the sink's stats reaching nimbus")
        warm = time.time()
        wait_until(lambda: arrived(warm) >= 600, 60, "5 s of steady flow after the start")
        first_at, first = scrape()
        # ~40 s: each scrape sees the stats of the last beats to reach nimbus, up to a second or so old on a busy
        # host, and a difference of that lag between the two scrapes must stay well inside the 5 %
        wait_until(lambda: arrived(first_at) >= 5000, 150, "~40 s of words at the sink")
        second_at, second = scrape()

    seconds = second_at - first_at
    sink_rate = arrived(first_at, second_at) / seconds

    def rate(stat: str, component: str) -> float:
        name, labels = f"squall_component_{stat}_total", (("component", component), ("topology", "wordcount"))
        return (second[(name, labels)] - first[(name, labels)]) / seconds

    measured = {
        "sentences emitted × words per sentence": rate("emitted", "sentences") * words_per_sentence,
        "split executed × words per sentence": rate("executed", "split") * words_per_sentence,
        "split emitted": rate("emitted", "split"),
        "count executed": rate("executed", "count"),
        "count emitted": rate("emitted", "count"),
        "sink executed": rate("executed", "sink"),
        "sink acked": rate("acked", "sink"),
    }
    assert 100 < sink_rate < 160, f"the paced flow: 20 sentences/s of {words_per_sentence} words, got {sink_rate}"
    off = {what: r for what, r in measured.items() if abs(r - sink_rate) > 0.05 * sink_rate}
    assert not off, f"the sink received {sink_rate:.1f} words/s over {seconds:.1f} s; /metrics says {measured}"
    trees = (second[("squall_topology_acked_total", (("topology", "wordcount"),))]
             - first[("squall_topology_acked_total", (("topology", "wordcount"),))]) / seconds
    assert trees == pytest.approx(sink_rate / words_per_sentence, rel=0.05), "each sentence's tree acked"

    cluster.nimbus.stop()
    with ui_in_front_of({**cluster.conf, "ui.nimbus.timeout.secs": 1}, cluster.nimbus.port) as ui:
        assert samples(ui.get("/metrics").text) == {("squall_up", ()): 0}


@pytest.mark.slow
def test_failures_by_reason_and_user_metrics_reach_the_rest_api_and_metrics(cluster: MiniCluster) -> None:  # noqa: F811
    """60 numbers through a bolt with user metrics (a counter, a gauge, a histogram) into a picky bolt that fails
    six by an exception, six by ``fail`` and holds one until its tree times out; each fails once (replays are
    acked), so every count is exact once all 60 are acked: the metered bolt saw 60 + 13 replays."""
    t = Topology("reasons", conf={"topology.message.timeout.secs": 3})
    numbers = t.spout("numbers", Numbers, args=[60])
    metered = t.bolt("metered", Metered).shuffle(numbers)
    t.bolt("picky", Picky).shuffle(metered)
    topology_id = cluster.submit(t)
    cluster.start_workers(topology_id)
    component = f"/api/v1/topology/{topology_id}/component"
    with ui_in_front_of(cluster.conf, cluster.nimbus.port) as ui:
        def all_time(page: dict[str, Any]) -> dict[str, Any]:
            return (page.get("spoutSummary") or page["boltStats"])[-1]

        def settled() -> bool:
            spout = all_time(ui.get(f"{component}/numbers").json())
            metered_page = ui.get(f"{component}/metered").json()
            return spout["acked"] == 60 and {m["name"]: m["value"] for m in metered_page["userMetrics"]}.get(
                "seen") == 73

        wait_until(settled, 120, "all 60 numbers acked and their stats at nimbus")
        spout = ui.get(f"{component}/numbers").json()
        picky = ui.get(f"{component}/picky").json()
        assert {k: all_time(spout)[k] for k in ("failed", "failedTimeout", "failedExplicit", "failedException")} == {
            "failed": 13, "failedTimeout": 1, "failedExplicit": 12, "failedException": 0}
        assert {k: all_time(picky)[k] for k in ("failed", "failedTimeout", "failedExplicit", "failedException")} == {
            "failed": 12, "failedTimeout": 0, "failedExplicit": 6, "failedException": 6}
        assert "RuntimeError: picky about" in picky["componentErrors"][-1]["error"]
        topology = ui.get(f"/api/v1/topology/{topology_id}").json()
        assert topology["topologyStats"][-1]["failedTimeout"] == 1, "the topology's failures are its spouts' trees"

        metrics = {(m["name"], m["type"]): m["value"] for m in ui.get(f"{component}/metered").json()["userMetrics"]}
        assert metrics[("seen", "counter")] == metrics[("n.sizes.count", "counter")] == 73
        assert metrics[("n.sizes.max", "gauge")] == 59 and metrics[("last.n", "gauge")] in range(60)
        (task,) = {m["task"] for m in ui.get(f"{component}/metered").json()["userMetrics"]}

        scraped = samples(ui.get("/metrics").text)
        labels = {"topology": "reasons", "component": "metered", "task": task}
        user = {(name, dict(pairs)["name"]): v for (name, pairs), v in scraped.items()
                if name.startswith("squall_user_") and labels.items() <= dict(pairs).items()}
        assert user[("squall_user_counter_total", "seen")] == 73 and user[("squall_user_gauge", "n.sizes.max")] == 59
        assert value(scraped, "squall_component_failures_total", topology="reasons", component="picky",
                     reason="exception") == 6
        assert value(scraped, "squall_topology_failures_total", topology="reasons", reason="timeout") == 1
