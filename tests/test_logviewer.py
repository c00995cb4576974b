"""The logviewer (:mod:`logviewer`) on a log directory of its own: only that directory is served (no name leads
out of it), every read is bounded, pages, downloads and searches return the file's bytes. Over Starlette's
TestClient here; ``storm logviewer`` against a running cluster, linked from the UI, is in test_ui_logs.py."""

from __future__ import annotations

import doctest
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from logviewer.app import create_app
import logviewer.files
from logviewer.files import CHUNK, MAX_PAGE, LogDir, Refused
from logviewer.server import LogviewerServer
import squall.cli.logs
from squall.cli.logs import Unreachable, WorkerLog, catch_up
import squall.core.httpd
import squall.core.local_state
from squall.dev.zookeeper import free_port

LOG = "wc-1-1700000000-worker-6700.log"
#: The log's lines, 11 bytes each.
LINES = b"".join(b"line %05d\n" % i for i in range(20_000))


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    root.mkdir()
    (root / LOG).write_bytes(LINES)
    (root / "wc-1-1700000000-worker-6701.log").write_text("the other worker\n")
    (root / "other-2-1700000001-worker-6700.log").write_text("another topology\n")
    (tmp_path / "secret.txt").write_text("not a log")
    return root


@pytest.fixture
def viewer(logs: Path) -> TestClient:
    return TestClient(create_app({"storm.log.dir": str(logs), "storm.local.dir": "unused",
                                  "storm.local.hostname": "h1"}))


def test_names_that_lead_out_of_the_log_dir_are_refused(viewer: TestClient, logs: Path) -> None:
    (logs / "escape.log").symlink_to(logs.parent / "secret.txt")
    (logs / "sub").mkdir()
    for name in ("../secret.txt", "/etc/passwd", f"{logs}/../secret.txt", "escape.log", "sub/../../secret.txt",
                 "..", ".", "sub/../.."):
        for path in ("/api/v1/log", "/api/v1/read", "/api/v1/download", "/api/v1/search"):
            response = viewer.get(path, params={"file": name, "search-string": "not"})
            assert response.status_code == 403, (path, name, response.text)
            assert "not in the log directory" in response.json()["errorMessage"]
            assert "not a log" not in response.text
    for name in ("nope.log", "sub"):
        assert viewer.get("/api/v1/read", params={"file": name}).json()["error"] == "404 Not Found"
    assert viewer.get("/api/v1/read", params={"file": ""}).status_code == 400
    assert "escape.log" not in viewer.get("/api/v1/listLogs").json(), "a symlink out is not listed either"
    with pytest.raises(Refused):
        LogDir(logs).path("a/../../secret.txt")


def test_pages_are_bounded_and_say_where_they_lie(viewer: TestClient, logs: Path) -> None:
    size = (logs / LOG).stat().st_size
    tail = viewer.get("/api/v1/read", params={"file": LOG, "length": 22})
    assert tail.content == b"line 19998\nline 19999\n"
    assert (tail.headers["X-Log-Start"], tail.headers["X-Log-End"], tail.headers["X-Log-Size"]) == (
        str(size - 22), str(size), str(size))
    middle = viewer.get("/api/v1/read", params={"file": LOG, "start": 11 * 7, "length": 11})
    assert middle.content == b"line 00007\n"
    assert viewer.get("/api/v1/read", params={"file": LOG, "start": size + 50}).headers["X-Log-Start"] == str(size), \
        "past the end: nothing, from the end (a follower sees the file shrank)"
    default = viewer.get("/api/v1/read", params={"file": LOG})
    assert len(default.content) == 51_200, "Storm's page length when none is asked for"
    for params, message in (({"length": MAX_PAGE + 1}, f"length must be 1 to {MAX_PAGE}"),
                            ({"length": 0}, "length must be 1"), ({"start": -1}, "start must be a byte offset"),
                            ({"start": "x"}, "start must be a whole number")):
        refused = viewer.get("/api/v1/read", params={"file": LOG, **params})
        assert refused.status_code == 400 and message in refused.json()["errorMessage"], refused.text


def test_the_log_page_shows_the_tail_escaped_with_links_to_other_pages(viewer: TestClient, logs: Path) -> None:
    (logs / "html.log").write_text("<script>alert(1)</script>\n")
    page = viewer.get("/api/v1/log", params={"file": "html.log"})
    assert page.status_code == 200 and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "<script>alert" not in page.text
    tail = viewer.get("/api/v1/log", params={"file": LOG, "length": 110}).text
    assert "line 19999" in tail and "line 19989" not in tail
    assert f'href="/api/v1/download?file={LOG}"' in tail
    assert f"start={(logs / LOG).stat().st_size - 220}&amp;length=110" in tail, "the previous page"
    index = viewer.get("/").text
    assert f'href="/api/v1/log?file={LOG}"' in index and "secret" not in index


