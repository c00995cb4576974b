"""``storm`` as an operator uses it: argument parsing, and every cluster command end to end against a
live local cluster (``storm nimbus`` and ``storm supervisor`` processes, workers running the topology),
plus ``storm dev-cluster`` itself started and stopped as a user would, leaving no process behind."""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from processcluster import REPO, ProcessCluster
from squall.api.dsl import Topology
from squall.cli.main import NEXT_STEP, build_parser, main
from squall.core.config.loading import load_config
from squall.core.worker_records import running
from squall.core.zk import paths
from squall.core.zk.records import Assignment, StormBase
from squall.dev.cluster import squall_import_path
from squall.dev.zookeeper import free_port, port_is_free
from support import delete_tree, dev_cluster_env, listening, log_events, stop_or_kill, wait_until
from topologies import Boom, BrokenPrepare, Forward, Numbers

WORDCOUNT = str(REPO / "examples" / "wordcount.py")
NOT_RUNNING = NEXT_STEP["NotAliveException"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zk_address: str) -> Iterator[ProcessCluster]:
    """One nimbus and one supervisor (4 slots) for the whole module: the commands share it."""
    host, port = zk_address.rsplit(":", 1)
    root = f"/squall-test/cli-{os.getpid()}"
    zk_conf = {**load_config(env={}), "storm.zookeeper.servers": [host], "storm.zookeeper.port": int(port),
               "storm.zookeeper.root": root, "storm.zookeeper.session.timeout": 4000}
    with ExitStack() as stack:
        stack.callback(delete_tree, zk_address, root)  # last, once the daemons are gone
        # The commands are tested, not failover: a task timeout a busy machine cannot trip (the fault tests keep 5 s).
        cluster = ProcessCluster(zk_conf, tmp_path_factory.mktemp("cli"), stack, **{"nimbus.task.timeout.secs": 30})
        cluster.start("sup", slots=4)
        yield cluster


