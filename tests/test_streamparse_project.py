"""streamparse projects on Squall, as their users run them: ``sparse quickstart`` makes the project, ``storm jar
DIR`` / ``storm local DIR`` run it, and streamparse's own ``sparse list`` / ``sparse kill`` and version checks
work against Squall as against Storm.

What Squall submits is checked against what streamparse itself would submit: streamparse's own functions
(``get_topology_from_file``, ``set_topology_serializer``, ``resolve_options``, the per-env parallelism of
``sparse submit``) run in a subprocess inside the project, and its Thrift bytes, decoded with Squall's IDL,
must equal Squall's topology. The word count runs end to end on a dev cluster and in ``storm local``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from minicluster import MiniCluster
from processcluster import REPO, ProcessCluster
from squall import STORM_VERSION
from squall.cli.main import main
from squall.compat.streamparse_project import StreamparseProjectError, build_project_package, load_project
from squall.core.local_state import log_dir
from squall.core.nimbus_client import nimbus_client
from squall.core.thrift import from_bytes, storm
from squall.dev.zookeeper import free_port
from supervisor.code import download_code
from support import blocks_run_by, command_lines, storm_on_path, wait_until

BIN = Path(sys.executable).parent
#: streamparse refuses to run as root unless told that lein may (it never runs lein here).
SPARSE_ENV = {**os.environ, "LEIN_ROOT": "1"}

#: What ``sparse submit`` would submit for the project in the working directory: streamparse's own steps, in its
#: order; prints the topology conf (one JSON line), then the topology's Thrift bytes (streamparse's IDL).
STREAMPARSE_SUBMISSION = r"""
import json, sys
from itertools import chain
from streamparse.cli.common import resolve_options
from streamparse.util import (get_config, get_env_config, get_topology_definition, get_topology_from_file,
                              set_topology_serializer)
config = get_config()
name, topology_file = get_topology_definition(sys.argv[1] or None)
env_name, env_config = get_env_config(sys.argv[2] or None)
topology_class = get_topology_from_file(topology_file)
options = resolve_options({}, env_config, topology_class, name, local_only=True)
set_topology_serializer(env_config, config, topology_class)
for component in chain(topology_class.thrift_bolts.values(), topology_class.thrift_spouts.values()):
    if isinstance(component.common.parallelism_hint, dict):
        component.common.parallelism_hint = component.common.parallelism_hint.get(env_name)
