"""Worker logs over HTTP against a running word count: ``storm logviewer`` started as a user starts it on the
cluster's host, the UI's log links (REST API and pages) opening the worker's own log lines there, the
logviewer refusing names outside its directory and reads past its bounds, and ``storm logs`` printing and
following the topology's logs through it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from examples import wordcount
from logviewer.files import MAX_PAGE
from minicluster import REPO, MiniCluster
from squall.core.local_state import log_dir, worker_log_name
from support import wait_until
from test_ui import cluster, serving_port, ui_in_front_of, valid  # noqa: F401  (cluster: the fixture)


def storm(*argv: str, conf: dict[str, str]) -> list[str]:
    """``storm`` as typed in a shell, with ``-c key=value`` for each of ``conf``."""
    overrides = [arg for key, value in conf.items() for arg in ("-c", f"{key}={value}")]
    return [sys.executable, "-m", "squall.cli", *overrides, *argv]


@pytest.fixture
def logviewer(cluster: MiniCluster, tmp_path: Path) -> Iterator[int]:  # noqa: F811
    """``storm logviewer`` over the cluster's worker logs, on a free port: its port."""
    log_file = tmp_path / "logviewer.log"
    conf = {"storm.log.dir": str(log_dir(cluster.conf)), "logviewer.port": "0", "logviewer.host": "127.0.0.1",
            "squall.log.format": "json"}
    with open(log_file, "wb") as out:
        process = subprocess.Popen(storm("logviewer", conf=conf), stdout=out, stderr=subprocess.STDOUT,
                                   cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        port = wait_until(lambda: serving_port(log_file, "logviewer") or process.poll() is not None, 60,
                          "storm logviewer serving")
        assert process.poll() is None, log_file.read_text()
        yield port
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, log_file.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


@pytest.mark.slow
def test_a_component_s_log_link_opens_its_worker_s_log_lines_on_the_logviewer(
        cluster: MiniCluster, logviewer: int, tmp_path: Path) -> None:  # noqa: F811
    topology_id = cluster.submit(wordcount.topology(workers=2))
    workers = cluster.start_workers(topology_id)
    with ui_in_front_of({**cluster.conf, "logviewer.port": logviewer}, cluster.nimbus.port) as ui:
        page = f"/api/v1/topology/{topology_id}/component/count"
        executors = wait_until(lambda: valid(ui.get(page), "/api/v1/topology/{id}/component/{component}")[
            "executorStats"], 60, "the count bolt's executors")
        links = {(e["host"], e["port"]): e["workerLogLink"] for e in executors}
        assert links == {("127.0.0.1", w.port): f"http://127.0.0.1:{logviewer}/api/v1/log?file="
                         f"{worker_log_name(topology_id, w.port)}" for w in workers}
        topology = valid(ui.get(f"/api/v1/topology/{topology_id}"), "/api/v1/topology/{id}")
        assert {w["workerLogLink"] for w in topology["workers"]} == set(links.values())
        html = ui.get(f"/topology/{topology_id}/component/count").text
        assert all(f'<a href="{link}">' in html for link in links.values()), "the component page links them"

        with httpx.Client(timeout=30) as browser:
            # WordCount logs its totals every 5 s (its tick): its own lines, in its worker's log
            def counted(link: str) -> str | None:
                shown = browser.get(link)
                assert shown.status_code == 200, shown.text
                return shown.text if "word counts" in shown.text else None

            shown = wait_until(lambda: counted(next(iter(links.values()))), 60, "the count bolt's lines on its log page")
            assert "worker runtime started" in shown and topology_id in shown

            base = f"http://127.0.0.1:{logviewer}/api/v1"
            for name in ("../../../../etc/passwd", str(tmp_path / "logviewer.log"), "../logviewer.log"):
                refused = browser.get(f"{base}/read", params={"file": name})
                assert refused.status_code == 403 and "root:" not in refused.text, name
            log_name = worker_log_name(topology_id, workers[0].port)
            too_long = browser.get(f"{base}/read", params={"file": log_name, "length": MAX_PAGE + 1})
            assert too_long.status_code == 400 and str(MAX_PAGE) in too_long.json()["errorMessage"]
            assert browser.get(f"{base}/listLogs", params={"topoId": topology_id}).json() == sorted(
                worker_log_name(topology_id, w.port) for w in workers)

    conf = {"nimbus.seeds": f'["127.0.0.1:{cluster.nimbus.port}"]', "logviewer.port": str(logviewer)}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    printed = subprocess.run(storm("logs", "wordcount", "count", conf=conf), capture_output=True, timeout=60,
                             env=env, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    headers = [line for line in printed.stdout.decode().splitlines() if line.startswith("==> ")]
    assert headers == [f"==> 127.0.0.1:{w.port} (count, sentences, split) <==" for w in sorted(
        workers, key=lambda w: w.port)]
    assert printed.stdout.count(b"word counts") >= 1
    unknown = subprocess.run(storm("logs", "wordcount", "nope", conf=conf), capture_output=True, text=True,
                             timeout=60, env=env, cwd=tmp_path)
    assert unknown.returncode == 1 and "its components are count, sentences, split" in unknown.stderr

    followed = tmp_path / "followed.out"
    with open(followed, "wb") as out:
        follower = subprocess.Popen(storm("logs", "wordcount", "-f", "-b", "200", conf=conf), stdout=out,
                                    stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        wait_until(lambda: followed.read_bytes().count(b"==> ") >= 2, 60, "both workers' tails printed")
        with open(cluster.worker_log(topology_id, workers[1]), "ab") as log:  # a line as its worker writes one
            log.write(b"a line written while storm logs -f follows\n")
        wait_until(lambda: b"a line written while storm logs -f follows" in followed.read_bytes(), 30,
                   "the new line followed")
        follower.send_signal(signal.SIGINT)
        assert follower.wait(30) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(10)
    first_tail = followed.read_bytes().split(b"==> ")[1].split(b"<==\n", 1)[1]
    assert re.match(rb"\d{4}-\d\d-\d\dT[\d:.]+Z [A-Z]+ ", first_tail), "-b 200: from the start of a line, readable"
