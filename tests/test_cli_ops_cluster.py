"""The operator verbs Storm users reach for once a topology runs — ``list NAME``, ``blacklist``, ``monitor``,
``kill_workers``, ``set_log_level`` — typed as a user types them, against a live cluster (``storm nimbus``
and ``storm supervisor`` processes, workers running the word count)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from processcluster import ProcessCluster
from squall.cli.main import NEXT_STEP, build_parser, main
from squall.core.local_state import heartbeat_file
from squall.core.worker_records import running
from support import log_events, wait_until
from test_cli_cluster import WORDCOUNT, cluster, storm  # noqa: F401  (cluster is the module's fixture)

NOT_RUNNING = NEXT_STEP["NotAliveException"]

NAME = "wordcount"


def test_help_lists_the_verbs_and_monitor_takes_storms_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(verb in out for verb in ("monitor", "blacklist", "kill_workers", "set_log_level"))
    args = build_parser()[0].parse_args(["monitor", NAME, "-m", "split", "-s", "words", "-w", "transferred"])
    assert (args.name, args.interval, args.component, args.stream, args.watch, args.rounds) == (
        NAME, 4, "split", "words", "transferred", 0), "Storm's default interval is 4 s; no round limit"


def counts_flow(cluster: ProcessCluster) -> bool:
    """Every user component of the word count has reported emitted tuples to nimbus."""
    with cluster.client() as nimbus:
        info = nimbus.getTopologyInfoByName(NAME)
    emitted = {e.component_id for e in info.executors if e.stats and any(e.stats.emitted.get(":all-time", {}).values())}
    return {"sentences", "split", "count"} <= emitted


@pytest.fixture(scope="module")
def wordcount(cluster: ProcessCluster) -> Iterator[str]:
    """The word count, running forever on two workers, submitted as a user does; its id."""
    code = cluster.cli("jar", WORDCOUNT, "--name", NAME)
    assert code == 0
    with cluster.client() as nimbus:
        topology_id = nimbus.getTopologyId(NAME)
    wait_until(lambda: counts_flow(cluster), 90, "the word count's counts reaching nimbus")
    yield topology_id
    cluster.cli("kill", NAME, "-w", "0")


def rows(table: str) -> dict[str, list[str]]:
    """A monitor table's lines by component (the title and header skipped)."""
    return {line.split()[0]: line.split()[1:] for line in table.strip().splitlines()[2:]}


def test_monitor_shows_each_component_with_rates_and_counts_that_grow(
        cluster: ProcessCluster, wordcount: str, capsys: pytest.CaptureFixture[str]) -> None:
    # rounds 2 s apart: each sees at least one more beat of every task at nimbus (0.5 s apart) on a busy host too
    code, out, err = storm(cluster, capsys, "monitor", NAME, "-i", "2", "-n", "3")
    assert code == 0, err
    tables = [rows(t) for t in out.strip().split("\n\n")]
    assert len(tables) == 3 and all(list(t) == ["sentences", "count", "split"] for t in tables), (
        "spouts first, then bolts, each by name", out)
    assert [t["split"][0] for t in tables] == ["4"] * 3, "tasks"
    assert all(rate == "-" for rate in tables[0]["split"][4:]), "no rate before a second round"
    for component in ("sentences", "split", "count"):
        emitted, acked = [int(tables[i][component][1]) for i in (1, 2)], [int(tables[i][component][2]) for i in (1, 2)]
        assert emitted[1] > emitted[0] and acked[1] > acked[0], (component, out)
        emitted_rate, acked_rate, failed_rate = map(float, tables[2][component][4:])
        assert emitted_rate > 0 and acked_rate > 0 and failed_rate >= 0, (component, out)