def test_a_download_is_the_file_as_it_was_when_asked_for(viewer: TestClient, logs: Path) -> None:
    with viewer.stream("GET", "/api/v1/download", params={"file": LOG}) as response:
        assert response.headers["content-disposition"] == f'attachment; filename="{LOG}"'
        with open(logs / LOG, "ab") as log:
            log.write(b"written while downloading\n" * 10_000)  # a worker goes on logging
        body = response.read()
    assert body == LINES
    assert int(response.headers["content-length"]) == len(body)


def test_search_finds_matches_across_chunks_with_context_and_says_where_to_go_on(
        viewer: TestClient, logs: Path) -> None:
    needle = b"NEEDLE-in-the-log"
    with open(logs / LOG, "r+b") as log:  # one match cut in two by the first chunk's end, one further on
        for offset in (CHUNK - 5, CHUNK + 5000):
            log.seek(offset)
            log.write(needle)
    response = viewer.get("/api/v1/search", params={"file": LOG, "search-string": needle.decode()})
    found = response.json()
    assert [m["byteOffset"] for m in found["matches"]] == [CHUNK - 5, CHUNK + 5000]
    first = found["matches"][0]
    assert (len(first["beforeString"]), first["matchString"], len(first["afterString"])) == (128, needle.decode(), 128)
    assert first["logviewerURL"].startswith(f"http://testserver/api/v1/log?file={LOG}&start=")
    assert found["nextByteOffset"] is None, "the end of the file was reached"
    one = viewer.get("/api/v1/search", params={"file": LOG, "search-string": "line 0000", "num-matches": 3}).json()
    assert [m["byteOffset"] for m in one["matches"]] == [0, 11, 22] and one["nextByteOffset"] == 23
    more = viewer.get("/api/v1/search", params={"file": LOG, "search-string": "line 0000",
                                                "start-byte-offset": one["nextByteOffset"]}).json()
    assert [m["byteOffset"] for m in more["matches"]] == [33, 44, 55, 66, 77, 88, 99]
    for params, message in (({"search-string": ""}, "1 to 1024 bytes"), ({"search-string": "x" * 1025}, "1 to 1024"),
                            ({"search-string": "x", "num-matches": 101}, "num-matches must be 1 to 100"),
                            ({"search-string": "x", "num-matches": 0}, "num-matches must be 1 to 100")):
        refused = viewer.get("/api/v1/search", params={"file": LOG, **params})
        assert refused.status_code == 400 and message in refused.json()["errorMessage"]


def test_a_search_reads_at_most_its_budget(logs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logviewer.files, "SEARCH_BUDGET", 1000)
    result = LogDir(logs).search(LOG, b"no such text")
    assert (result.matches, result.next) == ([], 1000), "the next search goes on where this one stopped"


def test_list_logs_by_topology_and_port(viewer: TestClient) -> None:
    def listed(**params: Any) -> list[str]:
        return viewer.get("/api/v1/listLogs", params=params).json()

    assert listed() == ["other-2-1700000001-worker-6700.log", LOG, "wc-1-1700000000-worker-6701.log"]
    assert listed(topoId="wc-1-1700000000") == [LOG, "wc-1-1700000000-worker-6701.log"]
    assert listed(topoId="wc-1-1700000000", port=6700) == [LOG]
    assert listed(port=6700) == ["other-2-1700000001-worker-6700.log", LOG]
    assert viewer.get("/api/v1/nope").json()["errorMessage"] == "/api/v1/nope is not part of the logviewer; / lists " \
                                                              "the logs"


