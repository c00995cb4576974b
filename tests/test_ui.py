"""``storm ui``'s REST API over real sockets: a UI server in front of a real nimbus (the session's ZooKeeper,
worker processes for the running word count), asked what Storm's UI is asked — by HTTP, by streamparse's
own ``sparse stats`` / ``worker_uptime`` / ``slot_usage`` code, and by ``storm ui`` run as a process
whose nimbus is gone. Every response checked here also validates against the API's OpenAPI schema."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from starlette.routing import Route

from examples import wordcount
from minicluster import REPO, MiniCluster
from support import wait_until
from ui.app import create_app
from ui.openapi import document
from ui.server import UiServer

OPENAPI = document()


def valid(response: httpx.Response, path: str) -> Any:
    """The response's JSON, once it validates against what the OpenAPI document says ``path`` answers."""
    method = response.request.method
    spec = OPENAPI["paths"][path][method.lower()]["responses"].get(str(response.status_code))
    assert spec is not None, f"{method} {path} answered {response.status_code}, which it does not document"
    body = response.json()
    schema = spec["content"]["application/json"]["schema"]
    jsonschema.validate(body, {**schema, "components": OPENAPI["components"]}, cls=jsonschema.Draft202012Validator)
    return body


@contextmanager
def ui_in_front_of(conf: dict[str, Any], nimbus_port: int) -> Iterator[httpx.Client]:
    """A UI server on a free port that finds nimbus by seed, and an HTTP client of it."""
    server = UiServer({**conf, "nimbus.seeds": [f"127.0.0.1:{nimbus_port}"], "ui.host": "127.0.0.1",
                       "ui.port": 0}).start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as client:
            yield client
    finally:
        server.stop()