def test_monitor_m_prints_storms_throughput_lines(cluster: ProcessCluster, wordcount: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = storm(cluster, capsys, "monitor", NAME, "-m", "split", "-i", "1", "-n", "2")
    assert code == 0, err
    header, first, second = out.splitlines()
    assert header == "topology\tcomponent\tparallelism\tstream\ttime-diff ms\temitted\tthroughput (Kt/s)"
    assert first.split("\t")[:5] == [NAME, "split", "4", "default", "0"], "Storm's first line: since start, 0 ms"
    topology, component, parallelism, stream, diff_ms, count, throughput = second.split("\t")
    assert 500 <= int(diff_ms) <= 3000 and int(count) > 0 and float(throughput) > 0, second

    code, _, err = storm(cluster, capsys, "monitor", NAME, "-m", "nope", "-n", "1")
    assert (code, err.strip()) == (1, f"storm monitor: component 'nope' not found; {NAME} has count, sentences, split")
    code, _, err = storm(cluster, capsys, "monitor", NAME, "-s", "default")
    assert code == 2 and "add -m COMPONENT" in err


def test_blacklist_keeps_new_workers_off_a_host_and_list_name_shows_one_topology(
        cluster: ProcessCluster, wordcount: str, capsys: pytest.CaptureFixture[str]) -> None:
    host = "127.0.0.1"  # the supervisor's storm.local.hostname
    assert storm(cluster, capsys, "blacklist", "list")[1] == "No hosts blacklisted.\n"
    code, out, _ = storm(cluster, capsys, "blacklist", "add", host)
    assert (code, out) == (0, f"Blacklisted host {host}: nimbus places no new workers there (those running stay; "
                              f"storm blacklist remove {host} undoes it)\n")
    assert storm(cluster, capsys, "blacklist", "list")[1] == f"{host}\n"
    code, _, err = storm(cluster, capsys, "-c", "topology.workers=1", "jar", WORDCOUNT, "--name", "other")
    assert code == 1 and "InvalidTopologyException: could not assign other-" in err, err
    assert storm(cluster, capsys, "list", NAME)[0] == 0, "the running topology keeps its workers"

    assert storm(cluster, capsys, "blacklist", "remove", host)[1] == (
        f"Removed host {host} from the blacklist: nimbus places new workers there again\n")
    assert storm(cluster, capsys, "blacklist", "list")[1] == "No hosts blacklisted.\n"
    code, _, err = storm(cluster, capsys, "-c", "topology.workers=1", "jar", WORDCOUNT, "--name", "other", "--inactive")
    assert code == 0, err

    code, out, _ = storm(cluster, capsys, "list", "other")
    header, dashes, row = out.splitlines()
    assert header.split()[0] == "Topology_name" and row.split()[:2] == ["other", "INACTIVE"]
    assert [r.split()[0] for r in storm(cluster, capsys, "list")[1].splitlines()[2:]] == ["other", NAME]
    code, out, err = storm(cluster, capsys, "list", "nosuch")
    assert (code, out, err) == (1, "", "storm list: no topology named 'nosuch' is running\n")
    assert storm(cluster, capsys, "kill", "other", "-w", "0")[0] == 0
    wait_until(lambda: {r.topology_id for r in cluster.workers("sup")} == {wordcount}, 30, "other's worker stopped")
    assert storm(cluster, capsys, "blacklist", "add")[0] == 2


def test_a_gray_upgrade_started_by_storm_jar_says_so_and_how_to_go_on(
        cluster: ProcessCluster, wordcount: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The dev cluster page's ``storm jar examples/wordcount.py 10 --name wc2 -c topology.upgrade=true -c
    topology.upgrade.worker.num=1``: not "Finished submitting", but which upgrade began and the next commands."""
    code, _, err = storm(cluster, capsys, "-c", "topology.workers=1", "jar", WORDCOUNT, "--name", "canary")
    assert code == 0, err
    with cluster.client() as nimbus:
        canary = nimbus.getTopologyId("canary")
    wait_until(lambda: canary in {r.topology_id for r in cluster.workers("sup")}, 60, "canary's worker")
    code, out, err = storm(cluster, capsys, "jar", WORDCOUNT, "10", "--name", "canary", "-c", "topology.upgrade=true",
                           "-c", "topology.upgrade.worker.num=1")
    assert code == 0, err
    assert out.splitlines() == [
        f"Started a gray upgrade of topology canary ({canary}) to the new code: 1 worker first, the others on the "
        "old code until you go on.",
        "  storm gray_upgrade canary -n N      the next N workers (-p COMPONENT or -w HOST:PORT,... to choose them)",
        "  storm complete_upgrade canary       every remaining worker",
        "  storm rollback canary               the old code back on every upgraded worker",
        "  storm list canary                   UPGRADING while it lasts (topology.upgrade.ttl bounds it)"]
    assert storm(cluster, capsys, "list", "canary")[1].splitlines()[2].split()[1] == "UPGRADING"
    assert storm(cluster, capsys, "kill", "canary", "-w", "0")[0] == 0
    wait_until(lambda: canary not in {r.topology_id for r in cluster.workers("sup")}, 60, "canary's worker stopped")


def test_set_log_level_turns_a_components_debug_lines_on_in_the_workers_and_off_again(
        cluster: ProcessCluster, wordcount: str, capsys: pytest.CaptureFixture[str]) -> None:
    logs = sorted((cluster.root / "sup" / "logs").glob(f"{wordcount}-worker-*.log"))
    assert len(logs) == 2 and not any(log_events(p, "every count") for p in logs)
    code, out, err = storm(cluster, capsys, "set_log_level", NAME, "-l", "wordcount=DEBUG:600")
    assert (code, out) == (0, "Log config {wordcount=DEBUG:600} is sent for topology wordcount\n"), err
    wait_until(lambda: all(log_events(p, "every count") for p in logs), 30,
               "WordCount's debug lines (logger wordcount, every tick) in both workers' logs")
    line = log_events(logs[0], "every count")[0]
    assert (line["level"], line["logger"], line["component"]) == ("debug", "wordcount", "count") and line["counts"]

    assert storm(cluster, capsys, "set_log_level", NAME, "-r", "wordcount")[1] == (
        "Log config {wordcount=REMOVE} is sent for topology wordcount\n")

    def quiet_again(path: Path) -> bool:
        events = [e["event"] for e in log_events(path, "every count", "word counts")]
        last_debug = len(events) - events[::-1].index("every count")
        return events[last_debug:].count("word counts") >= 4  # ticks pass with info lines only
    wait_until(lambda: all(quiet_again(p) for p in logs), 60, "the debug lines to stop")

    with pytest.raises(SystemExit) as refused:
        storm(cluster, capsys, "set_log_level", NAME, "-l", "wordcount=LOUD")
    assert refused.value.code == 2
    assert "unknown log level 'LOUD'; use one of ALL, TRACE, DEBUG" in capsys.readouterr().err
    code, _, err = storm(cluster, capsys, "set_log_level", "nosuch", "-l", "ROOT=DEBUG")
    assert (code, err.strip()) == (1, f"storm set_log_level: NotAliveException: nosuch: {NOT_RUNNING}")
    assert storm(cluster, capsys, "set_log_level", NAME)[0] == 2


def test_kill_workers_kills_this_hosts_workers_and_the_supervisor_restarts_them(
        cluster: ProcessCluster, wordcount: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = {r.port: r for r in cluster.workers("sup") if r.topology_id == wordcount}
    assert len(before) == 2
    local_dir = cluster.daemon_conf("sup")["storm.local.dir"]
    code, out, _ = storm(cluster, capsys, "-c", f"storm.local.dir={local_dir}", "kill_workers")
    assert code == 0
    assert sorted(out.splitlines()) == sorted(f"Killed worker {r.worker_id} of {wordcount} on port {r.port} "
                                              f"(pid {r.pid})" for r in before.values())
    assert not any(running(r.pid) for r in before.values())

    def restarted() -> bool:
        now = {r.port: r for r in cluster.workers("sup") if r.topology_id == wordcount}
        return (set(now) == set(before) and all(now[p].pid != before[p].pid for p in now)
                and all(running(r.pid) and heartbeat_file({"storm.local.dir": local_dir}, r.worker_id).exists()
                        for r in now.values()))
    wait_until(restarted, 60, "the supervisor running new workers on the same ports")
    errors = json.loads(storm(cluster, capsys, "get-errors", NAME)[1])["Comp-Errors"]
    assert errors == {}, "an operator's restart is no worker failure"
    code, out, _ = storm(cluster, capsys, "-c", f"storm.local.dir={Path(local_dir) / 'nothing-here'}", "kill_workers")
    assert (code, out.startswith("No workers to kill under ")) == (0, True)