def storm(cluster: ProcessCluster, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``storm ARGV`` pointed at the cluster; (exit, out, err)."""
    code = cluster.cli(*argv)
    out, err = capsys.readouterr()
    return code, out, err


def status(cluster: ProcessCluster, topology_id: str) -> str | None:
    base = cluster.zk.read(paths.topology(topology_id), StormBase)
    return base.status.value if base else None


# -- parsing --------------------------------------------------------------------------------------


def parse(*argv: str) -> Any:
    return build_parser()[0].parse_args(argv)


def test_rebalance_executors_parse_as_storm_s_and_the_wrong_form_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("rebalance", "wc", "-e", "count=3", "-e", "split=2", "-n", "4", "-w", "0", "-r")
    assert (dict(args.executors), args.workers, args.wait, args.reassign) == ({"count": 3, "split": 2}, 4, 0, True)
    for bad in (["-e", "comp", "3"], ["-e", "comp=0"], ["-n", "0"], ["-w", "-1"]):
        with pytest.raises(SystemExit) as exit_info:
            parse("rebalance", "wc", *bad)
        assert exit_info.value.code == 2
    assert "COMPONENT=N" in capsys.readouterr().err


def test_jar_and_upgrade_arguments() -> None:
    args = parse("-c", "topology.workers=3", "-c", 'topology.debug=true', "jar", WORDCOUNT, "10", "--name", "wc",
                 "--include", "lib.py")
    assert (args.source, args.args, args.name, args.include, args.topology) == (WORDCOUNT, ["10"], "wc", ["lib.py"],
                                                                               "topology")
    assert parse("submit", WORDCOUNT).command == "submit"
    assert parse("gray_upgrade", "wc", "-w", "h1:6700,h2:6701").workers == ["h1:6700", "h2:6701"]
    assert parse("gray_upgrade", "wc", "-n", "2").worker_num == 2
    both = parse("gray_upgrade", "wc", "-n", "2", "-p", "count")
    assert (both.worker_num, both.component) == (2, "count"), "at most 2 of count's workers (JStorm)"
    assert parse("jar", WORDCOUNT, "--replace").replace and not parse("jar", WORDCOUNT).replace


def test_gray_upgrade_needs_a_batch(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["gray_upgrade", "wc"], ["gray_upgrade", "wc", "-w", "h:1", "-n", "1"]):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == ("storm gray_upgrade: give -n N, -p COMPONENT (optionally with -n), "
                                                   "or -w HOST:PORT,...")


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("jar", "submit", "local", "list", "kill", "activate", "deactivate", "rebalance", "get-errors",
                    "localconfvalue", "remoteconfvalue", "version", "nimbus", "supervisor", "dev-zookeeper",
                    "dev-cluster", "zktool", "gray_upgrade", "complete_upgrade", "rollback", "restart",
                    "update_topology"):
        assert command in out
    with pytest.raises(SystemExit):
        main(["jar", "--help"])
    assert "--include" in capsys.readouterr().out


def test_an_unreachable_nimbus_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"127.0.0.1:{free_port()}"
    code = main(["-c", f'nimbus.seeds=["{dead}"]', "list"])
    assert code == 1
    assert dead in capsys.readouterr().err.strip().splitlines()[-1]


# -- against the live cluster ---------------------------------------------------------------------


def test_each_daemon_logs_to_one_file_each_line_once_shown_readable(cluster: ProcessCluster) -> None:
    """A daemon's output and its log lines are one file in its log directory (JSON lines, each once), and what the
    cluster shows of it (a daemon that died, a failed test) reads as lines for people."""
    assert sorted(p.name for p in cluster.root.glob("*.log")) == [], "no second copy beside the daemons' state"
    assert cluster.log_file("nimbus") == cluster.root / "nimbus" / "logs" / "nimbus.log"
    assert cluster.log_file("sup") == cluster.root / "sup" / "logs" / "supervisor.log"
    for name, started in (("nimbus", "nimbus started"), ("sup", "supervisor started")):
        wait_until(lambda: log_events(cluster.log_file(name), started), 30, f"{name}'s {started!r} line")
        assert len(log_events(cluster.log_file(name), started)) == 1, cluster.log_file(name).read_text()
        assert all(not line.startswith("{") for line in cluster.tail(name).splitlines()), cluster.tail(name)
        assert f" INFO  {started.split()[0]}." in cluster.tail(name)


def test_jar_list_deactivate_activate_rebalance_get_errors_zktool_kill(
        cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = storm(cluster, capsys, "-c", "topology.workers=2", "jar", WORDCOUNT, "null", "--name", "wc")
    assert code == 0 and out.startswith("Finished submitting topology: wc (wc-")
    topology_id = out.split("(")[1].rstrip(")\n")
    wait_until(lambda: len(cluster.workers("sup")) == 2, 60, "two workers running (-c topology.workers=2)")

    code, out, _ = storm(cluster, capsys, "list")
    header, _, row = out.splitlines()
    assert header.split() == ["Topology_name", "Status", "Num_tasks", "Num_workers", "Uptime_secs", "Health", "Owner"]
    assert row.split()[:4] == ["wc", "ACTIVE", "12", "2"]
    (entry,) = json.loads(storm(cluster, capsys, "list", "--json")[1])
    assert (entry["name"], entry["id"], entry["num_workers"]) == ("wc", topology_id, 2)

    code, out, err = storm(cluster, capsys, "jar", WORDCOUNT, "--name", "wc")
    assert code == 1 and err.strip().splitlines()[-1].startswith("storm jar: AlreadyAliveException:")

    assert storm(cluster, capsys, "deactivate", "wc")[1] == "Deactivated topology: wc\n"
    assert status(cluster, topology_id) == "inactive"
    assert storm(cluster, capsys, "activate", "wc")[1] == "Activated topology: wc\n"
    assert status(cluster, topology_id) == "active"

    assert storm(cluster, capsys, "rebalance", "wc", "-w", "0", "-n", "3")[1] == "Topology wc is rebalancing\n"
    wait_until(lambda: status(cluster, topology_id) == "active"
               and len(cluster.zk.read(paths.assignment(topology_id), Assignment).workers) == 3, 30, "3 workers")
    wait_until(lambda: len(cluster.workers("sup")) == 3, 60, "the supervisor running the third worker")

    code, out, _ = storm(cluster, capsys, "get-errors", "wc")
    assert (code, json.loads(out)) == (0, {"Topology Name": "wc", "Comp-Errors": {}})

    assert topology_id in storm(cluster, capsys, "zktool", "ls", "/topology")[1].split()
    shown = json.loads(storm(cluster, capsys, "zktool", "get", f"/topology/{topology_id}")[1])
    assert shown["name"] == "wc"
    tree = storm(cluster, capsys, "zktool", "tree", "/assignments")[1].splitlines()
    assert tree == ["assignments", f"  {topology_id}"]

    # killed until the wait ends: 3 s, so that the status read right after the command cannot miss it on a busy host
    assert storm(cluster, capsys, "kill", "wc", "-w", "3")[1] == "Killed topology: wc\n"
    assert status(cluster, topology_id) == "killed"
    wait_until(lambda: status(cluster, topology_id) is None, 30, "removal after the 3 s wait")
    wait_until(lambda: cluster.workers("sup") == [], 30, "its workers stopped")
    assert storm(cluster, capsys, "list")[1] == "No topologies running.\n"


def test_jar_refuses_a_file_without_a_topology(cluster: ProcessCluster, capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    empty = tmp_path / "empty_topology.py"
    empty.write_text("x = 1\n")
    code, _, err = storm(cluster, capsys, "jar", str(empty))
    assert code == 1 and "empty_topology has no 'topology' (--topology ATTR names the Topology" in err
    code, _, err = storm(cluster, capsys, "jar", str(tmp_path / "missing.py"))
    assert code == 1 and "missing.py: no such file or directory" in err


def test_a_large_package_uploads_with_a_progress_bar(cluster: ProcessCluster, capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    big = tmp_path / "lookup_table.py"
    big.write_text(f"TABLE = {base64.b64encode(os.urandom(3 << 20)).decode()!r}\n")  # ~3 MiB zipped
    code, out, err = storm(cluster, capsys, "jar", WORDCOUNT, "--name", "big", "--include", str(big), "--inactive")
    assert code == 0 and out.startswith("Finished submitting topology: big"), err
    bar = err.split("uploading")[-1].splitlines()[0]
    assert "[" + "#" * 30 + "]" in bar and bar.endswith(" MiB"), bar
    assert storm(cluster, capsys, "kill", "big", "-w", "0")[0] == 0


def test_upgrade_commands_reach_nimbus(cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """Wired to nimbus's calls: on a name nobody runs, each says so in one typed line."""
    for argv in (["gray_upgrade", "nosuch", "-n", "1"], ["complete_upgrade", "nosuch"], ["rollback", "nosuch"],
                 ["restart", "nosuch"], ["update_topology", "nosuch", "--conf", os.devnull]):
        code, _, err = storm(cluster, capsys, *argv)
        said = err.strip().splitlines()[-1]
        assert (code, said) == (1, f"storm {argv[0]}: NotAliveException: nosuch: {NOT_RUNNING}"), err


# -- storm jar's submit-time checks, typed in a shell ----------------------------------------------

WORD_COUNT_WITH_HELPERS = """\
from squall.api.component import Bolt, Spout
from squall.api.dsl import Topology
import helpers


class Lines(Spout):
    outputs = ["line"]

    def next_tuple(self):
        self.emit(["the cow jumped"])


class Split(Bolt):
    outputs = ["word"]

    def execute(self, t):
        for word in helpers.words(t.values[0]):
            self.emit([word])


topology = Topology("wc")
topology.bolt("split", Split).shuffle(topology.spout("lines", Lines))
"""


def shell(cluster: ProcessCluster, project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``storm ARGV`` as typed in a shell in ``project``: a fresh interpreter, the cluster in the user's
    ``$STORM_CONF_DIR/storm.yaml``."""
    conf_dir = project.parent / "storm-conf"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "storm.yaml").write_text(json.dumps(cluster.client_conf()))  # JSON is YAML
    return subprocess.run([sys.executable, "-m", "squall.cli", *argv], cwd=project, capture_output=True, text=True,
                          env={**os.environ, "STORM_CONF_DIR": str(conf_dir)}, timeout=120)


def project(tmp_path: Path, **files: str) -> Path:
    """A directory holding the user's topology files (``name_py`` → ``name.py``)."""
    root = tmp_path / "project"
    root.mkdir()
    for name, text in files.items():
        (root / name.replace("_py", ".py")).write_text(text)
    return root


def all_beating(cluster: ProcessCluster, name: str) -> bool:
    """Every assigned task of topology ``name`` has reported a beat to nimbus: its workers run."""
    with cluster.client() as client:
        info = client.getTopologyInfoByName(name)
    return bool(info.executors) and all(e.stats is not None for e in info.executors)


def test_jar_names_a_module_missing_from_the_package_and_with_include_it_runs(
        cluster: ProcessCluster, tmp_path: Path) -> None:
    user = project(tmp_path, wc_py=WORD_COUNT_WITH_HELPERS, helpers_py="def words(line):\n    return line.split()\n")
    refused = shell(cluster, user, "jar", "wc.py", "--name", "wc-helpers")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == ("storm jar: module 'helpers' is imported by wc.py but not in the package: "
                              "add it with --include helpers.py\n")
    assert "wc-helpers" not in shell(cluster, user, "list").stdout, "nothing was submitted"

    submitted = shell(cluster, user, "jar", "wc.py", "--name", "wc-helpers", "--include", "helpers.py")
    assert submitted.returncode == 0 and submitted.stdout.startswith("Finished submitting topology: wc-helpers"), \
        submitted.stderr
    try:
        wait_until(lambda: all_beating(cluster, "wc-helpers"), 60, "its workers running from the package")
    finally:
        assert shell(cluster, user, "kill", "wc-helpers", "-w", "0").returncode == 0
    wait_until(lambda: cluster.workers("sup") == [], 30, "its workers stopped")


def test_jar_reports_a_load_error_in_one_line_and_the_traceback_with_verbose(
        cluster: ProcessCluster, tmp_path: Path) -> None:
    broken = "from squall.api.dsl import Topology\n\ndef topology(:\n    pass\n"
    user = project(tmp_path, wc_py=broken, names_py="import os\nroot = os.sep\nbase = root + missing_name\n")
    with pytest.raises(SyntaxError) as python_says:
        compile(broken, "wc.py", "exec")
    one_line = f"storm jar: wc.py:{python_says.value.lineno}: {python_says.value.msg}\n"

    plain = shell(cluster, user, "jar", "wc.py")
    assert (plain.returncode, plain.stderr) == (1, one_line)
    verbose = shell(cluster, user, "jar", "wc.py", "--verbose")
    assert verbose.returncode == 1
    assert verbose.stderr.startswith("Traceback (most recent call last):") and verbose.stderr.endswith(one_line)
    assert "SyntaxError: " in verbose.stderr

    failing = shell(cluster, user, "jar", "names.py")
    assert (failing.returncode, failing.stderr) == (1, "storm jar: names.py:3: NameError: name 'missing_name' "
                                                       "is not defined\n")


# -- storm list shows failing workers and raising components ----------------------------------------


def listed(cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[str, str]]:
    """Topology name → (Status, Health) as ``storm list`` prints them."""
    code, out, err = storm(cluster, capsys, "list")
    assert code == 0, err
    rows = (row.split(None, 5) for row in out.splitlines()[2:])
    return {fields[0]: (fields[1], fields[5]) for fields in rows if len(fields) == 6}


@pytest.mark.slow
def test_list_shows_a_topology_whose_workers_keep_failing_in_prepare_until_they_run(
        cluster: ProcessCluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fixed = tmp_path / "feature-store-reachable"
    broken = Topology("broken", conf={"topology.workers": 1})
    broken.bolt("enrich", BrokenPrepare, args=[str(fixed)]).shuffle(
        broken.spout("numbers", Numbers, args=[10**9], kwargs={"reliable": False}))
    healthy = Topology("healthy", conf={"topology.workers": 1})
    healthy.bolt("forward", Forward).shuffle(healthy.spout("numbers", Numbers, args=[10**9], kwargs={"reliable": False}))

    def health(name: str) -> str | None:
        status, text = listed(cluster, capsys).get(name, (None, None))
        assert status in (None, "ACTIVE"), "a failing topology stays ACTIVE, as Storm clients compare"
        return text

    try:
        cluster.submit(broken)
        cluster.submit(healthy)
        # workers down first; the errors their crashes filed follow it
        wait_until(lambda: (health("broken") or "").startswith("failing: 1 of 1 workers down; errors: "), 60,
                   "the crash-looping topology marked failing")
        wait_until(lambda: all_beating(cluster, "healthy"), 60, "the healthy topology running")
        assert listed(cluster, capsys)["healthy"] == ("ACTIVE", "ok")
        entries = {e["name"]: e for e in json.loads(storm(cluster, capsys, "list", "--json")[1])}
        assert (entries["healthy"]["health"], entries["broken"]["status"]) == ("ok", "ACTIVE")

        fixed.touch()  # the next attempt's prepare succeeds
        wait_until(lambda: (health("broken") or "").startswith("errors: "), 90,
                   "no worker down once its worker runs; its errors stay recent for 30 minutes, as Storm's UI shows")
        # its worker beats to its supervisor first; its tasks' beats reach nimbus later, through the topology master
        wait_until(lambda: all_beating(cluster, "broken"), 60, "the fixed topology's tasks beating at nimbus")
    finally:
        for name in ("broken", "healthy"):
            storm(cluster, capsys, "kill", name, "-w", "0")
    wait_until(lambda: cluster.workers("sup") == [], 30, "their workers stopped")


def test_list_health_names_a_bolt_that_raises_on_every_tuple_while_its_workers_run(
        cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """The worker survives (``topology.worker.exit.on.error`` is off), so no worker is down; the errors it
    files name the bolt, as Storm's UI shows its last error."""
    raising = Topology("raising", conf={"topology.workers": 1})
    raising.bolt("split", Boom, args=[1]).shuffle(raising.spout("numbers", Numbers, args=[10**9],
                                                                  kwargs={"reliable": False}))
    try:
        cluster.submit(raising)
        wait_until(lambda: listed(cluster, capsys).get("raising", ("", ""))[1].startswith("errors: split ("), 60,
                   "the raising bolt named in Health")
        (entry,) = json.loads(storm(cluster, capsys, "list", "raising", "--json")[1])
        assert (entry["status"], entry["health"].split(" (")[0]) == ("ACTIVE", "errors: split")
        assert re.fullmatch(r"errors: split \(\d+ s ago\): RuntimeError: boom on \d+", entry["health"]), \
            "its age, then its newest error by its exception"
        assert all_beating(cluster, "raising"), "its workers run: nothing but the errors is wrong"
    finally:
        storm(cluster, capsys, "kill", "raising", "-w", "0")
    wait_until(lambda: cluster.workers("sup") == [], 30, "its workers stopped")


@pytest.mark.slow
def test_dev_cluster_runs_with_the_default_config_from_any_directory_and_stops_from_there(tmp_path: Path) -> None:
    """``storm dev-cluster`` and ``storm dev-cluster stop`` as typed, no options, in a directory that is not the
    repository: the relative default storm.local.dir is that directory's, a topology runs, and the stop
    leaves no process (daemons and the workers recorded by its supervisors) and no listening port behind."""
    env, ports = dev_cluster_env(tmp_path)
    here = tmp_path / "somewhere-else"
    here.mkdir()
    out = here / "dev-cluster.out"
    with open(out, "wb") as sink:
        process = subprocess.Popen(["storm", "dev-cluster"], cwd=here, env=env, stdout=sink, stderr=subprocess.STDOUT)
    storm = functools.partial(subprocess.run, cwd=here, env=env, capture_output=True, text=True, timeout=120)
    try:
        wait_until(lambda: "Ctrl-C" in out.read_text() or process.poll() is not None, 90, "the dev cluster up")
        table = [line for line in out.read_text().splitlines() if " pid " in line]
        assert [line.split()[0] for line in table] == ["zookeeper", "nimbus", "supervisor-1", "supervisor-2",
                                                       "logviewer", "ui"], out.read_text()
        pids = [int(line.split(" pid ")[1].split()[0]) for line in table]
        root = here / "storm-local" / "dev-cluster"
        assert f"state and logs under {root}" in out.read_text()

        submitted = storm(["storm", "jar", WORDCOUNT])
        assert submitted.stdout.startswith("Finished submitting topology: wordcount"), submitted.stderr
        records = lambda: [json.loads(f.read_text()) for f in root.glob("supervisor-*/workers/*/worker.json")]  # noqa: E731
        wait_until(lambda: len(records()) == 2, 60, "the word count's two workers running")
        pids += [record["pid"] for record in records()]
        # A one-host dev cluster listens on loopback only: nimbus, and each worker once its tasks started.
        assert {address for address, _ in listening(pids[1])} == {"127.0.0.1"}
        for record in records():
            wait_until(lambda: listening(record["pid"]), 60, "the worker listening")
            assert listening(record["pid"]) == {("127.0.0.1", record["port"])}
        listed = storm(["storm", "list"])
        assert listed.stdout.splitlines()[2].split()[:2] == ["wordcount", "ACTIVE"], listed.stderr
        ui = {line.split()[0]: line.split()[1] for line in table}["ui"]
        (shown,) = httpx.get(f"{ui}/api/v1/topology/summary", timeout=30).json()["topologies"]
        assert (shown["name"], shown["status"]) == ("wordcount", "ACTIVE"), "the UI it started shows the same"
        # both supervisors' workers log in one directory, which the host's one logviewer serves: each log opens
        links = wait_until(lambda: {w["workerLogLink"] for w in httpx.get(
            f"{ui}/api/v1/topology/{shown['id']}", timeout=30).json()["workers"]}, 60, "the workers in the UI")
        # "worker running" follows the listening socket (once its peers are connected): wait for it in the log
        assert len(links) == 2
        wait_until(lambda: all("worker running" in httpx.get(link, timeout=30).text for link in links), 60,
                   "each worker's log, through the logviewer, saying it runs")
        logs = storm(["storm", "logs", "wordcount", "count"])
        assert logs.returncode == 0 and logs.stdout.count("==> 127.0.0.1:") == 2, logs.stderr
        assert " INFO  " in logs.stdout and not re.search(r'^{"', logs.stdout, re.M), "lines for people"
        raw = storm(["storm", "logs", "wordcount", "count", "--json"]).stdout
        assert all(line.startswith(("==> ", "{")) for line in raw.splitlines()), "--json: the records as stored"
        tails = storm(["storm", "logs", "wordcount", "-b", "300"]).stdout.split("<==\n")[1:]
        assert len(tails) == 2 and all(re.match(r"\d{4}-\d\d-\d\dT", tail) for tail in tails), "whole lines"
        assert [line.split(" log ")[1] for line in table[1:]] == [
            str(root / "logs" / f"{name}.log") for name in ("nimbus", "supervisor", "supervisor", "logviewer", "ui")]
        assert list(root.glob("*.log")) == [], "each daemon's log in one place: the log directory"
        # each daemon also logs to a file of its own in the host's log directory, which its logviewer serves (the
        # two supervisors share one supervisor.log) and the UI links to, as Storm's nimbusLogLink and logLink
        assert {"nimbus.log", "supervisor.log", "logviewer.log", "ui.log"} <= {
            p.name for p in (root / "logs").iterdir()}, "the daemons' own log files, beside the workers'"
        (nimbus,) = httpx.get(f"{ui}/api/v1/nimbus/summary", timeout=30).json()["nimbuses"]
        nimbus_log = httpx.get(nimbus["nimbusLogLink"], timeout=30)
        assert nimbus_log.status_code == 200 and "nimbus started" in nimbus_log.text
        assert "topology submitted" in nimbus_log.text and shown["id"] in nimbus_log.text, "its line of the submission"
        supervisor_log = httpx.get(httpx.get(f"{ui}/api/v1/supervisor/summary", timeout=30).json()[
            "supervisors"][0]["logLink"], timeout=30).text
        assert supervisor_log.count("supervisor started") == 2 and "worker launched" in supervisor_log

        # what a first-time user tries next, each answered in one line naming the fix
        assert "Connection dropped" not in out.read_text(), "ZooKeeper takes sessions before nimbus connects"
        twice = storm(["storm", "dev-cluster"])
        assert (twice.returncode, twice.stderr.strip()) == (1, f"storm dev-cluster: a dev cluster already runs from "
                                                               f"{root} (pid {process.pid}); `storm dev-cluster stop` "
                                                               "stops it")
        ui_again = storm(["storm", "ui"])
        assert ui_again.returncode == 1 and ui_again.stderr.startswith("storm ui: the UI cannot listen on ")
        assert len(ui_again.stderr.splitlines()) == 1, ui_again.stderr
        taken = storm(["storm", "jar", WORDCOUNT])
        assert (taken.returncode, taken.stderr.strip()) == (
            1, f"storm jar: AlreadyAliveException: topology 'wordcount' is already alive: "
               f"{NEXT_STEP['AlreadyAliveException']}")
        nothing = storm(["storm", "jar", WORDCOUNT, "--name", "wc2", "--replace"])
        assert (nothing.returncode, nothing.stderr.strip()) == (
            1, "storm jar: InvalidTopologyException: topology.hot.deploy.enable is set but no topology named 'wc2' is "
               "running; submit without it")
        assert storm(["storm", "kill", "wordcount", "-w", "0"]).returncode == 0
        gone = storm(["storm", "logs", "wordcount"])
        logviewer = {line.split()[0]: line.split()[1] for line in table}["logviewer"]
        assert (gone.returncode, gone.stderr.strip()) == (
            1, "storm logs: no topology named 'wordcount' is running (storm list shows those that are); the logs of "
               f"a killed one stay with the logviewer of each host it ran on: {logviewer}/")

        stopped = storm(["storm", "dev-cluster", "stop"])
        assert (stopped.returncode, stopped.stdout) == (0, "dev cluster stopped\n"), stopped.stderr
        assert process.wait(10) == 0
        assert [pid for pid in pids if running(pid)] == [], "every process it started is gone"
        assert [port for port in ports if not port_is_free("127.0.0.1", port)] == [], "every port it used is free"
        again = storm(["storm", "dev-cluster", "stop"])
        assert (again.returncode, again.stderr.strip()) == (
            1, f"storm dev-cluster: no dev cluster runs from {root} (run stop in the directory it was started "
               "from)")
    finally:
        stop_or_kill(process, signal.SIGTERM)


@pytest.mark.slow
def test_dev_cluster_stopped_by_ctrl_c_starts_again_in_that_directory_with_its_topology(tmp_path: Path) -> None:
    """Ctrl-C leaves no process behind, and ``storm dev-cluster`` typed again in the same directory comes back
    clean: no 'already runs', and the topology submitted before (its state is in ./storm-local) runs again."""
    env, ports = dev_cluster_env(tmp_path)
    storm = functools.partial(subprocess.run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    root = tmp_path / "storm-local" / "dev-cluster"
    workers = lambda: [json.loads(f.read_text())["pid"] for f in root.glob("supervisor-*/workers/*/worker.json")]  # noqa: E731

    def start(out: Path) -> subprocess.Popen[bytes]:
        with open(out, "wb") as sink:
            process = subprocess.Popen(["storm", "dev-cluster"], cwd=tmp_path, env=env, stdout=sink,
                                       stderr=subprocess.STDOUT)
        wait_until(lambda: "Ctrl-C" in out.read_text() or process.poll() is not None, 90, "the dev cluster up")
        assert process.poll() is None, out.read_text()
        return process

    first = start(tmp_path / "first.out")
    try:
        # one slow word count on one worker: the machine is shared
        submitted = storm(["storm", "jar", WORDCOUNT, "null", "1", "1", "1", "wordcount", "5"])
        assert submitted.returncode == 0, submitted.stderr
        wait_until(lambda: len([pid for pid in workers() if running(pid)]) == 1, 60, "its worker running")
        daemons = [int(line.split(" pid ")[1].split()[0]) for line in (tmp_path / "first.out").read_text().splitlines()
                   if " pid " in line]
        before = workers()
        first.send_signal(signal.SIGINT)  # what Ctrl-C delivers
        assert first.wait(60) == 0
        assert [pid for pid in daemons + before if running(pid)] == [], "Ctrl-C stops every process it started"
        assert [port for port in ports if not port_is_free("127.0.0.1", port)] == []
    finally:
        stop_or_kill(first, signal.SIGTERM)

    again = start(tmp_path / "again.out")
    try:
        wait_until(lambda: [pid for pid in workers() if running(pid) and pid not in before], 90,
                   "the word count's worker running again")
        listed = storm(["storm", "list"])
        assert listed.stdout.splitlines()[2].split()[:2] == ["wordcount", "ACTIVE"], listed.stderr
        stopped = storm(["storm", "dev-cluster", "stop"])
        assert stopped.returncode == 0, stopped.stderr
        assert again.wait(10) == 0
    finally:
        stop_or_kill(again, signal.SIGTERM)


def test_processes_it_starts_import_this_squall_and_nothing_else_of_its_directory(tmp_path: Path) -> None:
    """Daemons and workers run the Squall that started them (this checkout, not a virtualenv's install), yet a
    worker cannot import the checkout's examples/ — the topology's package must carry them."""
    env = {**os.environ, "PYTHONPATH": squall_import_path(tmp_path / "python")}
    probe = ("import importlib.util, os, squall, supervisor, worker; print(os.path.realpath(squall.__file__), "
             "importlib.util.find_spec('examples'), importlib.util.find_spec('support'))")
    seen = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert seen.stdout.split() == [str(REPO / "squall" / "__init__.py"), "None", "None"], seen.stderr