def storm_list(nimbus_port: int) -> list[str]:
    """The first topology's name and status as ``storm list``, typed in a shell, shows them."""
    shown = subprocess.run([sys.executable, "-m", "squall.cli", "-c", f'nimbus.seeds=["127.0.0.1:{nimbus_port}"]',
                            "list"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.splitlines()[2].split()[:2]


@pytest.fixture
def cluster(zk_conf: dict[str, Any], tmp_path: Path) -> Iterator[MiniCluster]:
    with ExitStack() as stack:
        yield MiniCluster(zk_conf, tmp_path, stack)


def test_the_openapi_document_describes_exactly_the_routes_served() -> None:
    app = create_app({"ui.nimbus.timeout.secs": 1})
    served = {(r.path, m.lower()) for r in app.routes if isinstance(r, Route) and r.include_in_schema
              for m in r.methods or () if m != "HEAD"}
    described = {(path, method) for path, item in OPENAPI["paths"].items() for method in item}
    assert served == described
    for schema in OPENAPI["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.slow
def test_a_running_word_count_seen_through_the_rest_api_and_streamparse(
        cluster: MiniCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    rounds = 30
    sentences = rounds * len(wordcount.SENTENCES)
    words = rounds * sum(len(s.split()) for s in wordcount.SENTENCES)
    # every batch's first tuple timed to its ack: each bolt task surely has some process latency to show
    topology_id = cluster.submit(wordcount.topology(rounds, workers=2), topology_stats_sample_rate=1.0)
    workers = cluster.start_workers(topology_id)
    with ui_in_front_of(cluster.conf, cluster.nimbus.port) as ui:
        page = f"/api/v1/topology/{topology_id}"

        def finished() -> dict[str, Any] | None:
            body = valid(ui.get(page), "/api/v1/topology/{id}")
            counts = {b["boltId"]: b["executed"] for b in body["bolts"]}
            done = body["topologyStats"][-1]["acked"] == sentences and counts == {"split": sentences, "count": words}
            return body if done else None

        topology = wait_until(finished, 90, "every sentence acked and every word counted, as the REST API says")
        assert (topology["name"], topology["status"], topology["workersTotal"]) == ("wordcount", "ACTIVE", 2)
        assert (topology["tasksTotal"], topology["executorsTotal"], topology["msgTimeout"]) == (12, 12, 5)
        *windows, stats = topology["topologyStats"]
        assert (stats["window"], stats["windowPretty"], stats["failed"]) == (":all-time", "All time", 0)
        assert [(w["window"], w["acked"], w["emitted"]) for w in windows] == [
            (w, sentences, stats["emitted"]) for w in ("600", "10800", "86400")], \
            "nimbus's windows: a topology younger than 10 minutes did all it did in each of them"
        assert (stats["emitted"], stats["transferred"]) == (sentences + 2 * words, sentences + words), \
            "sentences, words and counts emitted; counts go nowhere"
        assert float(stats["completeLatency"]) > 0
        (spout,) = topology["spouts"]
        assert {k: spout[k] for k in ("spoutId", "executors", "emitted", "acked", "failed", "lastError")} == {
            "spoutId": "sentences", "executors": 2, "emitted": sentences, "acked": sentences, "failed": 0,
            "lastError": ""}
        split = next(b for b in topology["bolts"] if b["boltId"] == "split")
        assert (split["emitted"], split["acked"], split["tasks"]) == (words, sentences, 4)
        assert 0 <= float(split["capacity"]) < 1 and float(split["executeLatency"]) > 0
        assert all(float(b["processLatency"]) > 0 for b in topology["bolts"]), "execute's start to the ack, sampled"
        assert sorted((w["host"], w["port"]) for w in topology["workers"]) == sorted(
            ("127.0.0.1", w.port) for w in workers)
        assert sum(w["executorsTotal"] for w in topology["workers"]) == 12
        with_system = valid(ui.get(page, params={"sys": "1"}), "/api/v1/topology/{id}")
        assert {"__acker", "__topology_master"} <= {b["boltId"] for b in with_system["bolts"]}

        spout_page = valid(ui.get(f"{page}/component/sentences"), "/api/v1/topology/{id}/component/{component}")
        assert (spout_page["componentType"], spout_page["tasks"], spout_page["spoutSummary"][-1]["acked"]) == (
            "spout", 2, sentences)
        assert sum(e["emitted"] for e in spout_page["executorStats"]) == sentences
        count_page = valid(ui.get(f"{page}/component/count"), "/api/v1/topology/{id}/component/{component}")
        assert [(i["component"], i["stream"], i["executed"]) for i in count_page["inputStats"]] == [
            ("split", "default", words)]

        cluster_summary = valid(ui.get("/api/v1/cluster/summary"), "/api/v1/cluster/summary")
        assert {k: cluster_summary[k] for k in ("supervisors", "topologies", "slotsTotal", "slotsUsed", "tasksTotal")} \
            == {"supervisors": 2, "topologies": 1, "slotsTotal": 4, "slotsUsed": 2, "tasksTotal": 12}
        supervisors = valid(ui.get("/api/v1/supervisor/summary"), "/api/v1/supervisor/summary")["supervisors"]
        assert sorted(s["id"] for s in supervisors) == cluster.supervisor_ids
        (nimbus,) = valid(ui.get("/api/v1/nimbus/summary"), "/api/v1/nimbus/summary")["nimbuses"]
        assert (nimbus["port"], nimbus["status"]) == (cluster.nimbus.port, "Leader")
        (listed,) = valid(ui.get("/api/v1/topology/summary"), "/api/v1/topology/summary")["topologies"]
        assert (listed["id"], listed["workersTotal"]) == (topology_id, 2)
        configuration = valid(ui.get("/api/v1/cluster/configuration"), "/api/v1/cluster/configuration")
        assert configuration["storm.zookeeper.root"] == cluster.conf["storm.zookeeper.root"]

        # streamparse's own commands, talking to this UI as to Storm's (config.json is a streamparse project's)
        import streamparse.util
        from streamparse.cli import slot_usage, stats, worker_uptime
        (tmp_path / "config.json").write_text(json.dumps({"envs": {"squall": {
            "nimbus": f"127.0.0.1:{cluster.nimbus.port}", "use_ssh_for_nimbus": False, "ui.port": ui.base_url.port}}}))
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(streamparse.util, "_config", None)
        capsys.readouterr()
        stats._print_cluster_status("squall")
        stats._print_topology_status("squall", "wordcount")
        stats._print_component_status("squall", "wordcount", "sentences")
        stats._print_component_status("squall", "wordcount", "split")
        worker_uptime.display_worker_uptime("squall")
        slot_usage.display_slot_usage("squall")
        shown = capsys.readouterr().out
    assert "MISSING" not in shown, shown
    for title in ("# Cluster summary", "# Topology stats", "# Spouts (All time)", "# Bolt (All time)",
                  "# Executors (All time)", "# Input stats (All time)", "# Worker Stats",
                  "# Slot (and Executor) Counts by Topology"):
        assert title in shown, shown
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in shown.splitlines()
             if line.startswith("|")]
    assert ["wordcount", topology_id, "ACTIVE"] == cells[cells.index(["name", "id", "status", "uptime", "workersTotal",
                                                                      "executorsTotal", "tasksTotal"]) + 1][:3]
    spout_row = next(row for row in cells if row[0] == "sentences" and len(row) == 6)  # Spouts (All time)
    assert (spout_row[1], spout_row[4], spout_row[5]) == (str(sentences), str(sentences), "0"), "emitted, acked, failed"
    assert ["127.0.0.1", "2 (10)"] in cells, "slot_usage: the word count's 2 workers and its 10 user executors"


def test_actions_reach_nimbus_and_unknown_ids_are_404(cluster: MiniCluster) -> None:
    topology_id = cluster.submit(wordcount.topology(workers=2))

    def listed() -> list[str]:
        return storm_list(cluster.nimbus.port)

    with ui_in_front_of(cluster.conf, cluster.nimbus.port) as ui:
        action = "/api/v1/topology/{id}/deactivate"
        assert valid(ui.post(f"/api/v1/topology/{topology_id}/deactivate"), action) == {
            "topologyOperation": "deactivate", "topologyId": topology_id, "status": "success"}
        assert listed() == ["wordcount", "INACTIVE"]
        valid(ui.post(f"/api/v1/topology/{topology_id}/activate"), "/api/v1/topology/{id}/activate")
        assert listed() == ["wordcount", "ACTIVE"]

        rebalance = "/api/v1/topology/{id}/rebalance/{wait_time}"
        refused = valid(ui.post(f"/api/v1/topology/{topology_id}/rebalance/0",
                                json={"rebalanceOptions": {"numWorkers": 0}}), rebalance)
        assert refused["error"] == "400 Bad Request" and "numWorkers" in refused["errorMessage"]
        nimbus_refused = valid(ui.post(f"/api/v1/topology/{topology_id}/rebalance/0",
                                       json={"rebalanceOptions": {"executors": {"nope": 2}}}), rebalance)
        assert nimbus_refused["error"] == "400 Bad Request" and "nope" in nimbus_refused["errorMessage"], \
            "nimbus's InvalidTopologyException, its message passed on"
        valid(ui.post(f"/api/v1/topology/{topology_id}/rebalance/0", json={"rebalanceOptions": {"numWorkers": 3}}),
              rebalance)
        wait_until(lambda: len(cluster.assignment(topology_id).workers) == 3, 30, "the rebalance to 3 workers")

        missing = valid(ui.get("/api/v1/topology/nosuch-1-1"), "/api/v1/topology/{id}")
        assert missing == {"error": "404 Not Found", "errorMessage": "no topology with id nosuch-1-1"}
        for path in ("/api/v1/topology/nosuch-1-1/activate", "/api/v1/topology/nosuch-1-1/kill/0"):
            assert ui.post(path).status_code == 404
        component = valid(ui.get(f"/api/v1/topology/{topology_id}/component/nope"),
                          "/api/v1/topology/{id}/component/{component}")
        assert component["error"] == "404 Not Found"
        assert component["errorMessage"].endswith("its components are count, sentences, split")

        kill = "/api/v1/topology/{id}/kill/{wait_time}"
        assert valid(ui.post(f"/api/v1/topology/{topology_id}/kill/0"), kill)["topologyOperation"] == "kill"
        wait_until(lambda: valid(ui.get("/api/v1/topology/summary"), "/api/v1/topology/summary")["topologies"] == [],
                   30, "the killed topology removed")

        cluster.nimbus.stop()
        down = valid(ui.get("/api/v1/cluster/summary"), "/api/v1/cluster/summary")
        assert down["error"] == "503 Service Unavailable" and "cannot reach nimbus" in down["errorMessage"]
        assert ui.get("/api/v1/openapi.json").status_code == 200, "the daemon keeps serving"


def serving_port(log_file: Path, daemon: str = "ui") -> int | None:
    """The port ``storm ui`` (or another HTTP daemon: ``logviewer``) reported in its JSON log once it serves."""
    for line in log_file.read_text(errors="replace").splitlines():
        if line.startswith("{") and (entry := json.loads(line)).get("event") == f"{daemon} started":
            return int(entry["port"])
    return None


def test_storm_ui_answers_503_while_nimbus_hangs_or_is_gone_and_keeps_serving(tmp_path: Path) -> None:
    """``storm ui`` as a user starts it, its seed a nimbus that accepts connections and never answers; then
    one that is gone. Each request ends within the timeout, as a 503 in Storm's shape; SIGTERM stops it."""
    hung = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody ever reads or answers
    log_file = tmp_path / "ui.log"
    argv = [sys.executable, "-m", "squall.cli", "-c", "ui.port=0", "-c", "ui.host=127.0.0.1",
            "-c", "ui.nimbus.timeout.secs=0.5", "-c", "squall.log.format=json",
            "-c", f'nimbus.seeds=["127.0.0.1:{hung.getsockname()[1]}"]', "ui"]
    with open(log_file, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        port = wait_until(lambda: serving_port(log_file) or process.poll(), 60, "storm ui serving")
        assert process.poll() is None, log_file.read_text()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as ui:
            started = time.monotonic()
            waited = valid(ui.get("/api/v1/topology/summary"), "/api/v1/topology/summary")
            assert time.monotonic() - started < 10, "bounded by ui.nimbus.timeout.secs, not the Thrift default"
            assert waited["error"] == "503 Service Unavailable" and "timed out" in waited["errorMessage"], waited
            hung.close()
            gone = valid(ui.get("/api/v1/cluster/summary"), "/api/v1/cluster/summary")
            assert gone["error"] == "503 Service Unavailable", gone
            assert ui.get("/api/v1/openapi.json").json()["openapi"] == "3.1.0"
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        hung.close()
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_port_in_use_is_refused_when_the_server_is_built() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"the UI cannot listen on 127.0.0.1:{port} .ui.host, ui.port.: "):
            UiServer({"ui.host": "127.0.0.1", "ui.port": port, "ui.nimbus.timeout.secs": 1})