def test_a_daemon_s_log_is_paged_downloaded_searched_and_listed_on_routes_of_its_own(
        viewer: TestClient, logs: Path) -> None:
    """Storm's /daemonlog: the daemons' own logs (nimbus.log and its rolled files), paged as a worker's log is, and
    only there: a worker log's routes refuse them, and the daemon routes serve nothing else."""
    (logs / "nimbus.log").write_bytes(LINES)
    (logs / "nimbus.log.1").write_text("an older nimbus line\n")
    (logs / "supervisor.log").write_text("supervisor started\n")
    (logs / "other.txt").write_text("not a daemon's\n")
    page = viewer.get("/daemonlog", params={"file": "nimbus.log", "start": 11 * 7, "length": 22})
    assert page.status_code == 200 and "line 00007\nline 00008\n" in page.text and "line 00009" not in page.text
    assert f"bytes 77–99 of {len(LINES)}" in page.text
    assert 'href="/daemonlog?file=nimbus.log&amp;start=99&amp;length=22">next' in page.text
    assert 'href="/daemonlog?file=nimbus.log&amp;start=55&amp;length=22">previous' in page.text
    assert 'href="/api/v1/daemondownload?file=nimbus.log"' in page.text and 'name="is-daemon" value="yes"' in page.text
    assert "line 19999" in viewer.get("/api/v1/daemonlog", params={"file": "nimbus.log"}).text, "Storm 2's path"
    assert viewer.get("/daemonlog", params={"file": "nimbus.log", "length": MAX_PAGE + 1}).status_code == 400
    assert viewer.get("/api/v1/daemondownload", params={"file": "nimbus.log.1"}).text == "an older nimbus line\n"
    found = viewer.get("/api/v1/search", params={"file": "nimbus.log", "is-daemon": "yes",
                                                 "search-string": "line 00003"}).json()
    assert found["isDaemon"] == "yes" and [m["byteOffset"] for m in found["matches"]] == [33]
    assert found["matches"][0]["logviewerURL"].startswith("http://testserver/daemonlog?file=nimbus.log&start=")
    assert viewer.get("/api/v1/listDaemonLogs").json() == ["nimbus.log", "nimbus.log.1", "supervisor.log"]
    assert "nimbus.log" not in viewer.get("/api/v1/listLogs").json(), "listLogs lists worker logs only (Storm's)"
    index = viewer.get("/").text
    assert 'href="/daemonlog?file=supervisor.log"' in index and 'href="/api/v1/log?file=supervisor.log"' not in index

    for path in ("/api/v1/log", "/api/v1/read", "/api/v1/download", "/api/v1/search"):
        for name in ("nimbus.log", "./nimbus.log", "sub/../nimbus.log"):
            response = viewer.get(path, params={"file": name, "search-string": "line"})
            assert response.status_code == 403 and "is a daemon's log: /daemonlog?file=nimbus.log serves it" in \
                response.json()["errorMessage"], (path, name)
    (logs / "ui.log").symlink_to(logs / LOG)  # a daemon's name on a worker's log: not read as a daemon's
    (logs / "logviewer.log").symlink_to(logs.parent / "secret.txt")
    for path in ("/daemonlog", "/api/v1/daemondownload"):
        for name, message in ((LOG, "is no daemon's log"), ("other.txt", "is no daemon's log"),
                              ("../secret.txt", "not in the log directory"), ("/etc/passwd", "not in the log"),
                              ("./nimbus.log", "is no daemon's log"), ("ui.log", "links to another file"),
                              ("logviewer.log", "not in the log directory")):
            response = viewer.get(path, params={"file": name})
            assert response.status_code == 403 and message in response.json()["errorMessage"], (path, name)
            assert "not a log" not in response.text and "line 0" not in response.text
        assert viewer.get(path, params={"file": "ui.log.2"}).json()["error"] == "404 Not Found"
    assert viewer.get("/api/v1/listDaemonLogs").json() == ["nimbus.log", "nimbus.log.1", "supervisor.log"]


def test_an_unreadable_log_dir_is_an_empty_list(tmp_path: Path) -> None:
    viewer = TestClient(create_app({"storm.log.dir": None, "storm.local.dir": str(tmp_path / "none")}))
    assert viewer.get("/api/v1/listLogs").json() == []
    assert "No logs yet" in viewer.get("/").text
    assert not os.path.exists(tmp_path / "none"), "the logviewer creates nothing"


@pytest.fixture
def served(logs: Path) -> Iterator[int]:
    """A logviewer server on a free port over ``logs``: its port."""
    server = LogviewerServer({"storm.log.dir": str(logs), "storm.local.dir": "unused", "logviewer.host": "127.0.0.1",
                              "logviewer.port": 0}).start()
    try:
        yield server.port
    finally:
        server.stop()


def read_url(port: int, name: str) -> str:
    return f"http://127.0.0.1:{port}/api/v1/read?file={name}"


