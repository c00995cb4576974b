"""``storm ui``'s pages in headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by
selenium; deploy/install-system-deps.sh --for-tests installs them, nothing downloads a browser) against a
real cluster running the word count: a person's path through the UI, clicking as a person does.

Screenshots of the cluster, topology and component pages and of a worker's log are written to ``screenshots/``
under the test's tmp path and, when ``SQUALL_SCREENSHOTS`` names a directory, there too (docs/ui-*.png are from
such a run).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException, NoSuchElementException, StaleElementReferenceException,
)
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from examples import wordcount
from minicluster import MiniCluster
from squall.api.dsl import Topology
from squall.core.local_state import daemon_log_name, log_dir
from squall.core.logs import configure_logging
from support import wait_until
from test_ui import cluster, storm_list, ui_in_front_of, valid  # noqa: F401  (cluster: the fixture)
from test_ui_logs import logviewer  # noqa: F401  (the fixture)
from topologies import Metered, Numbers, Picky

#: Chromium without what a test has no use for: no sandbox (tests may run as root), no network of its own
#: (updates, sync, safe browsing), one renderer process, a fixed window for same-sized screenshots.
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--disable-extensions", "--no-first-run", "--renderer-process-limit=1",
                  "--window-size=1280,900", "--hide-scrollbars")


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    """Headless Chromium from the system's packages (selenium is given both paths, so its Selenium Manager,
    which would download a browser, never runs)."""
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (browser and driver):
        pytest.fail("headless Chromium is not installed: run deploy/install-system-deps.sh --for-tests (make test "
                    "does), which installs Debian's chromium and chromium-driver")
    options = Options()
    options.binary_location = browser
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(executable_path=driver, log_output=str(tmp_path / "chromedriver.log")),
                              options=options)
    chrome.set_page_load_timeout(60)
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture
def nimbus_log(cluster: MiniCluster) -> Iterator[Path]:  # noqa: F811
    """The MiniCluster's nimbus runs in this process: it logs here as ``storm nimbus`` does (run_daemon), to its
    host's ``<storm.log.dir>/nimbus.log`` too, while the test lasts (the test's other lines with it)."""
    path = log_dir(cluster.conf) / daemon_log_name("nimbus")
    configure_logging("nimbus", fmt="json", log_file=path)
    try:
        yield path
    finally:
        structlog.reset_defaults()
        for handler in list(logging.getLogger().handlers):
            logging.getLogger().removeHandler(handler)
            handler.close()


def screenshot(chrome: webdriver.Chrome, tmp_path: Path, name: str) -> Path:
    """The whole page, beyond the window, as ``NAME.png`` for a person to look at (Chromium's DevTools
    capture: selenium's own screenshot stops at the window's edge)."""
    size = chrome.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = chrome.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
        "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    places = [tmp_path / "screenshots"] + ([Path(os.environ["SQUALL_SCREENSHOTS"])]
                                           if os.environ.get("SQUALL_SCREENSHOTS") else [])
    for place in places:
        place.mkdir(parents=True, exist_ok=True)
        (place / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
    return places[0] / f"{name}.png"


def text(chrome: webdriver.Chrome, css: str) -> str:
    """The element's text; "" while the page is (re)loading and it is not there."""
    try:
        return chrome.find_element(By.CSS_SELECTOR, css).text
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def confirmation(chrome: webdriver.Chrome) -> str | None:
    """The text of the dialog the page opened, if one is open."""
    try:
        return chrome.switch_to.alert.text
    except NoAlertPresentException:
        return None