sys.stdout.buffer.write(json.dumps(options).encode() + b"\n")
topology_class.write(sys.stdout.buffer)
"""

#: Keys of streamparse's topology conf that only its SSH deployment reads, and the worker and acker counts it
#: derives from the number of worker hosts when the project sets none: Squall leaves them out (its defaults apply).
SSH_ONLY = {"topology.python.path", "sudo_user", "storm.workers.list", "topology.acker.executors", "topology.workers",
            "use_virtualenv", "install_virtualenv", "virtualenv_flags", "virtualenv_name", "virtualenv_root"}

#: A second topology in the quickstart project using what the DSL can say: named and direct streams, every
#: built-in grouping, parallelism per env, component and topology config, and a non-Python shell bolt.
ROUTING = '''
from streamparse import Bolt, Spout, Stream


class Numbers(Spout):
    outputs = [Stream(["n"]), Stream(["n", "parity"], name="parity"), Stream(["n"], name="picked", direct=True)]

    def next_tuple(self):
        pass


class Sink(Bolt):
    outputs = ["n"]
    config = {"topology.tick.tuple.freq.secs": 5}

    def process(self, tup):
        pass
'''
ROUTES = '''
from streamparse import Grouping, ShellBolt, Topology

from routing import Numbers, Sink


class Routes(Topology):
    config = {"topology.message.timeout.secs": 30, "routes.threshold": 7}
    numbers = Numbers.spec(par={"prod": 3, "beta": 1})
    by_field = Sink.spec(inputs={numbers: Grouping.fields("n")}, par=2)
    everyone = Sink.spec(inputs={numbers["parity"]: Grouping.ALL})
    one = Sink.spec(inputs={numbers: Grouping.GLOBAL, numbers["parity"]: Grouping.SHUFFLE})
    anywhere = Sink.spec(inputs={numbers: Grouping.NONE})
    near = Sink.spec(inputs={by_field: Grouping.LOCAL_OR_SHUFFLE})
    picked = Sink.spec(inputs={numbers["picked"]: Grouping.DIRECT})
    node = ShellBolt.spec(command="node", script="splitsentence.js", inputs=[numbers], outputs=["word"])
'''


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``sparse quickstart wordcount``, run as a user runs it (nothing downloaded)."""
    here = tmp_path_factory.mktemp("quickstart")
    done = subprocess.run([str(BIN / "sparse"), "quickstart", "wordcount"], cwd=here, env=SPARSE_ENV,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return here / "wordcount"


@pytest.fixture
def project(quickstart: Path, tmp_path: Path) -> Path:
    """A fresh copy of the quickstart project for one test to change."""
    return Path(shutil.copytree(quickstart, tmp_path / "wordcount"))


def write_config(project: Path, **envs: dict[str, Any]) -> None:
    """Add ``envs`` to the project's config.json (the quickstart's has one, prod, with no nimbus)."""
    config = json.loads((project / "config.json").read_text())
    config["envs"].update(envs)
    (project / "config.json").write_text(json.dumps(config, indent=4))


def streamparse_submission(project: Path, topology: str = "", env: str = "") -> tuple[dict[str, Any], Any]:
    """(topology conf, StormTopology decoded with Squall's IDL) that ``sparse submit`` would send."""
    done = subprocess.run([sys.executable, "-c", STREAMPARSE_SUBMISSION, topology, env], cwd=project,
                          env=SPARSE_ENV, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    options, _, data = done.stdout.partition(b"\n")
    return json.loads(options), from_bytes(storm.StormTopology, data)


def without(keys: set[str], conf: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in conf.items() if key not in keys}


def comparable(topology: Any) -> Any:
    """``topology`` with each component's JSON conf parsed (the two sides write the same JSON differently)."""
    for spec in [*topology.spouts.values(), *topology.bolts.values()]:
        spec.common.json_conf = json.loads(spec.common.json_conf or "{}")
    return topology


# -- what is submitted ----------------------------------------------------------------------------


def test_the_quickstart_project_becomes_the_topology_streamparse_would_submit(project: Path) -> None:
    loaded = load_project(project)
    options, expected = streamparse_submission(project)
    topology, conf = loaded.topology.build()
    assert (loaded.topology.name, loaded.env) == ("wordcount", "prod")
    assert comparable(topology) == comparable(expected)
    bolt = topology.bolts["count_bolt"]
    assert (bolt.bolt_object.shell.execution_command, bolt.bolt_object.shell.script, bolt.common.parallelism_hint) \
        == ("streamparse_run", "-s json bolts.wordcount.WordCountBolt", 2)
    assert without(SSH_ONLY, conf) == without(SSH_ONLY, options)
    assert conf == {"pystorm.log.level": "info", "pystorm.log.max_bytes": 1000000, "pystorm.log.backup_count": 10}


def test_every_grouping_stream_and_per_env_setting_is_what_streamparse_would_submit(project: Path) -> None:
    (project / "src" / "routing.py").write_text(ROUTING)
    (project / "topologies" / "routes.py").write_text(ROUTES)
    write_config(project, beta={"nimbus": "", "virtualenv_root": "", "serializer": "msgpack",
                                "options": {"topology.workers": 3, "routes.owner": "beta team"},
                                "log": {"path": "/var/log/routes", "level": "WARNING"}})
    for env in ("prod", "beta"):
        loaded = load_project(project, "routes", env)
        options, expected = streamparse_submission(project, "routes", env)
        topology, conf = loaded.topology.build()
        assert comparable(topology) == comparable(expected), env
        assert without(SSH_ONLY, conf) == without(SSH_ONLY, options), env
    assert topology.spouts["numbers"].common.parallelism_hint == 1  # beta's
    assert topology.bolts["node"].bolt_object.shell.script == "-s msgpack splitsentence.js"  # streamparse's rule
    assert conf["pystorm.log.path"] == "/var/log/routes" and conf["routes.owner"] == "beta team"
    assert conf["topology.workers"] == options["topology.workers"] == 3


@pytest.mark.parametrize("change, problem", [
    ({"topologies/routes.py": "from streamparse import Topology\nfrom routing import Numbers\n\n"
                              "class Routes(Topology):\n    numbers = Numbers.spec(par={'prod': 2})\n"},
     "'numbers''s parallelism is given per env ({'prod': 2}) and not for env 'beta'"),
    ({"topologies/routes.py": "from streamparse import Topology, JavaSpout\n\nclass Routes(Topology):\n"
                              "    kafka = JavaSpout.spec(full_class_name='org.apache.storm.kafka.KafkaSpout', "
                              "args_list=[], outputs=['msg'])\n"},
     "spout 'kafka' is a Java component (org.apache.storm.kafka.KafkaSpout): Squall runs no JVM"),
    ({"topologies/routes.py": "from streamparse import Topology, Spout\n\nclass Here(Spout):\n    outputs = ['x']\n\n"
                              "class Routes(Topology):\n    here = Here.spec()\n"},
     "spout 'here' runs routes.Here, which is not defined in a module under"),
    ({"topologies/routes.py": "from streamparse import Grouping, Topology\nfrom routing import Numbers, Sink\n\n"
                              "class Routes(Topology):\n    numbers = Numbers.spec()\n"
                              "    sink = Sink.spec(inputs={numbers: Grouping.custom_object('com.x.G', [])})\n"},
     "bolt 'sink' groups 'numbers' with a Java custom grouping: Squall runs no JVM"),
    ({"topologies/routes.py": "x = 1\n"}, "topologies/routes.py defines no streamparse Topology subclass"),
])
def test_what_squall_cannot_run_is_refused_naming_the_component_and_the_fix(
        project: Path, change: dict[str, str], problem: str) -> None:
    (project / "src" / "routing.py").write_text(ROUTING)
    write_config(project, beta={"nimbus": ""})
    for name, text in change.items():
        (project / name).write_text(text)
    with pytest.raises(StreamparseProjectError) as raised:
        load_project(project, "routes", "beta")
    assert problem in str(raised.value)


def test_the_topology_file_and_env_are_chosen_as_sparse_chooses_them(project: Path) -> None:
    (project / "src" / "routing.py").write_text(ROUTING)
    (project / "topologies" / "routes.py").write_text(ROUTES)
    with pytest.raises(StreamparseProjectError, match=r"several topology files in topologies/ \(routes, wordcount\): "
                                                      "name one with --topology NAME"):
        load_project(project)
    with pytest.raises(StreamparseProjectError, match=r"has no topologies/typo.py \(its topologies: routes, wordcount"):
        load_project(project, "typo")
    with pytest.raises(StreamparseProjectError, match=r"has no env 'qa' \(its envs: prod\)"):
        load_project(project, "wordcount", "qa")
    write_config(project, beta={"nimbus": ""})
    assert load_project(project, "wordcount").env is None  # several envs, none named: none applies
    with pytest.raises(StreamparseProjectError, match="no env is chosen: choose one with -e ENV"):
        load_project(project, "routes")
    shutil.copy(project / "topologies" / "wordcount.py", project / "topologies" / "topology.py")
    assert load_project(project, "topology").topology.name == "topology"  # storm jar's default names a real file
    shutil.move(project / "src", project / "source")
    with pytest.raises(StreamparseProjectError, match="wordcount has no src/ directory"):
        load_project(project, "wordcount")
    (project / "config.json").write_text("{not json")
    with pytest.raises(StreamparseProjectError, match="config.json is not valid JSON"):
        load_project(project, "wordcount")


# -- the package ----------------------------------------------------------------------------------


def test_the_package_holds_src_under_resources_where_streamparse_run_imports_it_from(
        project: Path, tmp_path: Path) -> None:
    """streamparse_run started as a worker starts a shell component — in the package's resources/ (Storm >= 1.0.3)
    or its root (Storm <= 1.0.2) — imports the spout and answers the multilang handshake and a ``next``."""
    (project / "src" / "bolts" / "__pycache__").mkdir()
    (project / "src" / "bolts" / "__pycache__" / "wordcount.cpython-311.pyc").write_bytes(b"stale")
    package = build_project_package(project, tmp_path / "wordcount.zip")
    with zipfile.ZipFile(package) as archive:
        assert sorted(archive.namelist()) == ["requirements.txt", "resources/bolts/__init__.py",
                                              "resources/bolts/wordcount.py", "resources/spouts/__init__.py",
                                              "resources/spouts/words.py"]
        assert archive.read("requirements.txt") == (project / "virtualenvs" / "wordcount.txt").read_bytes(), \
            "the topology's virtualenv spec is what each supervisor builds its environment from"
        archive.extractall(tmp_path / "code")
    for cwd in (tmp_path / "code" / "resources", tmp_path / "code"):
        child = subprocess.run(
            [str(BIN / "streamparse_run"), "-s json spouts.words.WordSpout"], cwd=cwd, capture_output=True,
            text=True, timeout=60, env={"PATH": os.environ["PATH"]},  # nothing of the project on PYTHONPATH
            input=json.dumps({"conf": {}, "pidDir": str(tmp_path), "context": {"taskid": 1, "componentid": "word_spout"}})
            + "\nend\n" + json.dumps({"command": "next"}) + "\nend\n")
        messages = [json.loads(m) for m in child.stdout.split("\nend\n") if m.strip()]
        assert messages[0]["pid"] > 0 and (tmp_path / str(messages[0]["pid"])).exists(), child.stderr
        commands = [m.get("command") for m in messages]
        assert [m.get("tuple") for m in messages if m.get("command") == "emit"] == [["dog"]], child.stderr
        assert commands.index("sync") > commands.index("emit"), commands  # then it exits: stdin has ended


def test_the_virtualenv_spec_and_wheels_travel_as_sparse_submit_would_use_them(project: Path, tmp_path: Path) -> None:
    """``virtualenv_name`` picks the spec, a project's wheels/ go with it, and an env with ``use_virtualenv``
    off ships no requirements (sparse submit would then run the hosts' streamparse_run)."""
    (project / "virtualenvs" / "shared.txt").write_text("squall_test_dep\n")
    (project / "wheels").mkdir()
    (project / "wheels" / "squall_test_dep-1.0-py3-none-any.whl").write_bytes(b"PK")
    config = json.loads((project / "config.json").read_text())
    config["envs"]["prod"]["virtualenv_name"] = "shared"
    config["envs"]["plain"] = {"use_virtualenv": False}
    (project / "config.json").write_text(json.dumps(config))
    with zipfile.ZipFile(build_project_package(project, tmp_path / "prod.zip", env="prod")) as archive:
        assert archive.read("requirements.txt") == b"squall_test_dep\n"
        assert "wheels/squall_test_dep-1.0-py3-none-any.whl" in archive.namelist()
    with zipfile.ZipFile(build_project_package(project, tmp_path / "plain.zip", env="plain")) as archive:
        assert not {"requirements.txt", "wheels/squall_test_dep-1.0-py3-none-any.whl"} & set(archive.namelist())


# -- the CLI --------------------------------------------------------------------------------------


def test_storm_jar_names_what_a_directory_lacks(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                project: Path) -> None:
    (tmp_path / "plain").mkdir()
    assert main(["jar", str(tmp_path / "plain")]) == 1
    assert "is neither a .py file nor a package directory (with __init__.py) nor a streamparse project " \
           "(a directory with config.json)" in capsys.readouterr().err
    assert main(["jar", str(project), "--topology", "typo"]) == 1
    assert "storm jar: wordcount has no topologies/typo.py (its topologies: wordcount)" in capsys.readouterr().err
    assert main(["jar", str(project), "3"]) == 1
    assert "a streamparse project takes no topology arguments" in capsys.readouterr().err
    assert main(["jar", str(REPO / "examples" / "wordcount.py"), "-e", "prod"]) == 1
    assert "-e/--environment names an env of a streamparse project's config.json" in capsys.readouterr().err
    (project / "topologies" / "wordcount.py").write_text("from streamparse import Topology\n\n"
                                                         "raise RuntimeError('no broker configured')\n")
    assert main(["jar", str(project)]) == 1
    assert "storm jar: wordcount/topologies/wordcount.py:3: RuntimeError: no broker configured" \
        in capsys.readouterr().err.replace(str(tmp_path) + "/", "")


def test_storm_version_passes_streamparse_s_own_check(tmp_path: Path) -> None:
    """streamparse's ``local_storm_version`` runs ``storm version`` from PATH and parses ``Storm x.y.z``."""
    check = subprocess.run([sys.executable, "-c", "from streamparse.util import local_storm_version; "
                                                  "print(local_storm_version())"],
                           env={**storm_on_path(tmp_path / "bin"), "LEIN_ROOT": "1"}, capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == STORM_VERSION


@pytest.fixture
def cluster(zk_conf: dict[str, Any], tmp_path: Path) -> Iterator[MiniCluster]:
    with ExitStack() as stack:
        yield MiniCluster(zk_conf, tmp_path, stack)


def sparse(project: Path, *argv: str) -> str:
    done = subprocess.run([str(BIN / "sparse"), *argv], cwd=project, env=SPARSE_ENV, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def table_rows(shown: str) -> list[list[str]]:
    """The rows of streamparse's table (texttable, which wraps a long cell over lines between its rules)."""
    rows: list[list[str]] = []
    lines: list[list[str]] = []
    for line in [*shown.splitlines(), "+"]:
        if line.startswith("|"):
            lines.append([cell.strip() for cell in line.strip("|").split("|")])
        elif line.startswith("+") and lines:
            rows.append(["".join(parts) for parts in zip(*lines)])
            lines = []
    return rows


def test_storm_jar_submits_the_project_and_sparse_list_and_kill_reach_squall_s_nimbus(
        cluster: MiniCluster, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(project, squall={"nimbus": f"127.0.0.1:{cluster.nimbus.port}", "use_ssh_for_nimbus": False,
                                  "use_virtualenv": False,
                                  "options": {"topology.max.spout.pending": 50}})
    client = {"nimbus.seeds": [f"127.0.0.1:{cluster.nimbus.port}"],
              **{k: cluster.conf[k] for k in ("storm.zookeeper.servers", "storm.zookeeper.port",
                                              "storm.zookeeper.root")}}
    options = [arg for key, value in client.items() for arg in ("-c", f"{key}={json.dumps(value)}")]
    assert main([*options, "jar", str(project), "-e", "squall", "-w", "2", "-a", "1"]) == 0
    submitted = capsys.readouterr().out
    assert submitted.startswith("Finished submitting topology: wordcount (wordcount-"), submitted
    topology_id = submitted.split("(")[1].rstrip(")\n")

    # nimbus runs what streamparse would have submitted (normalized as Storm does: each component's task count
    # in its conf), with the env's options and the command line's
    _, expected = streamparse_submission(project, "wordcount", "squall")
    expected = comparable(expected)
    for spec in [*expected.spouts.values(), *expected.bolts.values()]:
        spec.common.json_conf["topology.tasks"] = spec.common.parallelism_hint
    with nimbus_client({**cluster.conf, **client}) as nimbus:
        assert comparable(nimbus.getUserTopology(topology_id)) == expected
        conf = json.loads(nimbus.getTopologyConf(topology_id))
    assert (conf["topology.workers"], conf["topology.acker.executors"], conf["topology.max.spout.pending"]) == (2, 1, 50)
    # and a supervisor gets src/ under resources/
    code = download_code(cluster.supervisor_conf(cluster.supervisor_ids[0]), topology_id, 1, cluster.zk)
    with zipfile.ZipFile(code / "code.pkg") as archive:
        assert "resources/bolts/wordcount.py" in archive.namelist()

    shown = sparse(project, "list", "-e", "squall")
    header, *rows = table_rows(shown)
    assert len(rows) == 1, shown
    row = rows[0]
    assert (row[header.index("name")], row[header.index("id")], row[header.index("status")]) \
        == ("wordcount", topology_id, "ACTIVE")
    sparse(project, "kill", "-e", "squall", "-n", "wordcount", "--wait", "1")
    wait_until(lambda: "No topologies found." in sparse(project, "list", "-e", "squall"), 60,
               "the killed topology to be removed")


# -- end to end: the word count runs (needs the multilang executor) -------------------------------

#: The quickstart's spout cycles its words forever; for exact counts this one emits ROUNDS of them, reliably.
FINITE_WORDS = '''
from streamparse import Spout

WORDS = ["dog", "cat", "zebra", "elephant"]


class WordSpout(Spout):
    outputs = ["word"]

    def initialize(self, stormconf, context):
        self.total = int(stormconf["wordcount.rounds"]) * len(WORDS)
        self.sent = 0

    def next_tuple(self):
        if self.sent < self.total:
            self.emit([WORDS[self.sent % len(WORDS)]], tup_id=self.sent)
            self.sent += 1
'''
#: The latest count of each word (fields grouping: each word reaches one task), kept in a file per task.
TOTALS = '''
import json
import os

from streamparse import Bolt


class TotalsBolt(Bolt):
    def initialize(self, conf, context):
        self.path = os.path.join(conf["wordcount.out"], "%s.json" % context["taskid"])
        self.latest = {}

    def process(self, tup):
        word, count = tup.values
        self.latest[word] = count
        with open(self.path + ".tmp", "w") as out:
            json.dump(self.latest, out)
        os.replace(self.path + ".tmp", self.path)
'''
ROUNDS = 300
#: The quickstart's WordCountBolt counts a dog as 10.
EXPECTED = {"dog": 10 * ROUNDS, "cat": ROUNDS, "zebra": ROUNDS, "elephant": ROUNDS}


def counting_project(project: Path, out: Path, **env: Any) -> None:
    """The quickstart project with a finite spout and a bolt recording the counts it emits in ``out``."""
    (project / "src" / "spouts" / "words.py").write_text(FINITE_WORDS)
    (project / "src" / "bolts" / "totals.py").write_text(TOTALS)
    topology = (project / "topologies" / "wordcount.py").read_text()
    (project / "topologies" / "wordcount.py").write_text(
        topology.replace("from bolts.wordcount import WordCountBolt",
                         "from bolts.totals import TotalsBolt\nfrom bolts.wordcount import WordCountBolt")
        + '    totals = TotalsBolt.spec(inputs={count_bolt: Grouping.fields("word")}, par=2)\n')
    out.mkdir()
    config = json.loads((project / "config.json").read_text())
    config["envs"] = {"dev": {"nimbus": "", "use_ssh_for_nimbus": False, **env,
                              "options": {"wordcount.rounds": ROUNDS, "wordcount.out": str(out)}}}
    (project / "config.json").write_text(json.dumps(config, indent=4))


def counts(out: Path) -> dict[str, int]:
    merged: dict[str, int] = {}
    for path in out.glob("*.json"):
        merged.update(json.loads(path.read_text()))
    return merged


@pytest.mark.slow
def test_the_quickstart_word_count_runs_on_a_dev_cluster_via_storm_jar_with_exact_counts(
        zk_conf: dict[str, Any], project: Path, tmp_path: Path) -> None:
    out = tmp_path / "counts"
    counting_project(project, out)
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack)
        cluster.start("sup")
        assert cluster.cli("jar", str(project), "-w", "2") == 0
        wait_until(lambda: counts(out) == EXPECTED, 180, f"the counts to reach {EXPECTED}")
        assert cluster.cli("kill", "wordcount", "-w", "1") == 0


@pytest.mark.slow
def test_the_quickstart_word_count_runs_in_storm_local_with_exact_counts(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "counts"
    counting_project(project, out)
    # the virtualenv's storm by its absolute path, not activated: its bin/ (streamparse_run) is not on PATH
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    local = subprocess.Popen([str(BIN / "storm"), "local", str(project), "--local-ttl", "300"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_until(lambda: counts(out) == EXPECTED or local.poll() is not None, 180, f"the counts to reach {EXPECTED}")
        assert counts(out) == EXPECTED, local.stderr.read().decode() if local.poll() is not None else counts(out)
    finally:
        stop_group(local)


@pytest.mark.slow  # a process cluster, two topologies, an environment built with venv and pip, storm local: ~40 s
def test_the_unmodified_quickstart_counts_words_under_a_supervisor_started_as_a_service(
        zk_conf: dict[str, Any], project: Path, tmp_path: Path) -> None:
    """A service manager starts the supervisor by the absolute path of the virtualenv's ``storm``, with a PATH that
    holds no virtualenv. The streamparse page's quickstart lines, run as typed in a user's shell (the virtualenv
    active, the cluster in its storm.yaml), make the project with ``sparse quickstart`` and submit it with
    ``storm jar wordcount -e prod``: it counts words (its bolt logs ``counted [N] words`` to the worker log), its
    workers finding ``streamparse_run`` in the environment built from its virtualenvs/wordcount.txt, where pip found
    streamparse installed on the host; then ``storm local wordcount`` counts words too. So does the same project as
    topology ``plain``, which has no virtualenv spec: its workers run on the supervisor's Python."""
    plain = Path(shutil.copytree(project, tmp_path / "plain"))
    (plain / "topologies" / "wordcount.py").rename(plain / "topologies" / "plain.py")
    user = tmp_path / "user"
    user.mkdir()
    [block] = blocks_run_by(__file__, "docs/guide/streamparse.md")
    with ExitStack() as stack:
        # Storm's shell subprocess timeout (30 s), not the test clusters' 5 s: storm local's word count shares the
        # machine while the workers start theirs, and a starting subprocess must not be killed for being slow
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **{"topology.subprocess.timeout.secs": 30})
        cluster.start_nimbus()
        cluster.start_supervisor_as_a_service("sup", [free_port() for _ in range(2)])
        cluster.wait_supervisors(1)
        with open(tmp_path / "quickstart.out", "wb") as out:  # storm local runs on while the cluster's counts come
            lines = subprocess.Popen(["bash", "-ec", "\n".join(command_lines(block.code))], cwd=user,
                                     env=cluster.user_shell(tmp_path / "shell"), stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        stack.callback(stop_group, lines)
        assert cluster.cli("jar", str(plain)) == 0
        logs = log_dir(cluster.daemon_conf("sup"))
        for name in ("wordcount", "plain"):
            wait_until(lambda: re.search(r"counted \[|not on the worker's PATH", worker_logs(logs, name)), 300,
                       f"{name}'s word count bolt to log its counts")
            assert re.search(r"counted \[[0-9,]+\] words", worker_logs(logs, name)), worker_logs(logs, name)[-3000:]
            assert cluster.cli("kill", name, "-w", "1") == 0
        shown = (tmp_path / "quickstart.out").read_text
        assert lines.wait(120) == 0, shown()[-3000:]
        assert re.search(r"counted \[[0-9,]+\] words", shown()), shown()[-3000:]


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop ``process``, started in a session of its own, and every process it started, if it still runs."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    process.wait(30)


def worker_logs(logs: Path, topology: str) -> str:
    """What the workers of ``topology`` logged in the log directory ``logs``."""
    return "".join(path.read_text(errors="replace") for path in logs.glob(f"{topology}-*-worker-*.log"))