def test_storm_logs_prints_a_log_then_what_it_gains_and_starts_over_when_it_shrinks(
        served: int, logs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = logs / "wc-1-1700000000-worker-6701.log"
    log, out, last_header = WorkerLog("127.0.0.1", 6701, ["count"], read_url(served, other.name)), io.BytesIO(), [None]
    catch_up(log, out, last_header)
    with open(other, "ab") as f:
        f.write(b"more\n")
    catch_up(log, out, last_header)
    other.write_bytes(b"new\n")  # replaced by a shorter file
    catch_up(log, out, last_header)
    assert out.getvalue() == b"==> 127.0.0.1:6701 (count) <==\nthe other worker\nmore\nnew\n"

    monkeypatch.setattr(squall.cli.logs, "PAGE", 1000)  # a log of many pages, read page by page
    for first_bytes, expected in ((None, LINES), (22, LINES[-22:]), (5000, LINES[-5005:]), (5, LINES[-11:])):
        out = io.BytesIO()
        catch_up(WorkerLog("127.0.0.1", 6700, ["split"], read_url(served, LOG)), out, [None], first_bytes)
        assert out.getvalue() == b"==> 127.0.0.1:6700 (split) <==\n" + expected, first_bytes


def test_storm_logs_shows_readable_lines_from_a_line_s_start_and_json_when_asked(served: int, logs: Path) -> None:
    """-b N starts at the start of the line holding the N-th last byte, never mid-line; a worker's JSON records
    are shown as readable lines (--json: as written), its other lines as they are; a line not yet ended is held
    while following, until it is."""
    record = (b'{"event": "word counts", "level": "info", "logger": "examples.wordcount", '
              b'"timestamp": "2024-05-01T12:00:00.123456Z", "task": 7}\n')
    (logs / LOG).write_bytes(b"a line its bolt printed\n" + record * 3)
    for first_bytes in (10, len(record), len(record) + 1):
        out = io.BytesIO()
        catch_up(WorkerLog("127.0.0.1", 6700, ["count"], read_url(served, LOG)), out, [None], first_bytes)
        lines = out.getvalue().decode().splitlines()
        assert lines[1:] == ["2024-05-01T12:00:00.123Z INFO  examples.wordcount  word counts  task=7"] * (
            1 if first_bytes <= len(record) else 2), first_bytes
    out = io.BytesIO()
    catch_up(WorkerLog("127.0.0.1", 6700, ["count"], read_url(served, LOG)), out, [None], 10, raw=True)
    assert out.getvalue() == b"==> 127.0.0.1:6700 (count) <==\n" + record, "--json: the file's own line"

    followed, out, last_header = WorkerLog("127.0.0.1", 6700, ["count"], read_url(served, LOG)), io.BytesIO(), [None]
    catch_up(followed, out, last_header, final=False)
    with open(logs / LOG, "ab") as f:
        f.write(record[:40])
    catch_up(followed, out, last_header, final=False)
    with open(logs / LOG, "ab") as f:
        f.write(record[40:])
    catch_up(followed, out, last_header, final=False)
    assert out.getvalue().decode().splitlines()[1:] == ["a line its bolt printed",
                                                         *["2024-05-01T12:00:00.123Z INFO  examples.wordcount  "
                                                           "word counts  task=7"] * 4]


def test_storm_logs_says_which_logviewer_it_cannot_reach_and_why(served: int) -> None:
    with pytest.raises(Unreachable, match="h1:6700: cannot read its log from the logviewer at http://127.0.0.1:"
                                          r".*logviewer.port; is `storm logviewer` running on h1"):
        catch_up(WorkerLog("h1", 6700, [], read_url(free_port(), LOG)), io.BytesIO(), [None])
    with pytest.raises(Unreachable, match="h1:6702: the logviewer answered 404: no log file"):
        catch_up(WorkerLog("h1", 6702, [], read_url(served, "wc-1-1700000000-worker-6702.log")), io.BytesIO(), [None])


@pytest.mark.parametrize("module", [logviewer.files, squall.core.httpd, squall.core.local_state],
                         ids=lambda m: m.__name__)
def test_the_examples_in_the_docstrings_hold(module: Any) -> None:
    result = doctest.testmod(module)
    assert not result.failed


def test_a_log_page_shows_json_records_as_readable_lines_and_the_api_keeps_them_raw(viewer: TestClient,
                                                                                   logs: Path) -> None:
    record = ('{"event": "leader elected", "level": "info", "logger": "nimbus.daemon", '
              '"timestamp": "2024-05-01T12:00:00.123456Z", "host": "n1", "daemon": "nimbus"}')
    text = f"{record}\nTraceback (most recent call last):\n  a user's print\n"
    (logs / "nimbus.log").write_text(text)
    (logs / LOG).write_text(text)
    readable = "2024-05-01T12:00:00.123Z INFO  nimbus.daemon  leader elected  host=n1 daemon=nimbus"
    for page in ("/api/v1/log", "/daemonlog"):
        shown = viewer.get(page, params={"file": LOG if page == "/api/v1/log" else "nimbus.log"}).text
        assert f"{readable}\nTraceback (most recent call last):\n  a user&#39;s print\n" in shown, page
        assert "&#34;event&#34;" not in shown
    assert viewer.get("/api/v1/read", params={"file": LOG}).text == text
    assert viewer.get("/api/v1/download", params={"file": LOG}).text == text
    assert viewer.get("/api/v1/daemondownload", params={"file": "nimbus.log"}).text == text