@pytest.mark.slow
def test_a_person_sees_the_word_count_in_the_browser_opens_a_log_and_deactivates_it(
        cluster: MiniCluster, logviewer: int, chromium: webdriver.Chrome, tmp_path: Path,  # noqa: F811
        nimbus_log: Path) -> None:
    rounds = 200
    sentences = rounds * len(wordcount.SENTENCES)
    words = rounds * sum(len(s.split()) for s in wordcount.SENTENCES)
    topology_id = cluster.submit(wordcount.topology(rounds, workers=2))
    workers = cluster.start_workers(topology_id)
    with ui_in_front_of({**cluster.conf, "logviewer.port": logviewer}, cluster.nimbus.port) as api:
        api_page = f"/api/v1/topology/{topology_id}"

        def finished() -> bool:
            """Every sentence acked and every bolt's executions in: a spout's acks reach nimbus in its worker's
            beats, the bolts' counts in theirs, which may come later."""
            body = valid(api.get(api_page), "/api/v1/topology/{id}")
            executed = {b["boltId"]: b["executed"] for b in body["bolts"]}
            return body["topologyStats"][-1]["acked"] == sentences and executed == {"split": sentences, "count": words}

        wait_until(finished, 90, "every sentence acked and every word counted, as the REST API says")
        ui = str(api.base_url).rstrip("/")

        chromium.get(f"{ui}/")
        assert chromium.title == "Cluster · Squall UI"
        rows = chromium.find_elements(By.CSS_SELECTOR, "#topologies tr")
        assert [cell.text for cell in rows[1].find_elements(By.TAG_NAME, "td")][:4] == [
            "wordcount", topology_id, "", "ACTIVE"], "the cluster page lists the running word count"
        assert len(chromium.find_elements(By.CSS_SELECTOR, "#supervisors tr")) == 1 + len(cluster.supervisor_ids)
        screenshot(chromium, tmp_path, "cluster")

        chromium.find_element(By.CSS_SELECTOR, "#nimbuses a.log-link").click()  # the leader's host: its log
        wait_until(lambda: chromium.title.startswith("nimbus.log"), 30, "nimbus's own log, from the logviewer")
        shown = text(chromium, "pre.log")
        assert "topology submitted" in shown and topology_id in shown, "the line nimbus logged as it took the topology"
        chromium.back()
        wait_until(lambda: chromium.title.startswith("Cluster"), 30, "back on the cluster page")

        chromium.find_element(By.LINK_TEXT, cluster.supervisor_ids[0]).click()
        wait_until(lambda: chromium.title.startswith("Supervisor"), 30, "the supervisor's page")
        ports = [r.find_elements(By.TAG_NAME, "td")[1].text for r in
                 chromium.find_elements(By.CSS_SELECTOR, "#supervisor-workers tr")[1:]]
        its_own = [w for w in workers if w.supervisor_id == cluster.supervisor_ids[0]]
        assert sorted(ports) == sorted(str(w.port) for w in its_own), "its own workers, though all share 127.0.0.1"
        api_supervisor = valid(api.get("/api/v1/supervisor", params={"id": cluster.supervisor_ids[0]}),
                               "/api/v1/supervisor")
        assert api_supervisor["sharedHost"] and [w["supervisorId"] for w in api_supervisor["workers"]] == [
            cluster.supervisor_ids[0]] * len(its_own)
        chromium.find_element(By.LINK_TEXT, "Cluster").click()
        wait_until(lambda: chromium.title.startswith("Cluster"), 30, "back on the cluster page")

        chromium.find_element(By.LINK_TEXT, "wordcount").click()
        wait_until(lambda: chromium.title.startswith("wordcount"), 30, "the topology page")
        graph = chromium.find_element(By.ID, "topology-graph")
        assert graph.is_displayed() and graph.size["width"] > 300 and graph.size["height"] > 50
        nodes = {n.get_attribute("data-component") for n in graph.find_elements(By.CSS_SELECTOR, "a.node")}
        assert nodes == {"sentences", "split", "count"}
        edges = {(e.get_attribute("data-source"), e.get_attribute("data-target")): e
                 for e in graph.find_elements(By.CSS_SELECTOR, "g.edge")}
        assert set(edges) == {("sentences", "split"), ("split", "count")}
        for edge in edges.values():
            assert float(edge.get_attribute("data-rate")) > 0, "tuples flowed on every edge"
            label = edge.find_element(By.CSS_SELECTOR, "text.rate")
            assert label.is_displayed() and label.text.endswith("/s") and label.text != "0/s", label.text
        bolts = {r.find_elements(By.TAG_NAME, "td")[0].text: r for r in
                 chromium.find_elements(By.CSS_SELECTOR, "#bolts tr")[1:]}
        assert set(bolts) == {"split", "count"}
        assert text(chromium, "#topology-status") == "ACTIVE"
        screenshot(chromium, tmp_path, "topology")

        graph.find_element(By.CSS_SELECTOR, 'a.node[data-component="split"]').click()
        wait_until(lambda: chromium.title.startswith("split"), 30, "the split bolt's page, from its box in the graph")
        executors = [[cell.text for cell in r.find_elements(By.TAG_NAME, "td")]
                     for r in chromium.find_elements(By.CSS_SELECTOR, "#executors tr")[1:]]
        assert len(executors) == 4 and {e[1] for e in executors} <= {f"127.0.0.1:{w.port}" for w in workers}
        assert sum(int(e[7]) for e in executors) == sentences, "each executor's executed sentences add up"
        log_links = chromium.find_elements(By.CSS_SELECTOR, "#executors a")
        assert sorted(a.text for a in log_links) == sorted(e[1] for e in executors), "host:port links to each log"
        screenshot(chromium, tmp_path, "component")

        def distinct_words() -> float:
            metrics = valid(api.get(f"{api_page}/component/count"), "/api/v1/topology/{id}/component/{component}")
            return sum(m["value"] for m in metrics["userMetrics"] if m["name"] == "distinct.words")

        wait_until(lambda: distinct_words() == len({w for s in wordcount.SENTENCES for w in s.split()}), 30,
                   "the word count's user gauge: its tasks' distinct words add up to the sentences'")

        log_links[0].click()
        wait_until(lambda: chromium.title.endswith("· Squall logviewer"), 30, "the worker's log, from the logviewer")
        assert chromium.title.startswith(f"{topology_id}-worker-{executors[0][1].split(':')[1]}.log")
        assert "worker running" in text(chromium, "pre.log"), "the worker's own log lines"
        screenshot(chromium, tmp_path, "log")
        chromium.back()
        wait_until(lambda: chromium.title.startswith("split"), 30, "back on the split bolt's page")

        chromium.find_element(By.LINK_TEXT, "wordcount").click()
        wait_until(lambda: chromium.title.startswith("wordcount"), 30, "back on the topology page")
        chromium.find_element(By.ID, "rebalance").click()
        asked = wait_until(lambda: confirmation(chromium), 10, "the page to ask for the rebalance's wait")
        assert asked == 'Rebalance topology "wordcount"? Seconds nimbus waits first:'
        chromium.switch_to.alert.send_keys("soon")
        chromium.switch_to.alert.accept()
        wait_until(lambda: confirmation(chromium), 10, "the page to ask for a worker count")
        chromium.switch_to.alert.accept()
        wait_until(lambda: "refused" in text(chromium, "#action-result"), 30, "the REST API's refusal shown")
        assert text(chromium, "#action-result") == "Rebalance refused: wait-time must be whole seconds from 0 to 2147483647, got 'soon'"

        chromium.find_element(By.ID, "deactivate").click()
        asked = wait_until(lambda: confirmation(chromium), 10, "the page to ask before deactivating")
        assert asked == 'Deactivate topology "wordcount"?'
        chromium.switch_to.alert.dismiss()
        assert storm_list(cluster.nimbus.port) == ["wordcount", "ACTIVE"], "declined: nothing happens"

        chromium.find_element(By.ID, "deactivate").click()
        wait_until(lambda: confirmation(chromium), 10, "the confirmation again")
        chromium.switch_to.alert.accept()
        wait_until(lambda: text(chromium, "#topology-status") == "INACTIVE", 30, "the reloaded page to show INACTIVE")
        assert storm_list(cluster.nimbus.port) == ["wordcount", "INACTIVE"]
        assert chromium.find_element(By.ID, "deactivate").get_attribute("disabled") is not None


def table(chrome: webdriver.Chrome, table_id: str) -> list[list[str]]:
    """The text of each data row of a table of the page."""
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in chrome.find_elements(By.CSS_SELECTOR, f"#{table_id} tr")[1:]]


@pytest.mark.slow
def test_a_person_sees_why_tuples_failed_and_a_bolts_own_metrics(
        cluster: MiniCluster, chromium: webdriver.Chrome, tmp_path: Path) -> None:  # noqa: F811
    """60 numbers through a bolt with user metrics into a picky bolt (test_ui_metrics has the same topology): the
    cluster page names the picky bolt's newest exception in its Errors column; the topology page shows it as the
    picky bolt's last error, its traceback a click away (unfolded, or on the component page it links to); the
    picky bolt's page splits its 12 failures into 6 fails and 6 exceptions, and shows the exceptions; the spout's,
    its 13 failed trees into 1 timeout and 12 a bolt failed; the metered bolt's, its counter and gauges."""
    t = Topology("reasons", conf={"topology.message.timeout.secs": 3})
    t.bolt("picky", Picky).shuffle(t.bolt("metered", Metered).shuffle(t.spout("numbers", Numbers, args=[60])))
    topology_id = cluster.submit(t)
    cluster.start_workers(topology_id)
    with ui_in_front_of(cluster.conf, cluster.nimbus.port) as api:
        wait_until(lambda: api.get(f"/api/v1/topology/{topology_id}").json()["topologyStats"][-1]["acked"] == 60, 120,
                   "all 60 numbers acked in the end")
        ui = str(api.base_url).rstrip("/")

        def page(component: str, table_id: str, last_row: list[str]) -> None:
            """Open the component's page until its table's all-time row shows ``last_row`` (stats come with beats)."""
            def shown() -> bool:
                chromium.get(f"{ui}/topology/{topology_id}/component/{component}")
                return table(chromium, table_id)[-1] == last_row
            wait_until(shown, 30, f"{component}'s {table_id}: {last_row}")

        def cluster_row() -> list[str]:
            chromium.get(ui)
            return next((row for row in table(chromium, "topologies") if row[0] == "reasons"), [])

        row = wait_until(lambda: (r := cluster_row())[-1].startswith("errors: picky (") and r, 30,
                         "the cluster page's Errors column to name the picky bolt")
        assert row[-2] == "ok", "nothing but errors: Health is ok, the errors apart"
        assert re.fullmatch(r"errors: picky \(\d+ s ago\): RuntimeError: picky about \d+", row[-1]), row[-1]

        # the topology page: the picky bolt's last error by its exception; its traceback one click away, twice
        chromium.get(f"{ui}/topology/{topology_id}")
        picky = next(row for row in table(chromium, "bolts") if row[0] == "picky")
        assert picky[-1].startswith("RuntimeError: picky about "), picky[-1]
        folded = chromium.find_element(By.CSS_SELECTOR, "#errors details.traceback")
        traceback = folded.find_element(By.TAG_NAME, "pre")
        assert folded.find_element(By.TAG_NAME, "summary").text.startswith("RuntimeError: picky about ")
        assert not traceback.is_displayed(), "the traceback folded under its exception"
        folded.find_element(By.TAG_NAME, "summary").click()
        wait_until(traceback.is_displayed, 10, "the traceback unfolded by a click")
        assert traceback.text.startswith("Traceback (most recent call last):")
        assert traceback.text.splitlines()[-1].startswith("RuntimeError: picky about ")
        screenshot(chromium, tmp_path, "last-error")
        chromium.find_element(By.CSS_SELECTOR, "#bolts a.error-text").click()
        wait_until(lambda: chromium.current_url.endswith("/component/picky#component-errors"), 10,
                   "the component page, at its errors")
        errors = table(chromium, "component-errors")
        assert errors and all(row[2].startswith("Traceback (most recent call last):") for row in errors)

        page("numbers", "failures-by-reason", ["All time", "13", "1", "12"])
        page("picky", "failures-by-reason", ["All time", "12", "6", "6"])
        errors = table(chromium, "component-errors")
        assert errors and all("RuntimeError: picky about" in row[2] for row in errors)
        screenshot(chromium, tmp_path, "failures")

        def metrics() -> dict[str, tuple[str, str]]:
            chromium.get(f"{ui}/topology/{topology_id}/component/metered")
            return {row[2]: (row[3], row[4]) for row in table(chromium, "user-metrics")}

        seen = wait_until(lambda: (m := metrics()).get("seen") == ("counter", "73") and m, 30, "the counter at 73")
        assert seen["n.sizes.max"] == ("gauge", "59.0") and seen["last.n"][0] == "gauge"
        screenshot(chromium, tmp_path, "user-metrics")
